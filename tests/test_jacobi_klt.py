"""Two-sided parallel Jacobi (``jacobi_eigh``) and the KLT, numpy path, against LAPACK and mpmath.

Every matrix is drawn fresh from the ``rng`` fixture (the seed is printed on failure). Bounds are
multiples of n eps of the dtype: eigenvalues |w - w_ref| <= C n eps ||A||_2, the residual
||A V - V diag(w)||_F <= C n eps ||A||_F, orthogonality max|V^T V - I| <= C n eps.
"""

from __future__ import annotations

import doctest
import importlib

import mpmath
import numpy as np
import pytest
from small_testlib import random_orthogonal, sym_from_eigs

import linalg_gpu.jacobi.blocked as blocked
from linalg_gpu.jacobi.klt import JacobiInfo, jacobi_eigh, klt
from linalg_gpu.jacobi.orderings import ORDERINGS

klt_module = importlib.import_module("linalg_gpu.jacobi.klt")   # the module (the package exports the function)

DTYPES = (np.float32, np.float64)
SIZES = (1, 2, 3, 7, 16, 33, 64, 100)
C_EIG = 10      # |w - w_ref|_max <= C_EIG * n * eps * ||A||_2
C_RES = 10      # ||A V - V diag(w)||_F <= C_RES * n * eps * ||A||_F
C_ORTH = 10     # max |V^T V - I| <= C_ORTH * n * eps
C_KLT = 10      # klt identities, in units of features * eps * scale


def _eps(dtype):
    return float(np.finfo(dtype).eps)


def _random_symmetric(rng, n, dtype):
    X = rng.standard_normal((n, n))
    return ((X + X.T) / 2).astype(dtype)


def check_eigh(A, w, V, dtype, label="", w_ref=None):
    """dtype kept, w ascending and close to LAPACK (float64), small residual, orthonormal V."""
    n = A.shape[0]
    ep = _eps(dtype)
    A64 = np.asarray(A, dtype=np.float64)
    assert w.dtype == V.dtype == dtype, label
    assert w.shape == (n,) and V.shape == (n, n), label
    assert np.all(np.isfinite(w)) and np.all(np.isfinite(V)), label
    w64, V64 = w.astype(np.float64), V.astype(np.float64)
    assert np.all(np.diff(w64) >= 0), f"{label}: eigenvalues not ascending"
    w_ref = np.linalg.eigvalsh(A64) if w_ref is None else w_ref
    norm2 = max(float(np.abs(w_ref).max()), np.finfo(np.float64).tiny)
    err = float(np.abs(w64 - w_ref).max())
    assert err <= C_EIG * n * ep * norm2, f"{label}: eigenvalue error {err / (n * ep * norm2):.1f} n eps ||A||"
    normf = max(float(np.linalg.norm(A64)), np.finfo(np.float64).tiny)
    res = float(np.linalg.norm(A64 @ V64 - V64 * w64)) / normf
    assert res <= C_RES * n * ep, f"{label}: residual {res / (n * ep):.1f} n eps"
    orth = float(np.abs(V64.T @ V64 - np.eye(n)).max())
    assert orth <= C_ORTH * n * ep, f"{label}: orthogonality {orth / (n * ep):.1f} n eps"


# ---------------------------------------------------------------------------------------------
# against numpy.linalg.eigh


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_random_symmetric_against_eigh(rng, ordering, dtype, n):
    A = _random_symmetric(rng, n, dtype)
    w, V, info = jacobi_eigh(A, ordering=ordering, return_info=True)
    check_eigh(A, w, V, dtype, f"{ordering} n={n} {dtype.__name__}")
    assert info.converged
    # the stopping test bounds what is left off the diagonal: off(A) <= tol sqrt(n^2 + n) ||A||_F
    assert info.off_norm <= 1.01 * info.tol * np.sqrt(n * n + n)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_repeated_and_clustered_eigenvalues(rng, ordering, dtype):
    ev = np.concatenate([np.full(6, 2.0), np.full(5, -1.0), 0.5 + 1e-9 * rng.standard_normal(6),
                         np.zeros(3), rng.uniform(-3, 3, 4)])
    rng.shuffle(ev)
    A = sym_from_eigs(rng, ev).astype(dtype)
    w, V = jacobi_eigh(A, ordering=ordering)
    check_eigh(A, w, V, dtype, f"clustered {ordering} {dtype.__name__}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_scaled_identity_plus_rank_one(rng, dtype):
    """n - 1 equal eigenvalues: the eigenvectors of the repeated one are any orthonormal basis."""
    n = 33
    u = rng.standard_normal(n)
    A = (3.0 * np.eye(n) + np.outer(u, u)).astype(dtype)
    w, V = jacobi_eigh(A)
    check_eigh(A, w, V, dtype, "identity + rank one")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_diagonal_input_needs_no_rotation(rng, ordering, dtype):
    n = 17
    d = rng.standard_normal(n).astype(dtype)
    d[[2, 9]] = 0
    d[5] = d[11]                                                       # a repeated eigenvalue
    w, V, info = jacobi_eigh(np.diag(d), ordering=ordering, return_info=True)
    assert (info.sweeps, info.rotations, info.converged, info.off_norm) == (1, 0, True, 0.0)
    order = np.argsort(d, kind="stable")
    np.testing.assert_array_equal(w, d[order])                         # exact: nothing was computed
    np.testing.assert_array_equal(V, np.eye(n, dtype=dtype)[:, order])
    assert w.dtype == V.dtype == dtype


def test_one_by_one_and_zero_matrix():
    w, V, info = jacobi_eigh(np.array([[-2.5]], dtype=np.float32), return_info=True)
    assert w.tolist() == [-2.5] and V.tolist() == [[1.0]] and w.dtype == np.float32
    assert (info.sweeps, info.rotations, info.converged) == (1, 0, True)
    w, V, info = jacobi_eigh(np.zeros((5, 5)), return_info=True)
    assert np.all(w == 0) and np.array_equal(V, np.eye(5)) and info.rotations == 0


def test_two_by_two_is_one_rotation(rng):
    a, b, c = rng.standard_normal(3)
    A = np.array([[a, b], [b, c]])
    w, V, info = jacobi_eigh(A, return_info=True)
    assert (info.sweeps, info.rotations) == (2, 1)                     # one rotation, then a quiet sweep
    check_eigh(A, w, V, np.float64, "2x2")


@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_scale_and_indefinite(rng, dtype):
    """Eigenvalues spread over many orders of magnitude, both signs, exactly known."""
    n = 20
    ev = np.logspace(-6, 6, n) * rng.choice([-1.0, 1.0], n)
    A = sym_from_eigs(rng, ev).astype(dtype)
    w, V = jacobi_eigh(A)
    check_eigh(A, w, V, dtype, "wide scale")


def test_list_input_and_lower_triangle(rng):
    w, V = jacobi_eigh([[2.0, 1.0], [1.0, 2.0]])
    np.testing.assert_allclose(w, [1.0, 3.0], rtol=4 * _eps(np.float64))
    # assume_symmetric=True reads the lower triangle only, as numpy.linalg.eigh (UPLO='L')
    n = 9
    A = rng.standard_normal((n, n))
    w, V = jacobi_eigh(A, assume_symmetric=True)
    L = np.tril(A) + np.tril(A, -1).T
    check_eigh(L, w, V, np.float64, "lower triangle", w_ref=np.linalg.eigh(A)[0])


# ---------------------------------------------------------------------------------------------
# graded positive definite matrices: relative accuracy (Demmel & Veselic)


def _graded(rng, n):
    """D B D with B unit-diagonal SPD (cond ~ 10) and D log-spaced over 1e-10..1, shuffled."""
    G = rng.standard_normal((n, n))
    B = G @ G.T / n + 0.5 * np.eye(n)
    s = np.sqrt(np.diag(B))
    B = B / s[:, None] / s[None, :]
    D = np.logspace(-10, 0, n)
    rng.shuffle(D)
    H = D[:, None] * B * D[None, :]
    return (H + H.T) / 2, B


def _mp_eigvalsh(H, dps=40):
    with mpmath.workdps(dps):
        E, _ = mpmath.eigsy(mpmath.matrix(H.tolist()))
        return np.sort(np.array([float(x) for x in E]))


@pytest.mark.parametrize("n", [6, 13, 20])
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_graded_spd_relative_accuracy_float64(rng, ordering, n):
    H, B = _graded(rng, n)
    ref = _mp_eigvalsh(H)                                              # exact to double precision
    assert ref.min() > 0 and ref.max() / ref.min() > 1e15              # really graded
    w, V = jacobi_eigh(H, ordering=ordering)
    rel = float(np.max(np.abs(w - ref) / ref))
    assert rel <= 1e-12, f"relative eigenvalue error {rel:.2e} (cond B = {np.linalg.cond(B):.1f})"
    assert rel <= 10 * n * _eps(np.float64) * np.linalg.cond(B)


def test_graded_spd_relative_accuracy_float32(rng):
    n = 12
    H, B = _graded(rng, n)
    ref = _mp_eigvalsh(H.astype(np.float32).astype(np.float64))        # the float32 matrix, exactly
    w, V = jacobi_eigh(H.astype(np.float32))
    assert w.dtype == np.float32
    rel = float(np.max(np.abs(w.astype(np.float64) - ref) / ref))
    assert rel <= 10 * n * _eps(np.float32) * np.linalg.cond(B), f"relative error {rel:.2e}"


# ---------------------------------------------------------------------------------------------
# info, tolerance, non-convergence


def test_return_info_fields(rng):
    n = 33
    A = _random_symmetric(rng, n, np.float64)
    w, V, info = jacobi_eigh(A, return_info=True)
    assert isinstance(info, JacobiInfo)
    assert isinstance(info.sweeps, int) and isinstance(info.rotations, int)
    assert info.converged is True and 3 <= info.sweeps <= 20
    assert info.rotations >= n * (n - 1) // 2                         # the first sweep rotates every pair
    assert info.tol == _eps(np.float64)
    assert 0 <= info.off_norm <= info.tol * np.sqrt(n * n + n)
    w2, V2 = jacobi_eigh(A)                                            # same result without info
    np.testing.assert_array_equal(w, w2)
    np.testing.assert_array_equal(V, V2)


def test_default_tol_follows_dtype(rng):
    A = _random_symmetric(rng, 8, np.float32)
    assert jacobi_eigh(A, return_info=True)[2].tol == _eps(np.float32)


def test_looser_tol_stops_earlier_and_is_still_close(rng):
    n = 40
    A = _random_symmetric(rng, n, np.float64)
    *_, tight = jacobi_eigh(A, return_info=True)
    w, V, loose = jacobi_eigh(A, tol=1e-4, return_info=True)
    assert loose.sweeps <= tight.sweeps and loose.rotations < tight.rotations
    assert loose.off_norm <= 1e-4 * np.sqrt(n * n + n)
    # what is left off the diagonal moves the eigenvalues by at most ||offdiag||_2 <= off_norm ||A||_F
    err = np.abs(w - np.linalg.eigvalsh(A)).max()
    assert err <= loose.off_norm * np.linalg.norm(A) + 100 * n * _eps(np.float64) * np.linalg.norm(A)


def test_not_converged_raises_or_reports(rng):
    A = _random_symmetric(rng, 16, np.float64)
    with pytest.raises(np.linalg.LinAlgError, match="max_sweeps=2"):
        jacobi_eigh(A, max_sweeps=2)
    w, V, info = jacobi_eigh(A, max_sweeps=2, return_info=True)
    assert (info.converged, info.sweeps) == (False, 2)
    assert info.off_norm > info.tol and np.all(np.diff(w) >= 0)
    assert float(np.abs(V.T @ V - np.eye(16)).max()) <= C_ORTH * 16 * _eps(np.float64)


# ---------------------------------------------------------------------------------------------
# klt


def _data(rng, m, f, dtype):
    L = rng.standard_normal((f, f)) * rng.uniform(0.1, 3.0, f)        # correlated, unequal scales
    return (rng.standard_normal((m, f)) @ L + rng.uniform(-10, 10, f)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, f", [(2, 3), (3, 1), (60, 5), (400, 17), (100, 40)])
def test_klt_decorrelates_and_reconstructs(rng, dtype, m, f):
    X = _data(rng, m, f, dtype)
    Y, w, V = klt(X)
    ep = _eps(dtype)
    assert Y.shape == (m, f) and w.shape == (f,) and V.shape == (f, f)
    assert Y.dtype == w.dtype == V.dtype == dtype
    assert np.all(np.diff(w.astype(np.float64)) >= 0), "w not ascending"
    X64, Y64, V64, w64 = (a.astype(np.float64) for a in (X, Y, V, w))
    C = np.cov(X64, rowvar=False).reshape(f, f)
    # the covariance of the data centred by a rounded mean (error delta ~ eps max|X|) is off by
    # m delta delta^T / (m - 1), second order but not bounded by eps ||C|| when a feature's spread
    # is tiny beside its offset (1e-5 against 10 in float32 failed 4e-4 of the draws)
    scale = float(np.linalg.norm(C, 2)) + ep * float(np.abs(X64).max()) ** 2
    # Y's sample covariance is diag(w)
    Yc = Y64 - Y64.mean(axis=0)
    cov_y = Yc.T @ Yc / (m - 1)
    err = float(np.abs(cov_y - np.diag(w64)).max())
    assert err <= C_KLT * f * ep * scale, f"cov(Y) - diag(w): {err / (f * ep * scale):.1f} f eps ||C||"
    # the KLT is invertible: X = Y V^T + mean
    rec = float(np.abs(Y64 @ V64.T + X64.mean(axis=0) - X64).max())
    assert rec <= C_KLT * f * ep * float(np.abs(X64).max())
    # w are the eigenvalues of the sample covariance, V orthogonal
    werr = float(np.abs(w64 - np.linalg.eigvalsh(C)).max())
    assert werr <= C_KLT * f * ep * scale
    assert float(np.abs(V64.T @ V64 - np.eye(f)).max()) <= C_ORTH * f * ep


def test_klt_rank_deficient_and_info(rng):
    m, f = 4, 10                                                       # covariance of rank 3
    X = rng.standard_normal((m, f))
    Y, w, V, info = klt(X, return_info=True)
    assert info.converged and isinstance(info, JacobiInfo)
    scale = float(w.max())
    assert np.all(np.abs(w[: f - (m - 1)]) <= C_KLT * f * _eps(np.float64) * scale)   # 7 zero variances
    assert np.all(w[f - (m - 1):] > 1e-3 * scale)
    np.testing.assert_allclose(Y @ V.T + X.mean(axis=0), X, rtol=0, atol=C_KLT * f * _eps(np.float64) * 10)


def test_klt_orderings_agree(rng):
    X = _data(rng, 50, 9, np.float64)
    ws = [klt(X, ordering=o)[1] for o in ORDERINGS]
    for w in ws[1:]:
        np.testing.assert_allclose(w, ws[0], rtol=0, atol=C_EIG * 9 * _eps(np.float64) * ws[0].max())


# ---------------------------------------------------------------------------------------------
# argument errors


@pytest.mark.parametrize("A, exc, words", [
    (np.array([[1.0, np.nan], [np.nan, 1.0]]), ValueError, "A must be finite"),
    (np.array([[1.0, 0.0], [0.0, np.inf]]), ValueError, "A must be finite"),
    (np.zeros((0, 0)), ValueError, "A is empty"),
    (np.ones(3), ValueError, "A must be a 2-D"),
    (np.ones((2, 3, 3)), ValueError, "A must be a 2-D"),
    (np.ones((3, 4)), ValueError, "A must be square"),
    (np.eye(3, dtype=np.complex128), TypeError, "not supported yet"),
    (np.eye(3, dtype=np.int64), TypeError, "A has integer"),
    (np.eye(3, dtype=bool), TypeError, "A has integer/bool"),
    (np.eye(3, dtype=np.float16), TypeError, "A has dtype float16"),
])
def test_bad_matrix(A, exc, words):
    with pytest.raises(exc, match=words):
        jacobi_eigh(A)


def test_not_symmetric_names_the_worst_entry(rng):
    A = _random_symmetric(rng, 7, np.float64)
    A[2, 5] += 1e-3
    A[4, 1] += 1e-5
    with pytest.raises(ValueError, match=r"A is not symmetric: the worst entry is A\[2, 5\]"):
        jacobi_eigh(A)
    B = _random_symmetric(rng, 7, np.float64)
    B[3, 6] *= 1 + 10 * _eps(np.float64)                                # within 100 eps: accepted
    jacobi_eigh(B)


@pytest.mark.parametrize("kwargs, words", [
    ({"ordering": "chess"}, "ordering must be one of"),
    ({"ordering": None}, "ordering must be one of"),
    ({"tol": 0.0}, r"tol must be a number in \(0, 1\)"),
    ({"tol": -1e-8}, r"tol must be a number in \(0, 1\)"),
    ({"tol": float("nan")}, r"tol must be a number in \(0, 1\)"),
    ({"tol": "1e-8"}, r"tol must be a number in \(0, 1\)"),
    ({"tol": 1.0}, r"tol must be a number in \(0, 1\)"),
    ({"tol": 1e6}, r"tol must be a number in \(0, 1\)"),
    ({"max_sweeps": 0}, "max_sweeps must be a positive integer"),
    ({"max_sweeps": 2.5}, "max_sweeps must be a positive integer"),
    ({"max_sweeps": True}, "max_sweeps must be a positive integer"),
])
def test_bad_options(kwargs, words):
    with pytest.raises(ValueError, match=words):
        jacobi_eigh(np.eye(3), **kwargs)
    with pytest.raises(ValueError, match=words):
        klt(np.ones((4, 3)), **kwargs)


@pytest.mark.parametrize("X, exc, words", [
    (np.ones((1, 3)), ValueError, "at least 2 samples"),
    (np.ones((5, 0)), ValueError, "at least 1 feature"),
    (np.ones(5), ValueError, "X must be a 2-D"),
    (np.array([[1.0, 2.0], [np.nan, 1.0]]), ValueError, "X must be finite"),
    (np.ones((4, 2), dtype=np.complex64), TypeError, "not supported yet"),
    (np.ones((4, 2), dtype=np.int32), TypeError, "X has integer"),
])
def test_klt_bad_input(X, exc, words):
    with pytest.raises(exc, match=words):
        klt(X)


# ---------------------------------------------------------------------------------------------
# the GPU dispatch, with a stand-in for linalg_gpu.jacobi.blocked.jacobi_eigh (no GPU needed)


def test_cupy_input_dispatches_to_gpu_module(rng, monkeypatch):
    calls = []

    def fake_jacobi_eigh(A, **kwargs):
        calls.append(kwargs)
        return jacobi_eigh(A.copy(), assume_symmetric=True, max_sweeps=kwargs["max_sweeps"],
                           return_info=kwargs["return_info"])

    monkeypatch.setattr(blocked, "jacobi_eigh", fake_jacobi_eigh)
    is_cupy = klt_module.is_cupy_array
    A = _random_symmetric(rng, 6, np.float64)
    marked = {id(A)}
    monkeypatch.setattr(klt_module, "is_cupy_array", lambda x: id(x) in marked or is_cupy(x))
    w, V = jacobi_eigh(A, max_sweeps=30, assume_symmetric=True)
    assert calls == [{"tol": None, "max_sweeps": 30, "assume_symmetric": True, "return_info": False}]
    check_eigh(A, w, V, np.float64, "dispatched")
    with pytest.raises(ValueError, match="not available for cupy input"):
        jacobi_eigh(A, ordering="row_cyclic")


def test_docstring_examples():
    failed, tried = doctest.testmod(klt_module, optionflags=doctest.NORMALIZE_WHITESPACE)[:2]
    assert tried >= 2 and failed == 0


def test_known_spectrum(rng):
    """Q diag(1..10) Q^T: the reference is the spectrum itself, not LAPACK."""
    Q = random_orthogonal(rng, 10)
    A = (Q * np.arange(1.0, 11.0)) @ Q.T
    A = (A + A.T) / 2
    w, V = jacobi_eigh(A)
    check_eigh(A, w, V, np.float64, "known spectrum", w_ref=np.arange(1.0, 11.0))


def test_entries_near_the_overflow_threshold():
    """||A||_F overflowed for entries above ~1e154 and stopped the rotations (review finding)."""
    w, _ = jacobi_eigh(np.array([[0.0, 1e200], [1e200, 0.0]]))
    np.testing.assert_allclose(w, [-1e200, 1e200], rtol=1e-14)
    w, _ = jacobi_eigh(np.array([[1.0, 1e160, 0], [1e160, 0, 0], [0, 0, 1]]))
    np.testing.assert_allclose(w, [-1e160, 1.0, 1e160], rtol=1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
def test_diagonal_differences_that_overflow(rng, dtype):
    """Diagonal entries of +-2^(maxexp - 1) and more: a_jj - a_ii overflowed, no rotation was made and w was
    the diagonal, with converged True (review finding). Against LAPACK on A 2^-(maxexp - 1) (exact)."""
    n, e = 6, np.finfo(dtype).maxexp - 1
    B = 0.1 * _random_symmetric(rng, n, np.float64) + np.diag(rng.choice([-1.0, 1.0], n) * rng.uniform(1, 1.2, n))
    B[0, 0], B[1, 1] = 1.2, -1.2                                        # one difference overflows at least
    A = np.ldexp(B.astype(dtype), e)                                    # entries up to 1.2 2^e (finite)
    w, V, info = jacobi_eigh(A, return_info=True)
    assert info.converged and info.rotations > 0
    check_eigh(np.ldexp(A, -e), np.ldexp(w, -e), V, dtype, "scaled back")
    A[0, 0] = A[1, 1] = np.finfo(dtype).max                             # eigenvalue above the range
    with pytest.raises(OverflowError, match="eigenvalues of A overflow"):
        jacobi_eigh(A)


@pytest.mark.parametrize("dtype", DTYPES)
def test_klt_covariance_near_overflow(rng, dtype):
    """Data of variance 2.25 times 2^(2e), a fifth of the largest number over the largest sample variance:
    the sums of squares of Xc^T Xc overflowed although the covariance is finite (review finding); its
    eigenvalues against LAPACK on the exactly scaled data. Data times 2^(2e) have a covariance beyond the
    dtype: a clear OverflowError."""
    m, f = 20, 4
    e = {np.float32: 62, np.float64: 510}[dtype]                       # 2^e: about 4.6e18, 3.4e153
    X0 = (1.5 * rng.standard_normal((m, f)) + rng.uniform(-3, 3, f)).astype(dtype)
    X = np.ldexp(X0, e)
    Y, w, V = klt(X)
    ep = _eps(dtype)
    C0 = np.cov(X0.astype(np.float64), rowvar=False)
    w_ref = np.linalg.eigvalsh(C0)
    assert np.isfinite(w).all() and np.isfinite(Y).all()
    assert np.abs(np.ldexp(w.astype(np.float64), -2 * e) - w_ref).max() <= C_EIG * f * ep * w_ref[-1]
    Y0 = np.ldexp(Y.astype(np.float64), -e)
    Xc0 = X0.astype(np.float64) - X0.astype(np.float64).mean(axis=0)
    assert np.abs(Y0 @ V.astype(np.float64).T - Xc0).max() <= C_KLT * f * ep * np.abs(Xc0).max()
    with pytest.raises(OverflowError, match="covariance of X overflow"):
        klt(np.ldexp(X0, 2 * e))
