"""The blocked GPU Jacobi SVD and eigen (KLT) against LAPACK (numpy) and the numpy path."""

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

import linalg_gpu as lg  # noqa: E402


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
    # the blocked GPU path rotates by eigenvectors of Gram matrices: the singular vectors computed as
    # columns / s are orthogonal to ~ eps * cond^2
    orth = max(tol, 100 * _eps(dtype) * (ref[0] / ref[-1]) ** 2)   # measured: up to ~eps cond^2
    assert np.abs(U.T @ U - np.eye(k)).max() <= orth and np.abs(Vh @ Vh.T - np.eye(k)).max() <= orth
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
