"""One-sided Jacobi SVD (``linalg_gpu.jacobi.svd.jacobi_svd``, numpy path).

Checked against LAPACK (numpy.linalg.svd, run in float64 on the same data) for the singular
values, and by the identities themselves for the vectors: the reconstruction
||A - U diag(s) Vh|| / ||A|| and the orthogonality of U and V, all to c * n * eps of the dtype;
against mpmath at 50 digits for the high relative accuracy on graded matrices; and for the
options, shapes, dtypes, info and errors. Inputs are fresh random matrices from ``rng``.
"""

from __future__ import annotations

import numpy as np
import pytest

import linalg_gpu.jacobi.svd as svd_mod
from linalg_gpu.jacobi.orderings import ORDERINGS
from linalg_gpu.jacobi.svd import jacobi_svd

DTYPES = (np.float32, np.float64)
PRECONDITION = (True, False, "qr")
C = 4                                  # the constant in the c * n * eps bounds (measured: <= 2)


def eps(dtype):
    return float(np.finfo(dtype).eps)


def orth_err(X):
    """max |X^T X - I| for the columns of X, computed in float64."""
    X = X.astype(np.float64)
    return np.abs(X.T @ X - np.eye(X.shape[1])).max() if X.size else 0.0


def check_svd(A, U, s, Vh, full_matrices=False, c=C):
    """The SVD identities for A (m, n), to c * max(m, n) * eps."""
    m, n = A.shape
    k = min(m, n)
    dt = A.dtype
    bound = c * max(m, n) * eps(dt)
    assert U.dtype == dt and s.dtype == dt and Vh.dtype == dt
    assert U.shape == ((m, m) if full_matrices else (m, k))
    assert s.shape == (k,)
    assert Vh.shape == ((n, n) if full_matrices else (k, n))
    assert (np.diff(s) <= 0).all(), "s not descending"
    assert (s >= 0).all()
    A64 = A.astype(np.float64)
    s_ref = np.linalg.svd(A64, compute_uv=False)
    smax = max(s_ref[0], np.finfo(dt).tiny)
    assert np.abs(s.astype(np.float64) - s_ref).max() <= bound * smax
    R = A64 - (U[:, :k].astype(np.float64) * s) @ Vh[:k].astype(np.float64)
    assert np.linalg.norm(R) <= bound * max(np.linalg.norm(A64), np.finfo(dt).tiny)
    assert orth_err(U) <= bound
    assert orth_err(Vh.T) <= bound


# ---------------------------------------------------------------------------------------------
# against LAPACK


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (17, 17), (40, 40), (45, 20), (20, 45), (60, 7),
                                   (1, 9), (9, 1)])
@pytest.mark.parametrize("precondition", PRECONDITION)
def test_random_matches_lapack(rng, dtype, shape, precondition):
    A = rng.standard_normal(shape).astype(dtype)
    U, s, Vh = jacobi_svd(A, precondition=precondition)
    check_svd(A, U, s, Vh)


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize("precondition", [True, False])
@pytest.mark.parametrize("shape", [(24, 24), (31, 13), (13, 31), (25, 25)])
def test_each_ordering(rng, ordering, precondition, shape):
    A = rng.standard_normal(shape)
    U, s, Vh, info = jacobi_svd(A, ordering=ordering, precondition=precondition, return_info=True)
    check_svd(A, U, s, Vh)
    assert info["ordering"] == ordering and info["converged"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_prescribed_singular_values(rng, dtype):
    """A = Q1 diag(sigma) Q2^T built in float64 with sigma spanning 1..1e-3 (float32: ..1e-2)."""
    m, n = 50, 30
    Q1 = np.linalg.qr(rng.standard_normal((m, n)))[0]
    Q2 = np.linalg.qr(rng.standard_normal((n, n)))[0]
    sigma = np.sort(np.logspace(-3 if dtype == np.float64 else -2, 0, n))[::-1]
    A = ((Q1 * sigma) @ Q2.T).astype(dtype)
    U, s, Vh = jacobi_svd(A)
    check_svd(A, U, s, Vh)
    assert np.abs(s - sigma).max() <= C * m * eps(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(9, 4), (4, 9), (6, 6), (30, 3)])
@pytest.mark.parametrize("precondition", PRECONDITION)
def test_full_matrices(rng, dtype, shape, precondition):
    A = rng.standard_normal(shape).astype(dtype)
    for full in (True, False):
        U, s, Vh = jacobi_svd(A, full_matrices=full, precondition=precondition)
        Un, sn, Vhn = np.linalg.svd(A, full_matrices=full)
        assert U.shape == Un.shape and s.shape == sn.shape and Vh.shape == Vhn.shape
        check_svd(A, U, s, Vh, full_matrices=full)


@pytest.mark.parametrize("precondition", PRECONDITION)
@pytest.mark.parametrize("shape", [(20, 12), (12, 20), (15, 15)])
def test_compute_uv_false_gives_the_same_s(rng, shape, precondition):
    """The rotations depend on A only, not on V: the same s to the last bit."""
    A = rng.standard_normal(shape)
    s_only = jacobi_svd(A, compute_uv=False, precondition=precondition)
    assert isinstance(s_only, np.ndarray) and s_only.shape == (min(shape),)
    _, s, _ = jacobi_svd(A, precondition=precondition)
    np.testing.assert_array_equal(s_only, s)


def test_wide_is_the_transpose_of_tall(rng):
    A = rng.standard_normal((7, 19))
    U, s, Vh = jacobi_svd(A, full_matrices=True)
    Ut, st, Vht = jacobi_svd(A.T, full_matrices=True)
    np.testing.assert_array_equal(s, st)
    np.testing.assert_array_equal(U, Vht.T)
    np.testing.assert_array_equal(Vh, Ut.T)


def test_list_input():
    s = jacobi_svd([[3.0, 0.0], [0.0, -4.0]], compute_uv=False)
    np.testing.assert_allclose(s, [4.0, 3.0], rtol=4 * eps(np.float64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", ["huge", "tiny"])
def test_extreme_scales_do_not_overflow(rng, dtype, scale):
    """Squared column norms of 1e300 (float64) / 1e30 (float32) entries would overflow unscaled."""
    fi = np.finfo(dtype)
    c = float(fi.max) ** 0.9 if scale == "huge" else float(fi.tiny) ** 0.9
    B = rng.standard_normal((12, 7))
    A = (B * c).astype(dtype)
    with np.errstate(all="raise"):
        U, s, Vh = jacobi_svd(A)
    s_ref = np.linalg.svd(A.astype(np.float64) / c, compute_uv=False)
    assert np.abs(s.astype(np.float64) / c - s_ref).max() <= C * 12 * eps(dtype) * s_ref[0]
    assert orth_err(U) <= C * 12 * eps(dtype) and orth_err(Vh.T) <= C * 12 * eps(dtype)


# ---------------------------------------------------------------------------------------------
# rank deficiency and zero columns: zero singular values, orthonormal completion


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,rank", [((30, 20), 5), ((20, 30), 5), ((25, 25), 1), ((40, 10), 9), ((12, 12), 11)])
@pytest.mark.parametrize("precondition", PRECONDITION)
@pytest.mark.parametrize("full", [False, True])
def test_rank_deficient(rng, dtype, shape, rank, precondition, full):
    m, n = shape
    X = np.linalg.qr(rng.standard_normal((m, rank)))[0] * rng.uniform(1, 2, rank)
    Y = np.linalg.qr(rng.standard_normal((n, rank)))[0]
    A = (X @ Y.T).astype(dtype)                            # rank r, s[:r] in [1, 2]
    U, s, Vh = jacobi_svd(A, full_matrices=full, precondition=precondition)
    check_svd(A, U, s, Vh, full_matrices=full)
    assert s[rank - 1] > 0.4 * s[0]
    assert (s[rank:] <= C * max(m, n) * eps(dtype) * s[0]).all()


@pytest.mark.parametrize("precondition", PRECONDITION)
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("transpose", [False, True])
def test_exact_zero_columns(rng, precondition, full, transpose):
    """Zero columns stay exactly zero under the rotations: exact zero singular values, whose
    singular vectors must still complete U and V to orthonormal bases."""
    m, n = 14, 9
    zero = rng.choice(n, size=3, replace=False)
    A = rng.standard_normal((m, n))
    A[:, zero] = 0
    if transpose:
        A = A.T
    U, s, Vh = jacobi_svd(A, full_matrices=full, precondition=precondition)
    check_svd(A, U, s, Vh, full_matrices=full)
    assert (s[:-3] > 0).all() and (s[-3:] == 0).all()
    V = U if transpose else Vh.T                       # the side of the zero columns of A
    assert np.abs(V[zero, : n - 3]).max() <= C * n * eps(np.float64)   # no weight on them


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (1, 1)])
@pytest.mark.parametrize("full", [False, True])
def test_zero_matrix(dtype, shape, full):
    A = np.zeros(shape, dtype=dtype)
    U, s, Vh, info = jacobi_svd(A, full_matrices=full, return_info=True)
    assert (s == 0).all() and s.dtype == dtype
    assert orth_err(U) <= 4 * eps(dtype) and orth_err(Vh.T) <= 4 * eps(dtype)
    assert U.shape == np.linalg.svd(A, full_matrices=full)[0].shape
    assert info["rotations"] == 0 and info["converged"]


# ---------------------------------------------------------------------------------------------
# graded matrices: high relative accuracy against mpmath


def _mp_singular_values(A):
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(50):
        s = mpmath.svd_r(mpmath.matrix(A.tolist()), compute_uv=False)
        return np.sort(np.array([float(x) for x in s]))[::-1]


@pytest.mark.parametrize("m,n", [(6, 6), (15, 15), (25, 25), (40, 40), (30, 12)])
@pytest.mark.parametrize("ordering", ["round_robin", "modified_modulus"])
def test_graded_relative_accuracy(rng, m, n, ordering):
    """A = D1 B D2, B well conditioned (cond <= 10), D1, D2 diagonal with entries 10^U(-12, 0):
    every singular value, down to ~1e-24 * s_max, to 1e-12 relative error.

    The QR with row sorting and column pivoting (the default preconditioner) keeps the grading
    in R, and the relative-orthogonality test of Jacobi is scale-invariant per column. LAPACK's
    gesdd (numpy.linalg.svd) is only normwise accurate: on these matrices its smallest singular
    values come out with relative errors from ~1e-9 to above 1 (measured; not asserted). Plain
    Jacobi without preconditioning reaches ~1e-12 only (precondition=False, measured 1.2e-12).
    """
    B = (np.linalg.qr(rng.standard_normal((m, m)))[0][:, :n] * rng.uniform(1, 10, n)
         ) @ np.linalg.qr(rng.standard_normal((n, n)))[0]
    d1 = 10.0 ** rng.uniform(-12, 0, m)
    d2 = 10.0 ** rng.uniform(-12, 0, n)
    A = d1[:, None] * B * d2[None, :]
    s_ref = _mp_singular_values(A)
    U, s, Vh = jacobi_svd(A, ordering=ordering)
    rel = np.abs(s - s_ref) / s_ref
    assert rel.max() <= 1e-12, (rel.max(), s_ref[-1] / s_ref[0])
    assert orth_err(U) <= C * m * eps(np.float64) and orth_err(Vh.T) <= C * m * eps(np.float64)


def test_graded_column_scaling_without_preconditioning(rng):
    """A = B D (column grading only): plain one-sided Jacobi is accurate by itself (Demmel-Veselic)."""
    n = 20
    B = np.linalg.qr(rng.standard_normal((n, n)))[0] * rng.uniform(1, 10, n)
    A = B * 10.0 ** rng.uniform(-14, 0, n)
    s_ref = _mp_singular_values(A)
    s = jacobi_svd(A, compute_uv=False, precondition=False)
    assert (np.abs(s - s_ref) / s_ref).max() <= 1e-12


# ---------------------------------------------------------------------------------------------
# dtypes, info, convergence


@pytest.mark.parametrize("precondition", PRECONDITION)
@pytest.mark.parametrize("shape", [(8, 5), (5, 8), (0, 3), (6, 6)])
def test_float32_stays_float32(rng, precondition, shape):
    A = rng.standard_normal(shape).astype(np.float32)
    for full in (False, True):
        U, s, Vh, info = jacobi_svd(A, full_matrices=full, precondition=precondition, return_info=True)
        assert U.dtype == s.dtype == Vh.dtype == np.float32
    assert jacobi_svd(A, compute_uv=False).dtype == np.float32


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("precondition", PRECONDITION)
def test_info(rng, dtype, precondition):
    A = rng.standard_normal((30, 30)).astype(dtype)
    U, s, Vh, info = jacobi_svd(A, precondition=precondition, return_info=True)
    assert info["converged"] is True
    assert 2 <= info["sweeps"] <= 20
    assert info["rotations"] >= 30 * 29 // 2                 # the first sweep rotates every pair
    assert info["stop"] in ("no_rotation", "tangent")
    assert info["tol"] == pytest.approx(np.sqrt(30) * eps(dtype))
    assert info["off_norm"] <= 4 * info["tol"]
    assert info["ordering"] == "round_robin"
    assert info["precondition"] == {True: "qrcp", False: "none", "qr": "none"}[precondition]  # "qr": square
    s2, info2 = jacobi_svd(A, compute_uv=False, precondition=precondition, return_info=True)
    assert info2["sweeps"] == info["sweeps"] and info2["rotations"] == info["rotations"]


def test_info_orthogonal_input_needs_no_rotation(rng):
    """Columns with disjoint supports are exactly orthogonal: one sweep that rotates nothing."""
    A = np.zeros((12, 10))
    rows = rng.permutation(12)[:10]
    values = rng.uniform(1, 10, 10) * rng.choice([-1, 1], 10)
    A[rows, np.arange(10)] = values
    U, s, Vh, info = jacobi_svd(A, precondition=False, return_info=True)
    assert info["sweeps"] == 1 and info["rotations"] == 0 and info["stop"] == "no_rotation"
    np.testing.assert_array_equal(s, np.sort(np.abs(values))[::-1])
    check_svd(A, U, s, Vh)


def test_larger_tol_stops_earlier(rng):
    A = rng.standard_normal((40, 40))
    _, _, _, tight = jacobi_svd(A, return_info=True, precondition=False)
    U, s, Vh, loose = jacobi_svd(A, tol=1e-6, return_info=True, precondition=False)
    assert loose["sweeps"] <= tight["sweeps"] and loose["rotations"] < tight["rotations"]
    assert loose["off_norm"] <= 1e-6 and loose["tol"] == 1e-6
    assert 1e-6 * 1e-3 < orth_err(U) <= 2e-6               # U is only as orthogonal as tol asks


def test_max_sweeps_exceeded(rng):
    A = rng.standard_normal((30, 30))
    with pytest.raises(np.linalg.LinAlgError, match="max_sweeps=2"):
        jacobi_svd(A, max_sweeps=2)
    with pytest.raises(np.linalg.LinAlgError, match="max_sweeps=1"):
        jacobi_svd(A.T[:, :20], max_sweeps=1, compute_uv=False)
    U, s, Vh, info = jacobi_svd(A, max_sweeps=2, return_info=True)
    assert info["converged"] is False and info["sweeps"] == 2 and info["stop"] == "max_sweeps"
    assert info["off_norm"] > info["tol"]
    assert np.isfinite(U).all() and np.isfinite(s).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
@pytest.mark.parametrize("full", [False, True])
def test_empty_like_numpy(dtype, shape, full):
    A = np.zeros(shape, dtype=dtype)
    U, s, Vh = jacobi_svd(A, full_matrices=full)
    Un, sn, Vhn = np.linalg.svd(A, full_matrices=full)
    assert U.shape == Un.shape and s.shape == sn.shape and Vh.shape == Vhn.shape
    assert U.dtype == s.dtype == Vh.dtype == dtype
    assert orth_err(U) == 0 and orth_err(Vh.T) == 0
    s_only, info = jacobi_svd(A, compute_uv=False, return_info=True)
    assert s_only.shape == (0,) and info["converged"] and info["sweeps"] == 0


# ---------------------------------------------------------------------------------------------
# argument errors


@pytest.mark.parametrize("A,exc,match", [
    (np.ones((3, 3), dtype=np.complex128), TypeError, "complex input is not supported yet"),
    (np.ones((3, 3), dtype=np.int64), TypeError, "A has integer"),
    (np.ones((3, 3), dtype=bool), TypeError, "A has integer/bool"),
    (np.ones((3, 3), dtype=np.float16), TypeError, "A has dtype float16"),
    (np.ones((2, 3, 3)), ValueError, "batched input"),
    (np.ones(3), ValueError, "A must be a 2-D matrix"),
    (np.float64(2.0), ValueError, "A must be a 2-D matrix"),
    (np.array([[1.0, np.nan], [0.0, 1.0]]), ValueError, "A must be finite"),
    (np.array([[1.0, np.inf], [0.0, 1.0]]), ValueError, "A must be finite"),
])
def test_bad_matrix(A, exc, match):
    with pytest.raises(exc, match=match):
        jacobi_svd(A)


@pytest.mark.parametrize("kwargs,match", [
    ({"ordering": "chess"}, "ordering must be one of"),
    ({"ordering": None}, "ordering must be one of"),
    ({"tol": 0}, "tol must be"),
    ({"tol": -1e-8}, "tol must be"),
    ({"tol": 1.0}, "tol must be"),
    ({"tol": float("nan")}, "tol must be"),
    ({"tol": "small"}, "tol must be"),
    ({"max_sweeps": 0}, "max_sweeps must be"),
    ({"max_sweeps": 2.5}, "max_sweeps must be"),
    ({"max_sweeps": True}, "max_sweeps must be"),
    ({"precondition": "householder"}, "precondition must be one of"),
    ({"precondition": None}, "precondition must be one of"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jacobi_svd(np.eye(3), **kwargs)


def test_cupy_input_goes_to_the_gpu_twin(monkeypatch):
    """The dispatch only (no GPU here): a cupy array is handed to ``blocked.jacobi_svd`` unchanged."""
    import linalg_gpu.jacobi.blocked as gpu

    calls = []
    monkeypatch.setattr(svd_mod, "is_cupy_array", lambda x: True)
    monkeypatch.setattr(gpu, "jacobi_svd", lambda *a, **k: calls.append((a, k)) or "gpu result")
    A = np.eye(3)
    assert jacobi_svd(A, True, False, tol=1e-10, max_sweeps=7, precondition=False, return_info=True) == "gpu result"
    (args, kwargs), = calls
    assert args[0] is A and args[1:] == (True, False)
    assert kwargs == {"tol": 1e-10, "max_sweeps": 7, "precondition": False, "return_info": True}
    with pytest.raises(ValueError, match="ordering"):      # options are checked before dispatch
        jacobi_svd(A, ordering="nope")


def test_columns_too_small_to_square_are_handled():
    """Column norms below ~1e-154 underflowed in the pivoted QR (NaN results; review finding). The
    Jacobi core's sums of squares of such columns are subnormal and lose digits (3e-10 relative here,
    LAPACK 1e-16): a known limit until the core scales its columns as LAPACK's xGESVJ does."""
    A = np.array([[1, 0, 0], [0, 3e-160, 2e-160], [0, 1e-160, 3e-160]])
    np.testing.assert_allclose(jacobi_svd(A, compute_uv=False), np.linalg.svd(A, compute_uv=False), rtol=1e-8)
    A = np.array([[1.0, 1e-170], [1.0, 2e-170], [1, 0]])
    np.testing.assert_allclose(jacobi_svd(A, compute_uv=False), [np.sqrt(3), np.sqrt(2) * 1e-170], rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_entries_at_the_top_binade(rng, dtype):
    """max |a_ij| >= 2^(maxexp - 1): the scaling power 2^maxexp overflowed (a raw OverflowError in float64, an
    infinite scale and s = 0 in float32; review finding). A 1 x 1 keeps its entry exactly; a random matrix
    with a dominant entry matches LAPACK on A 2^-(maxexp - 1) (exact); a largest singular value beyond the
    dtype is a clear OverflowError."""
    fi = np.finfo(dtype)
    e = fi.maxexp - 1
    U, s, Vh = jacobi_svd(np.array([[fi.max]], dtype))
    assert s[0] == fi.max and U[0, 0] == Vh[0, 0] == 1
    B = 0.05 * rng.standard_normal((7, 4))
    B[rng.integers(7), rng.integers(4)] = rng.choice([-1, 1]) * rng.uniform(1, 1.5)
    A = np.ldexp(B.astype(dtype), e)                                    # ||A||_2 < 1.6 2^e: representable
    for precondition in PRECONDITION:
        U, s, Vh = jacobi_svd(A, precondition=precondition)
        check_svd(np.ldexp(A, -e), U, np.ldexp(s, -e), Vh)
    with pytest.raises(OverflowError, match="largest singular value of A overflows"):
        jacobi_svd(np.full((2, 2), fi.max, dtype))


# ---------------------------------------------------------------------------------------------
# jacobi_svdvals: a stack at once


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 40, 6), (2, 3, 12, 12), (5, 4, 9), (1, 1024, 30)])
def test_svdvals_stack_matches_lapack(rng, dtype, shape):
    """Each matrix of a stack (wide ones by their transpose) against LAPACK in float64, to c n eps of the dtype
    relative to its largest singular value."""
    from linalg_gpu.jacobi import jacobi_svdvals

    A = rng.standard_normal(shape).astype(dtype)
    s = jacobi_svdvals(A)
    ref = np.linalg.svd(A.astype(np.float64), compute_uv=False)
    assert s.dtype == dtype and s.shape == ref.shape
    n = max(shape[-2:])
    assert np.all(np.abs(s - ref) <= C * n * eps(dtype) * ref[..., :1])


def test_svdvals_column_graded_relative_accuracy(rng):
    """A = B D, B well conditioned, D of entries 10^U(-14, 0): every singular value to 1e-12 relative error
    (mpmath at 50 digits), as one-sided Jacobi after Householder QR keeps a column grading."""
    from linalg_gpu.jacobi import jacobi_svdvals

    m, n = 30, 12
    As = []
    for _ in range(3):
        B = np.linalg.qr(rng.standard_normal((m, m)))[0][:, :n] * rng.uniform(1, 10, n)
        As.append(B * 10.0 ** rng.uniform(-14, 0, n))
    s = jacobi_svdvals(np.stack(As))
    for A, si in zip(As, s, strict=True):
        s_ref = _mp_singular_values(A)
        assert (np.abs(si - s_ref) / s_ref).max() <= 1e-12


def test_svdvals_rank_deficient_and_zero(rng):
    """Exact rank r: r singular values as LAPACK's, the rest ~0; a zero matrix gives zeros."""
    from linalg_gpu.jacobi import jacobi_svdvals

    A = np.stack([rng.standard_normal((50, 3)) @ rng.standard_normal((3, 8)), np.zeros((50, 8))])
    s = jacobi_svdvals(A)
    ref = np.linalg.svd(A[0], compute_uv=False)
    np.testing.assert_allclose(s[0, :3], ref[:3], rtol=1e-12)
    assert np.all(s[0, 3:] <= 1e-13 * ref[0]) and not s[1].any()


@pytest.mark.parametrize("A, exc, match", [
    (np.ones(4), ValueError, "stack of matrices"),
    (np.full((2, 3, 3), np.nan), ValueError, "finite"),
    (np.ones((2, 3, 3), dtype=complex), TypeError, "complex"),
    (np.ones((2, 3, 3), dtype=np.int64), TypeError, "dtype"),
])
def test_svdvals_bad_input(A, exc, match):
    from linalg_gpu.jacobi import jacobi_svdvals

    with pytest.raises(exc, match=match):
        jacobi_svdvals(A)
