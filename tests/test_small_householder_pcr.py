"""Householder tridiagonalization (section 4) and parallel cyclic reduction (Fig. 9)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from small_testlib import (
    BATCHES,
    DTYPES,
    SIZES,
    cond2,
    eps,
    mT,
    random_dominant_tridiag,
    randomized_xi_rho,
    ref_solve,
    rel_err,
    spd_with_cond,
    sym_from_eigs,
    tridiag_dense,
)

import linalg_gpu as lg
from linalg_gpu.small.pcr import pcr_schedule

C_RECON = 10    # ||Q T Q^T - A||_max <= C_RECON * n * eps * ||A||_max
C_ORTH = 10     # ||Q^T Q - I||_max <= C_ORTH * n * eps
C_EIG = 10      # |eig(T) - eig(A)| <= C_EIG * n * eps * ||A||_2
C_SOLVE = 10    # relative forward error <= C_SOLVE * n * eps * cond_2


def _random_symmetric(rng, n, batch, dtype):
    """Symmetric indefinite matrices with eigenvalues uniform in [-1, 1] (exactly symmetric)."""
    w = rng.uniform(-1.0, 1.0, tuple(batch) + (n,))
    return sym_from_eigs(rng, w).astype(dtype)


# ---------------------------------------------------------------------------------------------
# tridiagonalize


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_tridiagonalize_reconstructs(rng, n, batch, dtype):
    A = _random_symmetric(rng, n, batch, dtype)
    d, e, Q = lg.tridiagonalize(A)
    assert d.shape == batch + (n,) and e.shape == batch + (n - 1,) and Q.shape == batch + (n, n)
    assert d.dtype == e.dtype == Q.dtype == dtype
    A64, Q64 = A.astype(np.float64), Q.astype(np.float64)
    T = tridiag_dense(d.astype(np.float64), e.astype(np.float64))
    nA = np.abs(A64).max(axis=(-2, -1))
    err = np.abs(Q64 @ T @ mT(Q64) - A64).max(axis=(-2, -1))
    assert np.all(err <= C_RECON * n * eps(dtype) * nA), (err / (n * eps(dtype) * nA)).max()
    orth = np.abs(mT(Q64) @ Q64 - np.eye(n)).max(axis=(-2, -1))
    assert np.all(orth <= C_ORTH * n * eps(dtype)), orth.max() / (n * eps(dtype))
    # the spectrum of T is the spectrum of A (LAPACK in float64 on the same matrices)
    wT = np.linalg.eigvalsh(T)
    wA = np.linalg.eigvalsh(A64)
    n2 = np.abs(wA).max(axis=-1)
    assert np.all(np.abs(wT - wA).max(axis=-1) <= C_EIG * n * eps(dtype) * n2)


@pytest.mark.parametrize("k", (-170, -160, -100, 100, 155, 160))
def test_tridiagonalize_extreme_scales(rng, k):
    """A = Q T Q^T must hold at any representable scale (LAPACK's dlarfg rescales for this).

    Entries of 1e-160 or 1e160 are ordinary float64 numbers, but their squares under/overflow.
    """
    n = 6
    A = _random_symmetric(rng, n, (3,), np.float64) * 10.0**k
    d, e, Q = lg.tridiagonalize(A)
    assert np.all(np.isfinite(d)) and np.all(np.isfinite(e)) and np.all(np.isfinite(Q))
    T = tridiag_dense(d, e)
    nA = np.abs(A).max(axis=(-2, -1))
    err = np.abs(Q @ T @ mT(Q) - A).max(axis=(-2, -1))
    assert np.all(err <= C_RECON * n * eps(np.float64) * nA), err / nA
    assert np.abs(mT(Q) @ Q - np.eye(n)).max() <= C_ORTH * n * eps(np.float64)


@pytest.mark.parametrize("n", (1, 2))
def test_tridiagonalize_trivial_sizes(rng, n):
    """n <= 2 is already tridiagonal: Q = I, T = A."""
    A = _random_symmetric(rng, n, (3,), np.float64)
    d, e, Q = lg.tridiagonalize(A)
    np.testing.assert_array_equal(Q, np.broadcast_to(np.eye(n), (3, n, n)))
    np.testing.assert_array_equal(d, np.diagonal(A, axis1=-2, axis2=-1))
    np.testing.assert_array_equal(e, A[:, 1:, 0] if n == 2 else np.zeros((3, 0)))


def test_tridiagonalize_keeps_tridiagonal_input(rng):
    """A matrix that is already tridiagonal needs no reflection (H_i = I for every row)."""
    d0, e0 = random_dominant_tridiag(rng, 9, (4,))
    d, e, Q = lg.tridiagonalize(tridiag_dense(d0, e0))
    np.testing.assert_array_equal(Q, np.broadcast_to(np.eye(9), (4, 9, 9)))
    np.testing.assert_array_equal(d, d0)
    np.testing.assert_array_equal(e, e0)


def test_tridiagonalize_reads_lower_triangle_only(rng):
    n = 8
    A = _random_symmetric(rng, n, (3,), np.float64)
    junk = np.triu(rng.standard_normal((3, n, n)), 1)
    d1, e1, Q1 = lg.tridiagonalize(A)
    d2, e2, Q2 = lg.tridiagonalize(np.tril(A) + junk, assume_symmetric=True)
    np.testing.assert_array_equal(d1, d2)
    np.testing.assert_array_equal(e1, e2)
    np.testing.assert_array_equal(Q1, Q2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("n", (1, 2, 3, 8, 33))
def test_reflectors_apply_q(rng, n, batch, dtype):
    A = _random_symmetric(rng, n, batch, dtype)
    d, e, Q = lg.tridiagonalize(A)
    d2, e2, H = lg.tridiagonalize(A, form_q=False)
    assert isinstance(H, lg.HouseholderReflectors)
    np.testing.assert_array_equal(d, d2)
    np.testing.assert_array_equal(e, e2)
    tol = C_ORTH * n * eps(dtype)
    np.testing.assert_allclose(H.form_q(), Q, rtol=0, atol=tol)
    Q64 = Q.astype(np.float64)
    for shape in (batch + (n,), batch + (n, 3)):
        y = rng.standard_normal(shape).astype(dtype)
        y64 = y.astype(np.float64)
        qy, qty = H.apply_q(y), H.apply_qt(y)
        assert qy.shape == qty.shape == shape
        assert qy.dtype == qty.dtype == dtype
        ny = np.abs(y64).max()
        if len(shape) == len(batch) + 1:
            ref_q = np.einsum("...ij,...j->...i", Q64, y64)
            ref_qt = np.einsum("...ji,...j->...i", Q64, y64)
        else:
            ref_q, ref_qt = Q64 @ y64, mT(Q64) @ y64
        np.testing.assert_allclose(qy, ref_q, rtol=0, atol=tol * ny)
        np.testing.assert_allclose(qty, ref_qt, rtol=0, atol=tol * ny)
        np.testing.assert_allclose(H.apply_q(qty), y, rtol=0, atol=tol * ny)


# ---------------------------------------------------------------------------------------------
# PCR


@pytest.mark.parametrize("n", range(1, 65))
def test_pcr_schedule(n):
    steps = pcr_schedule(n)
    assert isinstance(steps, tuple)
    assert len(steps) == (math.ceil(math.log2(n)) if n > 1 else 0)
    for perm, link in steps:
        perm = np.asarray(perm)
        assert perm.shape == (n,)
        np.testing.assert_array_equal(np.sort(perm), np.arange(n))     # a permutation
        assert np.asarray(link).shape == (n - 1,)
    if steps:
        assert not np.asarray(steps[-1][1]).any()                      # all blocks of size one


def test_pcr_schedule_blocks_are_even_odd_splits():
    """Fig. 9: each step puts a block's even positions first, then its odd ones."""
    n = 11
    blocks = [list(range(n))]
    for perm, link in pcr_schedule(n):
        expect, new_blocks = [], []
        for blk in blocks:
            for part in (blk[0::2], blk[1::2]):
                if part:
                    new_blocks.append(list(range(len(expect), len(expect) + len(part))))
                    expect.extend(part)
        np.testing.assert_array_equal(perm, expect)
        exp_link = np.zeros(n - 1, dtype=bool)
        for blk in new_blocks:
            exp_link[blk[0]:blk[-1]] = True
        np.testing.assert_array_equal(link, exp_link)
        blocks = new_blocks


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", range(1, 41))
def test_pcr_against_dense_solve(rng, n, dtype):
    batch = (5,)
    d, e = random_dominant_tridiag(rng, n, batch)
    d, e = d.astype(dtype), e.astype(dtype)
    T = tridiag_dense(d.astype(np.float64), e.astype(np.float64))
    kappa = cond2(T)
    for shape in (batch + (n,), batch + (n, 3)):
        y = rng.standard_normal(shape).astype(dtype)
        z = lg.pcr_solve(d, e, y)
        assert z.shape == shape and z.dtype == dtype
        zref = ref_solve(T, y)
        vec_axis = -1 if len(shape) == 2 else -2
        err = rel_err(z, zref, vec_axis=vec_axis)
        kap = kappa if vec_axis == -1 else kappa[:, None]
        assert np.all(err <= C_SOLVE * n * eps(dtype) * kap), (err / (n * eps(dtype) * kap)).max()


def _pcr_stride_form(d, e, v):
    """cuda/householder_pcr.cu's pcr_solve in numpy: equation i eliminates its couplings to i - h and
    i + h (h = 1, 2, 4, ...) in place; d (n, c), e (n-1, c), v (n, r, c)."""
    n = d.shape[0]
    c = np.concatenate([e, np.zeros_like(d[:1])])               # coupling of i and i + h
    idx = np.arange(n)
    h = 1
    with np.errstate(all="ignore"):
        while h < n:
            okl, okr = (idx >= h)[:, None], (idx + h < n)[:, None]
            left, right = np.clip(idx - h, 0, n - 1), np.clip(idx + h, 0, n - 1)
            cl, dl = np.where(okl, c[left], 0), np.where(okl, d[left], 1)
            dr, cr = np.where(okr, d[right], 1), np.where(okr, c[right], 0)
            vl, vr = np.where(okl[..., None], v[left], 0), np.where(okr[..., None], v[right], 0)
            a, g = cl / dl, c / dr
            v = v - a[:, None] * vl - g[:, None] * vr
            d = d - a * cl - g * c
            c = -g * cr
            h *= 2
        return v / d[:, None], d


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_pcr_stride_form_equals_fig9_order(rng, dtype):
    """The GPU kernel runs the Fig. 9 eliminations in stride form (no permutations): the same
    operations on the same operands, so z and the pivots are bitwise those of the numpy twin."""
    from linalg_gpu.small.pcr import _pcr_bl

    for n in range(1, 65):
        d = (rng.standard_normal((n, 20)) + 4).astype(dtype)
        e = rng.standard_normal((n - 1, 20)).astype(dtype)
        v = rng.standard_normal((n, 2, 20)).astype(dtype)
        z_twin, piv_twin = _pcr_bl(d, e, v)
        z, piv = _pcr_stride_form(d, e, v)
        np.testing.assert_array_equal(z, z_twin, err_msg=f"n = {n}")
        np.testing.assert_array_equal(piv, piv_twin, err_msg=f"n = {n}")


@pytest.mark.parametrize("batch", BATCHES, ids=str)
def test_pcr_batch_shapes(rng, batch):
    n = 13
    d, e = random_dominant_tridiag(rng, n, batch)
    y = rng.standard_normal(batch + (n, 2))
    z = lg.pcr_solve(d, e, y)
    assert z.shape == y.shape
    err = rel_err(z, ref_solve(tridiag_dense(d, e), y), vec_axis=-2)
    assert np.all(err <= C_SOLVE * n * eps(np.float64) * 10)


def test_pcr_spd_not_dominant(rng):
    """PCR without pivoting is also fine for SPD tridiagonals that are not diagonally dominant."""
    n = 24
    d = np.full((4, n), 2.0) + rng.uniform(0, 1e-2, (4, n))
    e = -np.ones((4, n - 1))                                            # ~ 1D Laplacian
    y = rng.standard_normal((4, n))
    T = tridiag_dense(d, e)
    z = lg.pcr_solve(d, e, y)
    assert np.all(rel_err(z, ref_solve(T, y)) <= C_SOLVE * n * eps(np.float64) * cond2(T))


def test_pcr_zero_pivot_raises():
    n = 4
    d = np.array([[2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    e = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])   # [1]: zero diagonal
    y = np.ones((3, n))
    with pytest.raises(np.linalg.LinAlgError, match=r"\(1,\)"):
        lg.pcr_solve(d, e, y)
    # singular (rank-deficient) T: [[1, 1], [1, 1]] blocks
    with pytest.raises(np.linalg.LinAlgError, match=r"\(0,\)"):
        lg.pcr_solve(np.ones((1, 2)), np.ones((1, 1)), np.ones((1, 2)))


# ---------------------------------------------------------------------------------------------
# Householder + PCR solve


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_householder_pcr_solve(rng, n, batch, dtype):
    cond = 1e3 if dtype == np.float32 else 1e6
    A = spd_with_cond(rng, n, cond, batch, dtype)
    b = rng.standard_normal(batch + (n,)).astype(dtype)
    x, rep = lg.solve_small(A, b, method="householder_pcr", return_report=True)
    assert x.dtype == dtype and x.shape == b.shape
    assert np.all(rep.method == "householder_pcr") and np.all(rep.ok)
    err = rel_err(x, ref_solve(A, b))
    tol = C_SOLVE * n * eps(dtype) * cond2(A)
    assert np.all(err <= tol), (err / tol).max()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", (3, 8, 16, 33, 64))
def test_householder_pcr_randomized_xi_rho(rng, n, dtype):
    A, rho = randomized_xi_rho(rng, n, (6,), dtype=dtype)
    b = rng.standard_normal((6, n, 2)).astype(dtype)
    x, rep = lg.solve_small(A, b, method="householder_pcr", return_report=True)
    assert np.all(rep.ok)
    err = rel_err(x, ref_solve(A, b), vec_axis=-2)
    assert np.all(err <= C_SOLVE * n * eps(dtype) * cond2(A)[:, None]), rho
    assert np.all(rep.residual <= rep.rtol)
