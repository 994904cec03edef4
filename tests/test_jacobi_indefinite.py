"""Symmetric indefinite factorization M = G diag(J) G^T (``linalg_gpu.jacobi.indefinite.gjgt``).

Checked by the identity itself, ||M - G diag(J) G^T||_F <= C n eps growth ||M||_F (computed in
float64), by the full column rank of G (its singular values from numpy.linalg.svd), by the
inertia of M (numpy.linalg.eigh in float64, on spectra well away from zero), on singular,
definite and 2x2-pivot matrices, and for the errors. Inputs are fresh random matrices from ``rng``.
"""

from __future__ import annotations

import numpy as np
import pytest
from small_testlib import eps, sym_from_eigs

from linalg_gpu.jacobi.indefinite import gjgt

DTYPES = (np.float32, np.float64)
SIZES = (1, 2, 5, 17, 64)
C = 4                                  # the constant in the C n eps growth bound (measured: <= 1.3, at n <= 3)


def _random_symmetric(rng, n, dtype):
    X = rng.standard_normal((n, n))
    return ((X + X.T) / 2).astype(dtype)


def _well_separated(rng, n, npos, dtype):
    """Q diag(lam) Q^T with npos positive and n - npos negative eigenvalues, |lam| in [0.1, 10]."""
    mag = 10.0 ** rng.uniform(-1, 1, n)
    lam = np.concatenate([mag[:npos], -mag[npos:]])
    rng.shuffle(lam)
    return sym_from_eigs(rng, lam).astype(dtype), lam


def check_factor(M, G, J, info, tol=None):
    """Shapes, dtypes, signs, ordering, reconstruction and the full column rank of G; returns r."""
    n = M.shape[0]
    dt = M.dtype
    r = info["rank"]
    assert G.dtype == dt and J.dtype == dt
    assert G.shape == (n, r) and J.shape == (r,)
    assert set(J.tolist()) <= {1.0, -1.0}
    npos = int((J > 0).sum())
    assert (J[:npos] == 1).all() and (J[npos:] == -1).all(), "the +1 columns do not come first"
    assert sum(info["pivots"]) == r and set(info["pivots"]) <= {1, 2}
    assert info["growth"] >= 1
    tol = n * eps(dt) if tol is None else tol
    M64, G64 = M.astype(np.float64), G.astype(np.float64)
    R = M64 - (G64 * J.astype(np.float64)) @ G64.T
    # rounding, plus the dropped Schur complement of order n - r (entries <= tol max|M|) when r < n
    bound = C * n * eps(dt) * info["growth"] * np.linalg.norm(M64) + (n - r) * tol * np.abs(M64).max()
    assert np.linalg.norm(R) <= bound, f"||M - G J G^T||_F = {np.linalg.norm(R):.3g} > {bound:.3g}"
    if r:
        # every pivot is >= 0.17 tol max|M| in modulus (a 2x2 block's eigenvalues >= (1 - alpha^2) / 2 of
        # its largest entry) and the multipliers are bounded, so sigma_min / sigma_max of G is
        # >= sqrt(tol / growth) / cond(L); 100 n covers cond(L) for these sizes
        s = np.linalg.svd(G64, compute_uv=False)
        assert s[-1] / s[0] > np.sqrt(tol / info["growth"]) / (100 * n), f"G not of full column rank: {s}"
    return r


# ---------------------------------------------------------------------------------------------
# reconstruction, rank, inertia


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_random_symmetric_reconstruction(rng, dtype, n):
    M = _random_symmetric(rng, n, dtype)
    G, J, info = gjgt(M)
    r = check_factor(M, G, J, info)
    if dtype == np.float64:
        assert r == n                                    # a rank drop to n eps is improbable (~1e-12)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_inertia_of_well_separated_spectra(rng, dtype, n):
    npos = int(rng.integers(0, n + 1))
    M, lam = _well_separated(rng, n, npos, dtype)
    G, J, info = gjgt(M)
    assert check_factor(M, G, J, info) == n
    w = np.linalg.eigh(M.astype(np.float64))[0]
    assert int((w > 0).sum()) == npos and int((w < 0).sum()) == n - npos
    assert int((J > 0).sum()) == npos and int((J < 0).sum()) == n - npos
    # cond(M) <= 100 keeps G well conditioned: sigma_min(G)^2 <= |lambda|_min and the growth is small
    s = np.linalg.svd(G.astype(np.float64), compute_uv=False)
    assert s[-1] / s[0] > 1e-3


@pytest.mark.parametrize("n, r", [(5, 1), (17, 9), (64, 40), (30, 29)])
def test_singular_gives_the_rank(rng, n, r):
    B = rng.standard_normal((n, r))
    s = rng.choice([-1.0, 1.0], r) * 10.0 ** rng.uniform(-1, 1, r)
    M = (B * s) @ B.T
    M = (M + M.T) / 2
    G, J, info = gjgt(M)
    assert check_factor(M, G, J, info) == r
    assert int((J > 0).sum()) == int((s > 0).sum())      # B of full column rank: inertia of diag(s)


@pytest.mark.parametrize("dtype", DTYPES)
def test_definite(rng, dtype):
    n = 33
    M, _ = _well_separated(rng, n, n, dtype)
    G, J, info = gjgt(M)
    assert check_factor(M, G, J, info) == n
    assert (J == 1).all() and set(info["pivots"]) == {1}     # max |m_ij| lies on the diagonal
    M64, G64 = M.astype(np.float64), G.astype(np.float64)
    assert np.linalg.norm(M64 - G64 @ G64.T) <= C * n * eps(dtype) * info["growth"] * np.linalg.norm(M64)
    G, J, info = gjgt(-M)
    assert check_factor(-M, G, J, info) == n
    assert (J == -1).all() and set(info["pivots"]) == {1}


@pytest.mark.parametrize("dtype", DTYPES)
def test_tol_sets_the_numerical_rank(rng, dtype):
    n = 12
    lam = np.array([5.0, -3.0, 2.0, -1.0, 1e-9, -1e-9] + [0.5] * (n - 6))
    M = sym_from_eigs(rng, lam).astype(dtype)
    G, J, info = gjgt(M, tol=1e-4)                       # the two 1e-9 eigenvalues are below tol
    assert check_factor(M, G, J, info, tol=1e-4) == n - 2
    assert int((J > 0).sum()) == n - 4 and int((J < 0).sum()) == 2


# ---------------------------------------------------------------------------------------------
# 2x2 pivots


@pytest.mark.parametrize("dtype", DTYPES)
def test_swap_blocks_need_2x2_pivots(rng, dtype):
    k = 4
    M = np.kron(np.eye(k), np.array([[0.0, 1.0], [1.0, 0.0]]))        # eigenvalues +-1, k each
    P = rng.permutation(2 * k)
    M = (M[P][:, P] * 3.0).astype(dtype)
    G, J, info = gjgt(M)
    assert check_factor(M, G, J, info) == 2 * k
    assert info["pivots"] == [2] * k
    assert J.tolist() == [1.0] * k + [-1.0] * k


@pytest.mark.parametrize("n", (2, 3, 17, 64))
@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_diagonal(rng, dtype, n):
    M = _random_symmetric(rng, n, np.float64)
    np.fill_diagonal(M, 0)
    M = M.astype(dtype)
    G, J, info = gjgt(M)
    check_factor(M, G, J, info)
    assert info["pivots"][0] == 2                        # mu1 = 0 < alpha mu0 at the first step


def test_two_by_two_indefinite_block(rng):
    a, c = rng.uniform(-0.3, 0.3, 2)
    b = rng.choice([-1.0, 1.0]) * rng.uniform(1, 2)
    M = np.array([[a, b], [b, c]])
    G, J, info = gjgt(M)
    assert info["pivots"] == [2] and J.tolist() == [1.0, -1.0]
    check_factor(M, G, J, info)
    # the columns are Q diag(sqrt|l|): orthogonal, with the squared norms |eigenvalues|
    w = np.linalg.eigvalsh(M)
    assert abs(G[:, 0] @ G[:, 1]) <= 8 * eps(np.float64) * abs(b)
    np.testing.assert_allclose((G ** 2).sum(axis=0), [w[1], -w[0]], rtol=8 * eps(np.float64))


# ---------------------------------------------------------------------------------------------
# trivial inputs


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_and_zero(dtype):
    G, J, info = gjgt(np.zeros((0, 0), dtype=dtype))
    assert G.shape == (0, 0) and J.shape == (0,) and G.dtype == J.dtype == dtype
    assert info == {"rank": 0, "pivots": [], "growth": 1.0}
    G, J, info = gjgt(np.zeros((6, 6), dtype=dtype))
    assert G.shape == (6, 0) and J.shape == (0,) and G.dtype == J.dtype == dtype
    assert info["rank"] == 0 and info["pivots"] == []


def test_one_by_one_and_list_input():
    G, J, info = gjgt(np.array([[-4.0]], dtype=np.float32))
    assert G.tolist() == [[2.0]] and J.tolist() == [-1.0] and G.dtype == np.float32
    G, J, info = gjgt([[9.0]])
    assert G.tolist() == [[3.0]] and J.tolist() == [1.0] and G.dtype == np.float64


def test_input_not_modified(rng):
    M = _random_symmetric(rng, 9, np.float64)
    M0 = M.copy()
    gjgt(M)
    np.testing.assert_array_equal(M, M0)


# ---------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize("M", [np.zeros((3, 4)), np.zeros(3), np.zeros((2, 2, 2)), np.float64(1.0)],
                         ids=["non-square", "1-D", "3-D", "0-D"])
def test_bad_shape(M):
    with pytest.raises(ValueError, match="M must be a square 2-D matrix"):
        gjgt(M)


def test_bad_dtypes():
    with pytest.raises(TypeError, match="M has complex dtype.*not supported yet"):
        gjgt(np.eye(3, dtype=np.complex128))
    with pytest.raises(TypeError, match="M has integer"):
        gjgt(np.eye(3, dtype=np.int64))
    with pytest.raises(TypeError, match="M has"):
        gjgt(np.eye(3, dtype=np.float16))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_not_finite(rng, bad):
    M = _random_symmetric(rng, 5, np.float64)
    M[1, 3] = M[3, 1] = bad
    with pytest.raises(ValueError, match="M must be finite"):
        gjgt(M)


@pytest.mark.parametrize("dtype", DTYPES)
def test_not_symmetric(rng, dtype):
    M = _random_symmetric(rng, 6, dtype)
    M[4, 1] += 1e4 * 6 * eps(dtype) * np.abs(M).max()
    with pytest.raises(ValueError, match=r"M is not symmetric: M\[(4, 1|1, 4)\]"):
        gjgt(M)
    M = _random_symmetric(rng, 6, dtype)
    M[4, 1] += eps(dtype) * np.abs(M).max()                  # rounding-level asymmetry is accepted
    check_factor(M, *gjgt(M))


@pytest.mark.parametrize("tol", [0, 1, -1e-3, 2.0, np.nan, np.inf, True, "1e-6"])
def test_bad_tol(tol):
    with pytest.raises(ValueError, match="tol must be a number in"):
        gjgt(np.eye(3), tol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("side", ["subnormal", "huge"])
def test_extreme_scales(rng, dtype, side):
    """M of subnormal entries broke the 2x2 pivots (an IndexError on the NaN they made; review finding);
    M near the largest number must not overflow either. M 2^-2k = G' J G'^T with G' = G 2^-k (exact),
    checked as the unscaled identity, for ten random M."""
    fi = np.finfo(dtype)
    k = (fi.minexp - (fi.nmant - 20)) // 2 if side == "subnormal" else (fi.maxexp - 4) // 2
    for _ in range(10):
        M = np.ldexp(_random_symmetric(rng, 6, dtype), 2 * k)
        G, J, info = gjgt(M)
        assert np.isfinite(G).all()
        check_factor(np.ldexp(M, -2 * k), np.ldexp(G, -k), J, info)
