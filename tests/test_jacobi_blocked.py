"""The blocked Jacobi of the GPU paths, run on numpy (``linalg_gpu.jacobi.blocked``, ``.block``):
the inner Jacobi against LAPACK, the blocked SVD / eigen against LAPACK and, for relative accuracy
on graded matrices, against the pointwise paths (themselves checked against mpmath)."""

import numpy as np
import pytest
from small_testlib import eps as _eps

from linalg_gpu import jacobi_eigh, jacobi_svd
from linalg_gpu.jacobi import blocked
from linalg_gpu.jacobi.block import block_eigh


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("K", [32, 64])
def test_block_eigh_against_lapack(rng, dtype, K):
    X = rng.standard_normal((6, K, 2 * K)) * np.logspace(0, -4, K)[:, None]
    G = (X @ X.transpose(0, 2, 1)).astype(dtype)
    S = rng.standard_normal((1, K, K))
    G = np.concatenate([G, (S + S.transpose(0, 2, 1)).astype(dtype)])             # and an indefinite one
    V = block_eigh(G, K * _eps(dtype), 30)
    Gd = G.astype(np.float64)
    D = V.transpose(0, 2, 1).astype(np.float64) @ Gd @ V
    d = np.diagonal(D, axis1=1, axis2=2)
    ref = np.linalg.eigvalsh(Gd)[:, ::-1]
    big = np.abs(ref).max(axis=1, keepdims=True)
    assert np.all(np.abs(d - ref) <= 50 * K * _eps(dtype) * big)
    assert np.all(np.diff(d, axis=1) <= 50 * K * _eps(dtype) * big)              # sorted descending
    assert np.abs(V.transpose(0, 2, 1) @ V - np.eye(K)).max() <= 10 * _eps(dtype)  # after Newton-Schulz
    pd = d[:-1]                                                                  # positive definite ones:
    rel = np.abs(D[:-1]) / np.sqrt(pd[:, :, None] * pd[:, None, :])              # relatively diagonal
    assert np.abs(np.triu(rel, 1)).max() <= 100 * K * _eps(dtype)


def test_block_eigh_identity_when_nothing_rotates_and_shape_errors(rng):
    G = np.stack([np.diag(rng.uniform(1, 2, 32)) for _ in range(3)])
    np.testing.assert_array_equal(block_eigh(G, 1e-12), np.broadcast_to(np.eye(32), (3, 32, 32)))
    with pytest.raises(ValueError, match="G must have shape"):
        block_eigh(np.zeros((4, 4)), 1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(64, 64), (100, 37), (37, 100), (200, 130)])
@pytest.mark.parametrize("precondition", [True, False])
def test_blocked_svd_against_lapack(rng, dtype, shape, precondition):
    A = rng.standard_normal(shape).astype(dtype)
    U, s, Vh, info = blocked.jacobi_svd(A, precondition=precondition, return_info=True)
    k = min(shape)
    ref = np.linalg.svd(A.astype(np.float64), compute_uv=False)
    tol = 50 * max(shape) * _eps(dtype)
    assert info["converged"] and s.dtype == dtype
    np.testing.assert_allclose(s, ref, atol=tol * ref[0])
    assert np.linalg.norm(A - (U * s) @ Vh) <= tol * np.linalg.norm(A)
    assert np.abs(U.T @ U - np.eye(k)).max() <= tol and np.abs(Vh @ Vh.T - np.eye(k)).max() <= tol


@pytest.mark.parametrize("shape", [(40, 40), (150, 150), (200, 90)])
def test_blocked_svd_graded_relative_accuracy(rng, shape):
    """A = D1 B D2, D's over 1e-12..1: LAPACK errs by up to O(1) relative on the small singular values;
    Jacobi to O(n eps cond(B)), and a Gaussian B's condition number has a heavy tail."""
    m, n = shape
    d1 = 10 ** rng.uniform(-12, 0, m)
    B = rng.standard_normal(shape)
    A = d1[:, None] * B * 10 ** rng.uniform(-12, 0, n)
    s = blocked.jacobi_svd(A, compute_uv=False)
    s0 = jacobi_svd(A, compute_uv=False)
    assert np.abs(s / s0 - 1).max() <= 10 * n * _eps(np.float64) * np.linalg.cond(B)


def test_blocked_svd_rank_deficient_full_matrices(rng):
    A = rng.standard_normal((90, 5)) @ rng.standard_normal((5, 70))
    A[:, 3] = 0
    U, s, Vh = blocked.jacobi_svd(A, full_matrices=True)
    assert U.shape == (90, 90) and Vh.shape == (70, 70)
    assert np.abs(U.T @ U - np.eye(90)).max() < 1e-12 and np.abs(Vh @ Vh.T - np.eye(70)).max() < 1e-12
    assert np.all(s[5:] < 1e-12 * s[0])
    assert np.linalg.norm(A - (U[:, :70] * s) @ Vh) < 1e-12 * np.linalg.norm(A)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 50, 64, 130, 257])
def test_blocked_eigh_against_lapack(rng, dtype, n):
    X = rng.standard_normal((n, n))
    A = ((X + X.T) / 2).astype(dtype)
    w, V, info = blocked.jacobi_eigh(A, return_info=True)
    ref = np.linalg.eigvalsh(A.astype(np.float64))
    tol = 50 * n * _eps(dtype) * np.abs(ref).max()
    assert info.converged
    np.testing.assert_allclose(w, ref, atol=tol)
    assert np.linalg.norm(A @ V - V * w) <= tol * np.sqrt(n)
    assert np.abs(V.T @ V - np.eye(n)).max() <= 50 * n * _eps(dtype)


@pytest.mark.parametrize("n", [100, 150])
def test_blocked_eigh_graded_positive_definite(rng, n):
    """D B D with B well-conditioned positive definite, D over 1e-6..1: eigenvalues down to ~1e-12 of
    the largest, to high relative accuracy (the pointwise path's, checked against mpmath)."""
    B = rng.standard_normal((n, n))
    B = B @ B.T / n + 0.5 * np.eye(n)
    d = 10 ** rng.uniform(-6, 0, n)
    A = d[:, None] * B * d
    w = blocked.jacobi_eigh(A)[0]
    w0 = jacobi_eigh(A)[0]
    assert np.abs(w / w0 - 1).max() <= 1e3 * n * _eps(np.float64)


def test_blocked_block_size_is_checked():
    with pytest.raises(ValueError, match="block must be one of"):
        blocked.jacobi_eigh(np.eye(4), block=8)
