"""LDL^T factorization and solve (paper section 3) against LAPACK on fresh random inputs."""

from __future__ import annotations

import numpy as np
import pytest
from small_testlib import (
    BATCHES,
    DTYPES,
    SIZES,
    cond2,
    eps,
    mT,
    randomized_xi_rho,
    ref_solve,
    rel_err,
    spd_with_cond,
)

import linalg_gpu as lg

C_RECON = 10     # ||L D L^T - A||_max <= C_RECON * n * eps * ||A||_max
C_SOLVE = 10     # ||x - x_ref|| / ||x_ref|| <= C_SOLVE * n * eps * cond_2(A)

# Condition numbers that stay well inside each precision (cond * n * eps << 1).
COND = {np.float32: 1e3, np.float64: 1e8}


def _ldlt_product(L, D):
    L = L.astype(np.float64)
    return (L * D.astype(np.float64)[..., None, :]) @ mT(L)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_factor_reconstructs_spd(rng, n, batch, dtype):
    A = spd_with_cond(rng, n, COND[dtype], batch, dtype)
    L, D, ok = lg.ldlt_factor(A)
    assert L.shape == batch + (n, n) and D.shape == batch + (n,) and ok.shape == batch
    assert L.dtype == dtype and D.dtype == dtype
    assert ok.dtype == np.bool_ and np.all(ok)
    # unit lower triangular, exactly
    assert np.all(np.diagonal(L, axis1=-2, axis2=-1) == 1)
    assert np.all(np.triu(L, 1) == 0)
    assert np.all(D > 0)
    A64 = A.astype(np.float64)
    err = np.abs(_ldlt_product(L, D) - A64).max(axis=(-2, -1))
    tol = C_RECON * n * eps(dtype) * np.abs(A64).max(axis=(-2, -1))
    assert np.all(err <= tol), (err / tol).max()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", (1, 2, 5, 16, 33))
def test_pivots_match_cholesky(rng, n, dtype):
    """D_jj = (diag of the Cholesky factor)^2, computed by LAPACK in float64 on the same matrix."""
    A = spd_with_cond(rng, n, COND[dtype], (6,), dtype)
    _, D, ok = lg.ldlt_factor(A)
    assert np.all(ok)
    Dref = np.diagonal(np.linalg.cholesky(A.astype(np.float64)), axis1=-2, axis2=-1) ** 2
    tol = C_SOLVE * n * eps(dtype) * cond2(A)[:, None]
    assert np.all(np.abs(D - Dref) / Dref <= tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_solve_matches_lapack(rng, n, batch, dtype):
    A = spd_with_cond(rng, n, COND[dtype], batch, dtype)
    b = rng.standard_normal(batch + (n,)).astype(dtype)
    x = lg.ldlt_solve(A, b)
    assert x.shape == b.shape and x.dtype == dtype
    xref = ref_solve(A, b)
    err = rel_err(x, xref)
    tol = C_SOLVE * n * eps(dtype) * cond2(A)
    assert np.all(err <= tol), (err / tol).max()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", (1, 3, 8, 32))
def test_solve_multiple_rhs(rng, n, dtype):
    batch, k = (3, 4), 3
    A = spd_with_cond(rng, n, COND[dtype], batch, dtype)
    b = rng.standard_normal(batch + (n, k)).astype(dtype)
    x, rep = lg.ldlt_solve(A, b, return_report=True)
    assert x.shape == b.shape and x.dtype == dtype
    assert np.all(rep.ok) and np.all(rep.method == "ldlt")
    err = rel_err(x, ref_solve(A, b), vec_axis=-2)                    # (..., k)
    tol = C_SOLVE * n * eps(dtype) * cond2(A)[..., None]
    assert np.all(err <= tol)
    # each column is the single-right-hand-side solution
    for j in range(k):
        np.testing.assert_allclose(x[..., j], lg.ldlt_solve(A, b[..., j]),
                                   rtol=0, atol=float(np.abs(x).max()) * 8 * eps(dtype))


def test_ldlt_solve_is_solve_small_ldlt(rng):
    A = spd_with_cond(rng, 9, 1e4, (5,))
    b = rng.standard_normal((5, 9))
    x1, r1 = lg.ldlt_solve(A, b, return_report=True)
    x2, r2 = lg.solve_small(A, b, method="ldlt", return_report=True)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(r1.method_code, r2.method_code)
    np.testing.assert_array_equal(r1.residual, r2.residual)
    assert r1.start_method == r2.start_method == "ldlt"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", (2, 5, 16, 31, 64))
def test_randomized_xi_rho(rng, n, dtype):
    """Section 3.3: A = Q R Q^T with Q from the tridiagonalization of Xi_rho."""
    A, rho = randomized_xi_rho(rng, n, (7,), dtype=dtype)
    b = rng.standard_normal((7, n)).astype(dtype)
    L, D, ok = lg.ldlt_factor(A)
    assert np.all(ok), rho
    err = np.abs(_ldlt_product(L, D) - A.astype(np.float64)).max(axis=(-2, -1))
    assert np.all(err <= C_RECON * n * eps(dtype) * np.abs(A).max(axis=(-2, -1)))
    x = lg.ldlt_solve(A, b)
    err = rel_err(x, ref_solve(A, b))
    assert np.all(err <= C_SOLVE * n * eps(dtype) * cond2(A)), (rho, err)


def test_only_lower_triangle_is_read(rng):
    n = 7
    A = spd_with_cond(rng, n, 100.0, (4,))
    garbage = np.triu(rng.standard_normal((4, n, n)), 1) * 1e3
    L1, D1, ok1 = lg.ldlt_factor(A)
    L2, D2, ok2 = lg.ldlt_factor(np.tril(A) + garbage, assume_symmetric=True)
    np.testing.assert_array_equal(L1, L2)
    np.testing.assert_array_equal(D1, D2)
    np.testing.assert_array_equal(ok1, ok2)


def _breakdown_batch(rng, n, dtype):
    """[SPD, indefinite, zero, SPD, singular (rank one), SPD with a zero row/column]."""
    spd = spd_with_cond(rng, n, 10.0, (2,), dtype)
    indef = np.diag(np.r_[1.0, -1.0, np.ones(n - 2)]).astype(dtype)
    zero = np.zeros((n, n), dtype)
    ones = np.ones((n, n), dtype) * dtype(rng.uniform(0.5, 2.0))
    pad = np.zeros((n, n), dtype)
    pad[:-1, :-1] = spd_with_cond(rng, n - 1, 10.0, (), dtype)
    A = np.stack([spd[0], indef, zero, spd[1], ones, pad])
    return A, np.array([True, False, False, True, False, False])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", (2, 3, 8, 17))
def test_breakdown_flagged_and_isolated(rng, n, dtype):
    """One rare failure was recorded here ([3-float32]: an SPD system of condition 10 came back with ok False
    when factored alone, and passed when its seed was replayed). Not reproduced: the inputs are a function of
    the seed, the factorization reads no uninitialized memory (np.empty'd D, z and outputs are written before
    they are read), keeps no state between calls and does not write to A (checked below); an SPD system's
    pivots are >= lambda_min = 0.1 against a breakdown threshold n eps max|a_ii| <= 3.6e-7 at [3-float32].
    It came back once more in a fresh clone's full suite (2026-11-28, [3-float32], system 3 alone): all three
    pivots were replaced by max|a_ii|, so the first was flagged already, where D_00 = a_00 less the product over
    an empty k; the factorization no longer forms that product (nor the substitution its empty twin).
    The asserts say what they saw, should it come back."""
    A, expect_ok = _breakdown_batch(rng, n, dtype)
    A0 = A.copy()
    L, D, ok = lg.ldlt_factor(A)
    np.testing.assert_array_equal(ok, expect_ok)
    assert np.all(np.isfinite(L)) and np.all(np.isfinite(D))
    np.testing.assert_array_equal(A, A0)                               # the input is not modified
    # the systems that did not break down are unaffected by the others in the batch
    for i in np.flatnonzero(expect_ok):
        Li, Di, oki = lg.ldlt_factor(A[i])
        assert oki, (i, Di, A[i], D[i])
        np.testing.assert_array_equal(A, A0)
        np.testing.assert_allclose(L[i], Li, rtol=0, atol=4 * eps(dtype) * float(np.abs(Li).max()))
        np.testing.assert_allclose(D[i], Di, rtol=4 * eps(dtype))


def test_breakdown_threshold_is_n_eps_max_diag():
    """The documented criterion: a pivot <= n * eps * max_i |A_ii| is a breakdown."""
    e = np.finfo(np.float64).eps
    A = np.array([[[1.0, 1.0], [1.0, 1.0 + 2 * e]],        # pivot 2 eps = n eps: breakdown
                  [[1.0, 1.0], [1.0, 1.0 + 8 * e]],        # pivot 8 eps: accepted
                  [[1.0, 1.0], [1.0, 1.0]]])               # pivot 0
    _, D, ok = lg.ldlt_factor(A)
    np.testing.assert_array_equal(ok, [False, True, False])
    assert D[1, 1] == 8 * e


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_solve_breakdown_raises_or_reports(rng, dtype):
    n = 6
    A, expect_ok = _breakdown_batch(rng, n, dtype)
    b = rng.standard_normal((A.shape[0], n)).astype(dtype)
    with pytest.raises(np.linalg.LinAlgError, match=r"\(1,\)"):
        lg.ldlt_solve(A, b)
    x, rep = lg.ldlt_solve(A, b, return_report=True)
    assert x.dtype == dtype
    np.testing.assert_array_equal(rep.ok, expect_ok)
    np.testing.assert_array_equal(rep.breakdown, ~expect_ok)
    assert np.all(rep.method == "ldlt")
    assert np.all(np.isnan(x[~expect_ok]))
    good = np.flatnonzero(expect_ok)
    err = rel_err(x[good], ref_solve(A[good], b[good]))
    assert np.all(err <= C_SOLVE * n * eps(dtype) * cond2(A[good]))
    assert np.all(rep.residual[good] <= rep.rtol)
