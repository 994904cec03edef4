"""The blocked GPU Jacobi SVD and eigen (KLT) against LAPACK (numpy), mpmath and the numpy paths;
the inner-Jacobi kernel against its numpy twin."""

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

import linalg_gpu as lg  # noqa: E402
from linalg_gpu.jacobi import blocked  # noqa: E402
from linalg_gpu.jacobi.block import block_eigh  # noqa: E402


def _eps(dt):
    return float(np.finfo(dt).eps)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(64, 64), (100, 37), (37, 100), (300, 130), (130, 130)])
def test_jacobi_svd_gpu_against_lapack(rng, dtype, shape):
    A = rng.standard_normal(shape).astype(dtype)
    U, s, Vh = lg.jacobi_svd(cp.asarray(A))
    U, s, Vh = cp.asnumpy(U), cp.asnumpy(s), cp.asnumpy(Vh)
    k = min(shape)
    assert U.shape == (shape[0], k) and s.shape == (k,) and Vh.shape == (k, shape[1]) and s.dtype == dtype
    ref = np.linalg.svd(A.astype(np.float64), compute_uv=False)
    tol = 50 * max(shape) * _eps(dtype)
    np.testing.assert_allclose(s, ref, atol=tol * ref[0])
    assert np.linalg.norm(A - (U * s) @ Vh) <= tol * np.linalg.norm(A)
    assert np.abs(U.T @ U - np.eye(k)).max() <= tol and np.abs(Vh @ Vh.T - np.eye(k)).max() <= tol
    s_cpu = lg.jacobi_svd(A, compute_uv=False)
    np.testing.assert_allclose(s, s_cpu, atol=tol * ref[0])                      # the numpy twin


def test_jacobi_svd_gpu_rank_deficient_and_full_matrices(rng):
    A = rng.standard_normal((90, 5)) @ rng.standard_normal((5, 70))              # rank 5
    A[:, 3] = 0
    U, s, Vh = (cp.asnumpy(x) for x in lg.jacobi_svd(cp.asarray(A), full_matrices=True))
    assert U.shape == (90, 90) and Vh.shape == (70, 70)
    assert np.abs(U.T @ U - np.eye(90)).max() < 1e-12 and np.abs(Vh @ Vh.T - np.eye(70)).max() < 1e-12
    assert np.all(s[5:] < 1e-12 * s[0])
    np.testing.assert_allclose(s, np.linalg.svd(A, compute_uv=False), atol=1e-12 * s[0])
    assert np.linalg.norm(A - (U[:, :70] * s) @ Vh) < 1e-12 * np.linalg.norm(A)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 50, 64, 130])
def test_jacobi_eigh_gpu_against_lapack(rng, dtype, n):
    X = rng.standard_normal((n, n))
    A = ((X + X.T) / 2).astype(dtype)
    w, V = lg.jacobi_eigh(cp.asarray(A))
    w, V = cp.asnumpy(w), cp.asnumpy(V)
    ref = np.linalg.eigvalsh(A.astype(np.float64))
    tol = 50 * n * _eps(dtype) * np.abs(ref).max()
    np.testing.assert_allclose(w, ref, atol=tol)
    assert np.linalg.norm(A @ V - V * w) <= tol * np.sqrt(n)
    assert np.abs(V.T @ V - np.eye(n)).max() <= 50 * n * _eps(dtype)


def test_klt_gpu_decorrelates(rng):
    X = rng.standard_normal((500, 3)) @ rng.standard_normal((3, 70)) + rng.standard_normal((500, 70)) * 0.1
    Y, w, V = (cp.asnumpy(x) for x in lg.klt(cp.asarray(X)))
    C = np.cov(Y, rowvar=False)
    np.testing.assert_allclose(np.diag(C), w, rtol=1e-9, atol=1e-12 * w.max())
    assert np.abs(C - np.diag(np.diag(C))).max() < 1e-10 * w.max()
    np.testing.assert_allclose(w, np.linalg.eigvalsh(np.cov(X, rowvar=False)), atol=1e-10 * w.max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("K", [32, 64])
def test_block_eigh_kernel_against_numpy_twin(rng, dtype, K):
    X = rng.standard_normal((40, K, 3 * K)) * np.logspace(0, -3, K)[:, None]
    G = (X @ X.transpose(0, 2, 1)).astype(dtype)
    G[3] = np.diag(np.diag(G[3]))                                                # nothing to rotate: V = I
    tol = 8 * _eps(dtype)
    V = cp.asnumpy(block_eigh(cp.asarray(G), tol, 30))
    V0 = block_eigh(G, tol, 30)
    np.testing.assert_array_equal(V[3], np.eye(K))
    Gd = G.astype(np.float64)
    for W in (V, V0):
        D = W.transpose(0, 2, 1).astype(np.float64) @ Gd @ W
        d = np.diagonal(D, axis1=1, axis2=2).copy()
        d[3] = d[3][np.argsort(-d[3])]                                           # V = I: the diagonal as it was
        ref = np.linalg.eigvalsh(Gd)[:, ::-1]
        scale = np.sqrt(d[:, :, None] * d[:, None, :])
        assert np.abs(d - ref).max() <= 50 * K * _eps(dtype) * ref.max()
        assert np.abs(np.triu(D / scale, 1)).max() <= 100 * K * _eps(dtype)    # relatively diagonal
        assert np.abs(W.transpose(0, 2, 1) @ W - np.eye(K)).max() <= 10 * K * _eps(dtype)
        assert np.all(np.diff(d, axis=1) <= 50 * K * _eps(dtype) * ref.max())  # sorted descending
    np.testing.assert_allclose(np.abs(V), np.abs(V0), atol=1e3 * K * _eps(dtype))   # same vectors (well separated)


def test_block_eigh_strided_diagonal_blocks(rng):
    """The two-sided path hands the kernel the diagonal blocks of a matrix as a strided view."""
    n, K = 256, 64
    X = rng.standard_normal((n, n))
    A = cp.asarray(X + X.T)
    D = cp.lib.stride_tricks.as_strided(A, shape=(n // K, K, K), strides=(K * (n + 1) * 8, n * 8, 8))
    V = block_eigh(D, 1e-14, 30)
    V0 = block_eigh(cp.asnumpy(cp.ascontiguousarray(D)), 1e-14, 30)
    np.testing.assert_allclose(np.abs(cp.asnumpy(V)), np.abs(V0), atol=1e-10)


@pytest.mark.parametrize("shape", [(150, 150), (300, 100)])
def test_jacobi_svd_gpu_graded_relative_accuracy(rng, shape):
    """A = D1 B D2 with D's over 1e-12..1: the GPU path against the pointwise numpy path (itself
    checked against mpmath in tests/test_jacobi_svd.py) to high relative accuracy."""
    m, n = shape
    A = (10 ** rng.uniform(-12, 0, m))[:, None] * rng.standard_normal(shape) * 10 ** rng.uniform(-12, 0, n)
    s = cp.asnumpy(lg.jacobi_svd(cp.asarray(A), compute_uv=False))
    s0 = lg.jacobi_svd(A, compute_uv=False)
    assert np.abs(s / s0 - 1).max() <= 1e3 * n * _eps(np.float64)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_blocked_gpu_against_blocked_numpy(rng, dtype):
    A = rng.standard_normal((200, 130)).astype(dtype)
    s, info = blocked.jacobi_svd(cp.asarray(A), compute_uv=False, return_info=True)
    s0, info0 = blocked.jacobi_svd(A, compute_uv=False, return_info=True)
    np.testing.assert_allclose(cp.asnumpy(s), s0, rtol=100 * 200 * _eps(dtype))
    S = (A.T @ A / 200).astype(dtype)
    w, V = blocked.jacobi_eigh(cp.asarray(S))
    w0, V0 = blocked.jacobi_eigh(S)
    np.testing.assert_allclose(cp.asnumpy(w), w0, atol=100 * 130 * _eps(dtype) * np.abs(w0).max())

