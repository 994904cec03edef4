"""Generalized SVD by the implicit Hari-Zimmermann algorithm (``linalg_gpu.jacobi.gsvd``, numpy path;
``blocked.gsvd`` and ``congruence.block_hz`` run on numpy as the CPU twins of the GPU path).

Checked by the defining identities, computed in float64 (complex128): F Z = U diag(alpha), G Z = V diag(beta),
U^H U = V^H V = I, alpha^2 + beta^2 = 1, the order of alpha / beta, F = U diag(alpha) X with X Z = I (to
c n eps cond(Z), the paper's measure); against LAPACK (scipy.linalg.eigh of the pencil (F^H F, G^H G)
with G well conditioned); the 2 x 2 transformation itself (Z^H A Z diagonal, Z^H B Z = I, including the
exceptions); bitwise repeatability; the blocked variant against the pointwise one; and the errors. The
complex case (section 2.1.1) runs the same checks on complex matrices, and a real pair given as complex
must give the real pair's alpha, beta. Bounds are c n eps of the dtype. Inputs are fresh random matrices
from ``rng``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from small_testlib import eps, random_orthogonal
from small_testlib import hi as _hi
from small_testlib import randn as _randn

from linalg_gpu.jacobi import blocked
from linalg_gpu.jacobi.congruence import block_hz
from linalg_gpu.jacobi.gsvd import gsvd, hz_transform

DTYPES = (np.float32, np.float64)
CDTYPES = (np.complex64, np.complex128)
SHAPES = ((1, 1, 1), (5, 5, 5), (30, 25, 20), (50, 40, 40))
C = 8                                  # the constant in the c n eps bounds (measured: <= 1.4)


def _well_conditioned(rng, m, n, dtype=np.float64):
    """Q1 diag(s) Q2^T with orthonormal Q1 (m, n), Q2 (n, n) and s in [1, 2]: cond <= 2."""
    Q1 = np.linalg.qr(rng.standard_normal((m, n)))[0]
    return ((Q1 * np.linspace(1, 2, n)) @ random_orthogonal(rng, n).T).astype(dtype)


def _orth_err(X):
    X = _hi(X)
    return np.abs(X.conj().T @ X - np.eye(X.shape[1])).max() if X.size else 0.0


def check_gsvd(F, G, U, V, Z, alpha, beta, X=None, c=C):
    """The GSVD identities in float64 to c n eps (X's to c n eps cond(Z)); returns cond(Z)."""
    (mF, n), mG = F.shape, G.shape[0]
    dt = F.dtype
    bound = c * max(n, 1) * eps(dt)
    for x in (U, V, Z) + ((X,) if X is not None else ()):
        assert x.dtype == dt and np.isfinite(x).all()
    for x in (alpha, beta):
        assert x.dtype == np.finfo(dt).dtype and np.isfinite(x).all()
    assert U.shape == (mF, n) and V.shape == (mG, n) and Z.shape == (n, n)
    assert alpha.shape == beta.shape == (n,)
    F64, G64, U64, V64, Z64, a, b = (_hi(x) for x in (F, G, U, V, Z, alpha, beta))
    nZ = np.linalg.norm(Z64, 2)
    ef = np.linalg.norm(F64 @ Z64 - U64 * a) / (max(np.linalg.norm(F64, 2), np.finfo(dt).tiny) * nZ)
    eg = np.linalg.norm(G64 @ Z64 - V64 * b) / (np.linalg.norm(G64, 2) * nZ)
    assert ef <= bound and eg <= bound, (ef, eg)
    assert _orth_err(U) <= bound and _orth_err(V) <= bound, (_orth_err(U), _orth_err(V))
    assert np.abs(a * a + b * b - 1).max() <= bound
    assert (beta > 0).all() and (alpha >= 0).all()
    assert (np.diff(a / b) <= 0).all(), "alpha / beta not descending"
    cz = np.linalg.cond(Z64)
    if X is not None:
        X64 = _hi(X)
        if np.linalg.norm(F64):
            assert np.linalg.norm(F64 - (U64 * a) @ X64) <= bound * cz * np.linalg.norm(F64)
        assert np.linalg.norm(G64 - (V64 * b) @ X64) <= bound * cz * np.linalg.norm(G64)
        assert np.abs(X64 @ Z64 - np.eye(n)).max() <= bound * cz
    return cz


# ---------------------------------------------------------------------------------------------
# gsvd: identities, LAPACK, rank deficiency, repeatability, info


@pytest.mark.parametrize("dtype", DTYPES + CDTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_gsvd_identities(rng, dtype, shape):
    mF, mG, n = shape
    F = _randn(rng, (mF, n), dtype)
    G = _randn(rng, (mG, n), dtype)
    U, V, Z, alpha, beta, X = gsvd(F, G, True)
    check_gsvd(F, G, U, V, Z, alpha, beta, X)
    U1, V1, Z1, a1, b1 = gsvd(F, G)                        # return_x changes nothing else
    for x, y in zip((U, V, Z, alpha, beta), (U1, V1, Z1, a1, b1), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("shape", SHAPES)
def test_generalized_eigenvalues_against_scipy(rng, shape):
    """(alpha / beta)^2 are the eigenvalues of the pencil (F^T F, G^T G); Z its eigenvectors."""
    mF, mG, n = shape
    F = rng.standard_normal((mF, n))
    G = _well_conditioned(rng, mG, n)
    U, V, Z, alpha, beta = gsvd(F, G)
    check_gsvd(F, G, U, V, Z, alpha, beta)
    A, B = F.T @ F, G.T @ G
    ref = scipy.linalg.eigh(A, B, eigvals_only=True)[::-1]          # descending
    lam = (alpha / beta) ** 2
    assert np.abs(lam - ref).max() <= C * n * eps(np.float64) * ref[0]
    R = A @ Z - (B @ Z) * lam                                       # A Z = B Z diag(lam)
    assert np.linalg.norm(R) <= C * n * eps(np.float64) * np.linalg.norm(A) * np.linalg.norm(Z, 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,r", [(20, 7), (12, 6), (6, 3)])
def test_rank_deficient_f(rng, dtype, n, r):
    """F = X Y of rank r < n: n - r zero alphas (to c n eps), U still orthonormal (measured over 600
    draws each: <= 1.1 and <= 1.6 n eps); fixed matrices in ``test_rank_deficient_f_cases``."""
    F = (rng.standard_normal((n + 10, r)) @ rng.standard_normal((r, n))).astype(dtype)
    G = rng.standard_normal((n + 5, n)).astype(dtype)
    U, V, Z, alpha, beta = gsvd(F, G)
    check_gsvd(F, G, U, V, Z, alpha, beta)
    assert (alpha[:r] > 100 * n * eps(dtype)).all()
    assert (alpha[r:] <= C * n * eps(dtype)).all(), alpha[r:]


def _rank_deficient_cases():
    tridiag = np.array([[2.0, 1.0, 0.0], [1.0, 2.0, 1.0], [0.0, 1.0, 2.0]])
    row = np.zeros((3, 3))
    row[0] = [1.0, 2.0, 3.0]
    return {
        "zero column": (np.array([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0], [5.0, 6.0, 0.0]]), tridiag, 2),
        "ones 6x6": (np.ones((6, 6)), np.eye(6), 1),
        "outer(1..6)": (np.outer(np.arange(1.0, 7.0), np.arange(1.0, 7.0)), np.eye(6), 1),
        "one nonzero row": (row, np.eye(3), 1),
        "F = 0": (np.zeros((4, 3)), np.eye(3), 0),
    }


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(_rank_deficient_cases()))
def test_rank_deficient_f_cases(dtype, case):
    """Rank-deficient F: its zero alphas are exactly 0 and U stays orthonormal (completed there)."""
    F, G, r = _rank_deficient_cases()[case]
    F, G = F.astype(dtype), G.astype(dtype)
    n = F.shape[1]
    with np.errstate(over="ignore"):
        U, V, Z, alpha, beta = gsvd(F, G)
    assert (alpha[r:] <= C * n * eps(dtype)).all()
    assert _orth_err(U) <= C * n * eps(dtype), _orth_err(U)


def _nearly_singular_g_pair(rng, n=40):
    """float32 F of condition 100 and G with one singular value 1e-5 (alpha / beta up to about 1e5)."""
    F = (np.linalg.qr(rng.standard_normal((n + 5, n)))[0] * np.logspace(0, -2, n)) @ random_orthogonal(rng, n).T
    s = np.r_[np.linspace(1, 2, n - 1), 1e-5]
    G = (np.linalg.qr(rng.standard_normal((n + 3, n)))[0] * s) @ random_orthogonal(rng, n).T
    return F.astype(np.float32), G.astype(np.float32)


def test_no_zero_alpha_for_nonsingular_f(rng):
    """F of condition 100 and G with one singular value 1e-5 (alpha / beta up to about 1e5), float32: no
    alpha is set to 0, and alpha / beta is that of F R_G^-1 in float64 (G = Q_G R_G) to its first digits
    (measured <= 1.2 %). With ||F Z||_F in place of ||F||_F the zero threshold grew with the largest
    alpha / beta and zeroed alphas of about 0.01 in every such pair."""
    F, G = _nearly_singular_g_pair(rng)
    R = np.linalg.qr(_hi(G))[1]
    ref = np.linalg.svd(scipy.linalg.solve_triangular(R, _hi(F).T, trans="T").T, compute_uv=False)
    for U, V, Z, alpha, beta in (gsvd(F, G), blocked.gsvd(F, G, block=16)):
        check_gsvd(F, G, U, V, Z, alpha, beta)
        assert (alpha > 0).all()
        assert np.abs((alpha / beta) / ref - 1).max() <= 0.05


def test_blocked_gsvd_does_not_stop_on_c1_alone():
    """Regression, a fixed pair of ``_nearly_singular_g_pair`` (seed 37330895132352761550403121801918112807,
    found by ``test_no_zero_alpha_for_nonsingular_f``): blocked.gsvd stopped after its 8th sweep, the first
    without a big transformation (criterion C1), with U orthogonal to 1.7e-4 only (bound 8 n eps = 3.8e-5;
    the pointwise path 8.0e-7): that sweep's transformations were the identity to one rounding but moved
    the smallest column of F (alpha / beta 7e-3) against the largest (4e4) by a lot. Stopping on the
    relative off-diagonal takes one sweep more and U to 7.5e-7. Over 2000 seeds of this pair the C1 stop
    failed the bound 13 times (up to 4x); the relative off-diagonal stop stays <= 0.022 of it."""
    F, G = _nearly_singular_g_pair(np.random.default_rng(37330895132352761550403121801918112807))
    U, V, Z, alpha, beta, info = blocked.gsvd(F, G, block=16, return_info=True)
    assert info["converged"] and (alpha > 0).all()
    check_gsvd(F, G, U, V, Z, alpha, beta)
    assert _orth_err(U) <= 8 * eps(np.float32) * np.sqrt(40), _orth_err(U)   # 8 tol (tol = sqrt(n) eps)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_column_of_f(rng, dtype):
    n = 20
    F = rng.standard_normal((n + 3, n)).astype(dtype)
    F[:, rng.integers(n)] = 0
    G = rng.standard_normal((n + 5, n)).astype(dtype)
    U, V, Z, alpha, beta = gsvd(F, G)
    assert alpha[-1] <= C * eps(dtype) and (alpha[:-1] > 0).all()
    assert _orth_err(U) <= C * n * eps(dtype), _orth_err(U)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bitwise_repeatable(rng, dtype):
    F = rng.standard_normal((30, 20)).astype(dtype)
    G = rng.standard_normal((25, 20)).astype(dtype)
    first = gsvd(F, G, True)
    second = gsvd(F.copy(), G.copy(), True)
    for x, y in zip(first, second, strict=True):
        np.testing.assert_array_equal(x, y)


def test_info(rng):
    F, G = rng.standard_normal((30, 20)), rng.standard_normal((25, 20))
    *res, info = gsvd(F, G, return_info=True)
    assert len(res) == 5
    assert {"sweeps", "converged", "transformations", "big"} <= set(info)
    assert info["converged"] is True and 2 <= info["sweeps"] <= 30
    assert 0 < info["big"] <= info["transformations"]
    assert info["transformations"] >= 20 * 19 // 2                  # the first sweep moves every pair
    *_, X, info_x = gsvd(F, G, True, return_info=True)
    assert X.shape == (20, 20) and info_x["sweeps"] == info["sweeps"]
    *_, loose = gsvd(F, G, max_sweeps=1, return_info=True)
    assert loose["converged"] is False and loose["sweeps"] == 1
    with pytest.raises(np.linalg.LinAlgError, match="max_sweeps=1"):
        gsvd(F, G, max_sweeps=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty(dtype):
    F, G = np.zeros((3, 0), dtype), np.zeros((2, 0), dtype)
    U, V, Z, alpha, beta, X, info = gsvd(F, G, True, return_info=True)
    assert U.shape == (3, 0) and V.shape == (2, 0) and Z.shape == X.shape == (0, 0)
    assert alpha.shape == beta.shape == (0,) and alpha.dtype == dtype
    assert info["converged"] and info["sweeps"] == 0


# ---------------------------------------------------------------------------------------------
# the 2 x 2 transformation


@pytest.mark.parametrize("dtype", DTYPES)
def test_hz_transform_random_pivots(rng, dtype):
    """Pivot blocks of random column pairs, scaled over 1e-3..1e3 (|b'_ij| <= 0.9, t = sqrt(1 - b'_ij^2)):
    Z^T B Z = I and Z^T A Z diagonal to c eps / t^2 (normwise: one two-sided step, measured <= 5 and
    <= 2), and the new diagonal of A descending (the sorting swap)."""
    k = 500
    Fc = rng.standard_normal((k, 6, 2)) * 10.0 ** rng.uniform(-3, 3, (k, 1, 2))
    Gc = rng.standard_normal((k, 6, 2)) * 10.0 ** rng.uniform(-3, 3, (k, 1, 2))
    A = (Fc.transpose(0, 2, 1) @ Fc).astype(dtype)
    B = (Gc.transpose(0, 2, 1) @ Gc).astype(dtype)
    x = B[:, 0, 1].astype(np.float64) / np.sqrt(B[:, 0, 0].astype(np.float64) * B[:, 1, 1])
    keep = np.abs(x) <= 0.9
    A, B, t2 = A[keep], B[keep], 1 - x[keep] ** 2
    z11, z12, z21, z22, rotate, big = hz_transform(A[:, 0, 0], A[:, 1, 1], A[:, 0, 1], B[:, 0, 0], B[:, 1, 1],
                                                    B[:, 0, 1], dtype(2 * eps(dtype)))
    assert rotate.all() and big.dtype == bool
    Zm = np.stack([np.stack([z11, z12], -1), np.stack([z21, z22], -1)], -2).astype(np.float64)
    Zt = Zm.transpose(0, 2, 1)
    DA = Zt @ A.astype(np.float64) @ Zm
    DB = Zt @ B.astype(np.float64) @ Zm
    assert (np.abs(DB - np.eye(2)).max(axis=(1, 2)) * t2 <= C * eps(dtype)).all()
    d1, d2 = DA[:, 0, 0], DA[:, 1, 1]
    assert (np.abs(DA[:, 0, 1]) * t2 <= C * eps(dtype) * np.maximum(d1, d2)).all()
    assert (d1 >= d2).all(), "new diagonal of A not descending"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_hz_transform_exception(rng, dtype, sign):
    """A proportional to B (a_ii = a_jj = a, a_ij = a b_ij, b_ii = b_jj = 1): cot(2 theta) = 0 / 0; the
    exception's Z still gives Z^T B Z = I and Z^T A Z = a I."""
    k = 200
    a = rng.uniform(0.5, 5, k).astype(dtype)
    x = (sign * rng.uniform(0.05, 0.9, k)).astype(dtype)
    one = np.ones(k, dtype)
    z11, z12, z21, z22, rotate, big = hz_transform(a, a, a * x, one, one, x, dtype(2 * eps(dtype)))
    assert rotate.all() and big.all()
    Zm = np.stack([np.stack([z11, z12], -1), np.stack([z21, z22], -1)], -2).astype(np.float64)
    A = np.stack([np.stack([a, a * x], -1), np.stack([a * x, a], -1)], -2).astype(np.float64)
    B = np.stack([np.stack([one, x], -1), np.stack([x, one], -1)], -2).astype(np.float64)
    DA = Zm.transpose(0, 2, 1) @ A @ Zm
    DB = Zm.transpose(0, 2, 1) @ B @ Zm
    assert np.abs(DB - np.eye(2)).max() <= C * eps(dtype)
    assert np.abs(DA / a[:, None, None].astype(np.float64) - np.eye(2)).max() <= C * eps(dtype)


# ---------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize("F,G,exc,match", [
    (np.ones((3, 2), dtype=np.complex128), np.eye(2), TypeError, "same dtype"),
    (np.ones((3, 2)), np.eye(2, dtype=np.complex64), TypeError, "same dtype"),
    (np.ones((3, 2), dtype=np.clongdouble), np.eye(2, dtype=np.clongdouble), TypeError, "complex64 and complex128"),
    (np.ones((3, 2), dtype=np.float32), np.eye(2), TypeError, "same dtype"),
    (np.ones((3, 2), dtype=np.int64), np.eye(2, dtype=np.int64), TypeError, "integer"),
    (np.ones((3, 2)), np.eye(3), ValueError, "same number of columns"),
    (np.ones((3, 3)), np.ones((2, 3)), ValueError, "G must have at least as many rows"),
    (np.ones((2, 3)), np.eye(3), ValueError, "F must have at least as many rows"),
    (np.ones(3), np.eye(3), ValueError, "2-D"),
    (np.array([[1.0, np.nan], [0.0, 1.0]]), np.eye(2), ValueError, "finite"),
    (np.eye(2), np.array([[1.0, 0.0], [np.inf, 1.0]]), ValueError, "finite"),
])
def test_bad_input(F, G, exc, match):
    with pytest.raises(exc, match=match):
        gsvd(F, G)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("defect", ["duplicate columns", "zero column"])
def test_rank_deficient_g(rng, dtype, defect):
    F = rng.standard_normal((8, 5)).astype(dtype)
    G = rng.standard_normal((7, 5)).astype(dtype)
    if defect == "duplicate columns":
        G[:, 3] = G[:, 0]
    else:
        G[:, 1] = 0
    with pytest.raises(np.linalg.LinAlgError, match="full column rank"):
        gsvd(F, G)


@pytest.mark.parametrize("kwargs", [{"tol": 0}, {"tol": 1.0}, {"tol": float("inf")}, {"max_sweeps": 0},
                                    {"max_sweeps": 1.5}])
def test_bad_options(kwargs):
    with pytest.raises(ValueError, match="tol must be" if "tol" in kwargs else "max_sweeps must be"):
        gsvd(np.eye(3), np.eye(3), **kwargs)


# ---------------------------------------------------------------------------------------------
# the blocked variant and its inner Jacobi, on numpy


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(40, 40, 40), (60, 50, 40), (100, 100, 100), (130, 120, 100)])
def test_blocked_gsvd(rng, dtype, shape):
    """blocked.gsvd (block = 16: several block pairs and a pad) on F of condition 100 and G of condition 2:
    the identities, and alpha, beta as the pointwise path's (float64: relative, measured <= 5e-15;
    float32: absolute, alpha and beta being <= 1)."""
    mF, mG, n = shape
    F = (np.linalg.qr(rng.standard_normal((mF, n)))[0] * np.logspace(0, -2, n)) @ random_orthogonal(rng, n).T
    F = F.astype(dtype)
    G = _well_conditioned(rng, mG, n, dtype)
    U, V, Z, alpha, beta, X, info = blocked.gsvd(F, G, True, block=16, return_info=True)
    assert info["converged"]
    check_gsvd(F, G, U, V, Z, alpha, beta, X)
    a0, b0 = gsvd(F, G)[3:5]
    if dtype == np.float64:
        assert np.abs(alpha / a0 - 1).max() <= 1e-11 and np.abs(beta / b0 - 1).max() <= 1e-11
        assert np.abs((alpha / beta) / (a0 / b0) - 1).max() <= 1e-11
    else:
        assert np.abs(alpha - a0).max() <= C * n * eps(dtype) and np.abs(beta - b0).max() <= C * n * eps(dtype)


def test_blocked_gsvd_rank_deficient_f(rng):
    n, r = 40, 9
    F = rng.standard_normal((n + 10, r)) @ rng.standard_normal((r, n))
    G = rng.standard_normal((n + 10, n))
    U, V, Z, alpha, beta, info = blocked.gsvd(F, G, block=16, return_info=True)
    assert info["converged"]
    check_gsvd(F, G, U, V, Z, alpha, beta)
    assert (alpha[r:] <= C * n * eps(np.float64)).all()


def test_blocked_gsvd_zero_column_of_f(rng):
    n = 40
    F = rng.standard_normal((n + 10, n))
    F[:, rng.integers(n)] = 0
    G = rng.standard_normal((n + 10, n))
    with np.errstate(invalid="ignore"):
        U, V, Z, alpha, beta, info = blocked.gsvd(F, G, block=16, return_info=True)
    assert info["converged"] and alpha.shape == (n,)


# ---------------------------------------------------------------------------------------------
# the complex case (section 2.1.1)


def _unitary(rng, n):
    Q, R = np.linalg.qr(_randn(rng, (n, n), np.complex128))
    return Q * (np.diagonal(R) / np.abs(np.diagonal(R)))


@pytest.mark.parametrize("shape", SHAPES)
def test_complex_generalized_eigenvalues_against_scipy(rng, shape):
    """(alpha / beta)^2 are the eigenvalues of the Hermitian pencil (F^H F, G^H G), G of condition 2."""
    mF, mG, n = shape
    F = _randn(rng, (mF, n), np.complex128)
    Q1 = np.linalg.qr(_randn(rng, (mG, n), np.complex128))[0]
    G = (Q1 * np.linspace(1, 2, n)) @ _unitary(rng, n).conj().T
    U, V, Z, alpha, beta, X = gsvd(F, G, True)
    check_gsvd(F, G, U, V, Z, alpha, beta, X)
    A, B = F.conj().T @ F, G.conj().T @ G
    ref = scipy.linalg.eigh(A, B, eigvals_only=True)[::-1]
    lam = (alpha / beta) ** 2
    assert np.abs(lam - ref).max() <= C * n * eps(np.float64) * ref[0]
    R = A @ Z - (B @ Z) * lam
    assert np.linalg.norm(R) <= C * n * eps(np.float64) * np.linalg.norm(A) * np.linalg.norm(Z, 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_complex_of_a_real_pair(rng, dtype):
    """A real pair given as complex: the complex iteration (x = |b'|, phases +-1) gives the real one's alpha
    and beta (the generalized singular values are unique) to c n eps."""
    n = 20
    F = rng.standard_normal((n + 4, n)).astype(dtype)
    G = _well_conditioned(rng, n + 2, n, dtype)
    cdt = np.result_type(dtype, np.complex64)
    _, _, Zc, ac, bc = gsvd(F.astype(cdt), G.astype(cdt))
    _, _, Zr, ar, br = gsvd(F, G)
    assert np.abs(ac - ar).max() <= C * n * eps(dtype) and np.abs(bc - br).max() <= C * n * eps(dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("case", ["random", "equal diagonals"])
def test_hz_transform_complex_pivots(rng, dtype, case):
    """Complex pivot blocks (|b'_ij| <= 0.9), scaled over 1e-3..1e3: Z^H B Z = I and Z^H A Z diagonal to
    c eps / t^2, the new diagonal descending. "equal diagonals": a'_ii = a'_jj, so h = 0 and gamma = +-pi/2,
    with v = Im(e^{-i zeta} a'_ij) of both signs (the paper's sin(gamma) = 1 fails for v < 0)."""
    k = 500
    Fc = _randn(rng, (k, 6, 2), np.complex128) * 10.0 ** rng.uniform(-3, 3, (k, 1, 2))
    Gc = _randn(rng, (k, 6, 2), np.complex128) * 10.0 ** rng.uniform(-3, 3, (k, 1, 2))
    A = Fc.conj().transpose(0, 2, 1) @ Fc
    B = Gc.conj().transpose(0, 2, 1) @ Gc
    if case == "equal diagonals":                       # diag(B) = I and a_ii = a_jj exactly: h = 0
        d = 1 / np.sqrt(np.diagonal(B, axis1=1, axis2=2).real)
        B = B * d[:, :, None] * d[:, None, :]
        B[:, 0, 0] = B[:, 1, 1] = 1
        A[:, 1, 1] = A[:, 0, 0]
        A[:, 0, 1] = A[:, 0, 0] * rng.uniform(0, 0.9, k) * np.exp(1j * rng.uniform(-np.pi, np.pi, k))
        A[:, 1, 0] = A[:, 0, 1].conj()
    A, B = A.astype(dtype), B.astype(dtype)
    x = np.abs(B[:, 0, 1].astype(np.complex128)) / np.sqrt(B[:, 0, 0].real.astype(np.float64) * B[:, 1, 1].real)
    keep = x <= 0.9
    A, B, t2 = A[keep], B[keep], 1 - x[keep] ** 2
    tol = np.finfo(dtype).dtype.type(2 * eps(dtype))
    z11, z12, z21, z22, rotate, big = hz_transform(A[:, 0, 0].real, A[:, 1, 1].real, A[:, 0, 1], B[:, 0, 0].real,
                                                    B[:, 1, 1].real, B[:, 0, 1], tol)
    assert rotate.all() and z11.dtype == dtype
    Zm = _hi(np.stack([np.stack([z11, z12], -1), np.stack([z21, z22], -1)], -2))
    Zh = Zm.conj().transpose(0, 2, 1)
    DA = Zh @ _hi(A) @ Zm
    DB = Zh @ _hi(B) @ Zm
    assert (np.abs(DB - np.eye(2)).max(axis=(1, 2)) * t2 <= C * eps(dtype)).all()
    d1, d2 = DA[:, 0, 0].real, DA[:, 1, 1].real
    assert (np.abs(DA[:, 0, 1]) * t2 <= C * eps(dtype) * np.maximum(d1, d2)).all()
    assert (d1 >= d2).all(), "new diagonal of A not descending"


@pytest.mark.parametrize("dtype", CDTYPES)
def test_hz_transform_complex_exception(rng, dtype):
    """A = a B with complex b_ij (v = h = 0): the exception's Z gives Z^H B Z = I and Z^H A Z = a I."""
    k = 200
    a = rng.uniform(0.5, 5, k)
    x = rng.uniform(0.05, 0.9, k) * np.exp(1j * rng.uniform(-np.pi, np.pi, k))
    one = np.ones(k)
    rdt = np.finfo(dtype).dtype
    ax = (a * x).astype(dtype)
    z11, z12, z21, z22, rotate, big = hz_transform(a.astype(rdt), a.astype(rdt), ax, one.astype(rdt),
                                                    one.astype(rdt), x.astype(dtype), rdt.type(2 * eps(dtype)))
    assert rotate.all() and big.all()
    Zm = _hi(np.stack([np.stack([z11, z12], -1), np.stack([z21, z22], -1)], -2))
    xs = _hi(x.astype(dtype))
    B = np.stack([np.stack([one + 0j, xs], -1), np.stack([xs.conj(), one + 0j], -1)], -2)
    A = _hi(a.astype(rdt))[:, None, None] * B
    Zh = Zm.conj().transpose(0, 2, 1)
    t2 = (1 - np.abs(xs) ** 2)[:, None, None]                       # the errors grow as 1 / t^2
    assert (np.abs(Zh @ B @ Zm - np.eye(2)) * t2).max() <= C * eps(dtype)
    assert (np.abs((Zh @ A @ Zm) / _hi(a.astype(rdt))[:, None, None] - np.eye(2)) * t2).max() <= C * eps(dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_rank_deficient_f_and_repeatable(rng, dtype):
    """Complex F of rank r: n - r zero alphas, U unitary (completed); the same input, the same bits."""
    n, r = 16, 5
    F = (_randn(rng, (n + 6, r), np.complex128) @ _randn(rng, (r, n), np.complex128)).astype(dtype)
    G = _randn(rng, (n + 3, n), dtype)
    first = gsvd(F, G, True)
    check_gsvd(F, G, *first)
    alpha = first[3]
    assert (alpha[:r] > 100 * n * eps(dtype)).all() and (alpha[r:] <= C * n * eps(dtype)).all()
    for x, y in zip(first, gsvd(F.copy(), G.copy(), True), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("shape", [(40, 40, 40), (130, 120, 100)])
def test_blocked_gsvd_complex(rng, dtype, shape):
    """blocked.gsvd on complex pairs (block = 16): the identities, and alpha / beta as the pointwise path's."""
    mF, mG, n = shape
    F = _randn(rng, (mF, n), dtype)
    G = _randn(rng, (mG, n), dtype)
    U, V, Z, alpha, beta, X, info = blocked.gsvd(F, G, True, block=16, return_info=True)
    assert info["converged"]
    check_gsvd(F, G, U, V, Z, alpha, beta, X)
    a0, b0 = gsvd(F, G)[3:5]
    assert np.abs((alpha / beta) / (a0 / b0) - 1).max() <= C * n * eps(dtype) * np.linalg.cond(_hi(G))


@pytest.mark.parametrize("dtype", DTYPES + CDTYPES)
def test_block_hz_twin(rng, dtype):
    """Three 32 x 32 pairs of (Hermitian) Gram matrices: V^H A V, V^H B V diagonal (relatively), their
    diagonals summing to 1 (Theta), the ratios descending and equal to the pencil's eigenvalues (scipy)."""
    K = 32
    X = _randn(rng, (3, 2 * K, K), np.result_type(dtype, np.float64))
    Y = _randn(rng, (3, 2 * K, K), np.result_type(dtype, np.float64))
    A = (X.conj().transpose(0, 2, 1) @ X).astype(dtype)
    B = (Y.conj().transpose(0, 2, 1) @ Y).astype(dtype)
    V, big = block_hz(A, B, np.sqrt(K) * eps(dtype), 30)
    assert V.shape == (3, K, K) and V.dtype == dtype and (big > 0).all()
    V64, A64, B64 = _hi(V), _hi(A), _hi(B)
    Vh = V64.conj().transpose(0, 2, 1)
    DA, DB = Vh @ A64 @ V64, Vh @ B64 @ V64
    da, db = np.diagonal(DA, axis1=1, axis2=2).real, np.diagonal(DB, axis1=1, axis2=2).real
    bound = C * K * eps(dtype)
    for D, d in ((DA, da), (DB, db)):
        assert (d > 0).all()
        assert np.abs(D / np.sqrt(d[:, :, None] * d[:, None, :]) - np.eye(K)).max() <= bound
    assert np.abs(da + db - 1).max() <= bound
    ratio = da / db
    assert (np.diff(ratio, axis=1) <= 0).all()
    ref = scipy.linalg.eigh(A64[0], B64[0], eigvals_only=True)[::-1]
    assert np.abs(ratio[0] - ref).max() <= bound * ref[0]


# ---------------------------------------------------------------------------------------------
# scale: F and G by powers of 10 near the ends of the range


def _ldexp(X, e):
    """X 2^e in complex128 (exact)."""
    X = _hi(X)
    return np.ldexp(X.real, e) + 1j * np.ldexp(X.imag, e)


def _exponent(X):
    """e with max |entry| = f 2^e, f in [0.5, 1)."""
    return int(np.frexp(np.abs(_hi(X)).max())[1])


def _scaled_reference(F, G):
    """alpha, beta of (F, G), descending, in 50 digits (mpmath) on the exactly rescaled pair F' = F 2^-ef,
    G' = G 2^-eg: rho = 2^(ef - eg) sigma(F' R'^-1) with G' = Q' R', alpha = rho / hypot(rho, 1),
    beta = 1 / hypot(rho, 1). (LAPACK on the pencil (F'^H F', G'^H G') in float64 was the reference before:
    it squares, so its smallest lambda = rho^2 is only good to about eps lambda_max / lambda_min: in 9 of 5000
    float64 draws (1000 seeds per real float64 case) it was off by more than the bound, up to 11x, while gsvd
    stayed within 0.031 of the bound against this reference; e.g. (1e-300, 1e-300) with
    LINALG_TEST_SEED=122882973867994168643621467914924729121: the smallest alpha 2.1e-13 relative off in
    LAPACK's, 4.4e-16 in gsvd's.)"""
    mpmath = pytest.importorskip("mpmath")
    ef, eg = _exponent(F), _exponent(G)
    Fs, Gs = _ldexp(F, -ef), _ldexp(G, -eg)
    if F.dtype.kind != "c":
        Fs, Gs = Fs.real, Gs.real
    n = F.shape[1]
    with mpmath.workdps(50):
        R = mpmath.qr(mpmath.matrix(Gs.tolist()))[1][:n, :n]
        M = mpmath.matrix(Fs.tolist()) * mpmath.inverse(R)
        s = (mpmath.svd_c if F.dtype.kind == "c" else mpmath.svd_r)(M, compute_uv=False)
        sigma = np.array(sorted((float(s[i]) for i in range(n)), reverse=True))
    rho = np.ldexp(sigma, ef - eg)
    return rho / np.hypot(rho, 1), 1 / np.hypot(rho, 1)


@pytest.mark.parametrize("dtype, sf, sg", [
    (np.float64, 1e200, 1e200), (np.float64, 1e-155, 1e-155), (np.float64, 1e154, 1.0), (np.float64, 1.0, 1e200),
    (np.float64, 1e-300, 1e-300), (np.complex128, 1e300, 1e300), (np.complex128, 3e307, 3e307),
    (np.float32, 1e19, 1e19), (np.float32, 1e-19, 1e-19), (np.float32, 1e30, 1.0), (np.float32, 1.0, 1e-30),
])
def test_scaled_pairs(rng, dtype, sf, sg):
    """(F sf, G sg): alpha all 0 for sf = sg = 1e200 or 1e-155, beta NaN with converged True for (1e154, 1),
    'did not converge' for (1, 1e200), likewise in float32 (review finding). alpha and beta to c n eps
    relative against 50 digits on the exactly rescaled pair (G well conditioned), the identities with Z and
    X scaled by powers of 2 (exact) so that F and G are of order 1."""
    n = 6
    F = (_randn(rng, (n + 2, n), dtype) * dtype(sf)).astype(dtype)
    G = (_well_conditioned(rng, n + 1, n) * dtype(sg)).astype(dtype)
    U, V, Z, alpha, beta, X, info = gsvd(F, G, True, return_info=True)
    assert info["converged"] and (alpha > 0).all() and (beta > 0).all()
    a, b = _scaled_reference(F, G)
    bound = C * n * eps(dtype) * 10
    assert np.abs(alpha / a - 1).max() <= bound and np.abs(beta / b - 1).max() <= bound, (alpha, a, beta, b)
    # F Z = U diag(alpha), F = U diag(alpha) X; with F = 2^e F': F' (Z 2^e) = U diag(alpha) = F' (X 2^-e)^-1
    cz = np.linalg.cond(_hi(Z))
    for M, W, s in ((F, U, alpha), (G, V, beta)):
        e = _exponent(M)
        Ms, Zs, Xs, Ws = _ldexp(M, -e), _ldexp(Z, e), _ldexp(X, -e), _hi(W) * s
        assert np.linalg.norm(Ms @ Zs - Ws) <= bound * np.linalg.norm(Ms, 2) * np.linalg.norm(Zs, 2)
        assert np.linalg.norm(Ms - Ws @ Xs) <= bound * cz * np.linalg.norm(Ms)
    assert _orth_err(U) <= bound and _orth_err(V) <= bound


@pytest.mark.parametrize("dtype, sf, sg", [(np.float64, 1e300, 1e-300), (np.float64, 1e-310, 1e-310),
                                           (np.float32, 1e30, 1e-30)])
def test_unrepresentable_pairs(rng, dtype, sf, sg):
    """alpha / beta of about 1e600 (beta underflows) or Z of about 1e310: a clear OverflowError, not a wrong
    answer or NaN with converged True."""
    n = 4
    F = (_randn(rng, (n + 2, n), dtype) * dtype(sf)).astype(dtype)
    G = (_well_conditioned(rng, n + 1, n) * dtype(sg)).astype(dtype)
    with pytest.raises(OverflowError, match="not representable"):
        gsvd(F, G)
