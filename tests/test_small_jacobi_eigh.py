"""The batched two-sided Jacobi of small/jacobi_eigh.py (the twin of cuda/eigh_jacobi.cu, which
eigh_small runs on the GPU for n <= 12 in float32, 10 in float64), against LAPACK and mpmath."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from small_testlib import eps, mT, random_orthogonal, sym_from_eigs
from test_small_eigh import check_eigenpairs

from linalg_gpu.jacobi.orderings import round_robin
from linalg_gpu.small import _gpu
from linalg_gpu.small.jacobi_eigh import eigh_jacobi, tournament_steps

SIZES = tuple(range(1, max(_gpu.EIGH_JACOBI_MAX_N.values()) + 1))
DTYPES = (np.float32, np.float64)


@pytest.mark.parametrize("n", range(1, 12))
def test_tournament_steps_are_the_round_robin_ordering(n):
    """The kernel's seat order covers exactly the pairs of orderings.round_robin, step by step."""
    ours = [sorted((p, q) for p, q in step if q < n) for step in tournament_steps(n)]
    assert [s for s in ours if s] == [sorted(map(tuple, s.tolist())) for s in round_robin(n)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", SIZES)
def test_random_symmetric(rng, n, dtype):
    X = rng.standard_normal((300, n, n))
    A = (X + mT(X)).astype(dtype)
    w, V = eigh_jacobi(A)
    check_eigenpairs(A, w, V, np.linalg.eigvalsh(A.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", SIZES)
def test_repeated_clustered_and_diagonal(rng, n, dtype):
    w0 = np.sort(rng.integers(-2, 3, (60, n)) + rng.standard_normal((60, n)) * 10.0 ** rng.integers(-12, -2, (60, 1)))
    A = sym_from_eigs(rng, w0)
    D = np.zeros((20, n, n))
    D[:, np.arange(n), np.arange(n)] = rng.integers(-2, 3, (20, n))
    A = np.concatenate([A, D, np.broadcast_to(np.eye(n), (5, n, n)), np.zeros((5, n, n))]).astype(dtype)
    w, V = eigh_jacobi(A)
    w_ref = np.linalg.eigvalsh(A.astype(np.float64))
    ok = np.abs(w_ref).max(axis=1) > 0
    check_eigenpairs(A[ok], w[ok], V[ok], w_ref[ok], dtype)
    np.testing.assert_array_equal(w[~ok], 0)                           # the zero matrices: V = I
    np.testing.assert_array_equal(V[~ok], np.broadcast_to(np.eye(n), (int((~ok).sum()), n, n)))


@pytest.mark.parametrize("k", (-300, -150, -40, 0, 40, 150, 300))
def test_scales(rng, k):
    """Entries near the ends of the float64 range: the power-of-2 scaling keeps them finite and exact."""
    n = 8
    Q = random_orthogonal(rng, n, (4,))
    A = (Q * np.r_[np.logspace(0, -6, n - 2), -1.0, 1.0]) @ mT(Q)
    A = (A + mT(A)) / 2
    w, V = eigh_jacobi(A * 10.0**k)
    check_eigenpairs(A, w / 10.0**k, V, np.linalg.eigvalsh(A), np.float64, f"scale 1e{k}")


@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_top_of_the_range(rng, dtype):
    """max |A_ij| = 1.25 * 2^1023 (float32: 2^127), ||A||_2 below the overflow: the scaling exponent
    is clamped so that 2^ex stays finite; the eigenpairs are those of A / 2^1023 (exact) scaled."""
    n = 8
    top = np.finfo(dtype).maxexp - 1
    X = rng.standard_normal((4, n, n)) * 0.01
    A0 = np.stack([np.diag(rng.permutation(np.r_[np.linspace(1.0, 0.1, n - 1), -0.7])) for _ in range(4)])
    A0 = A0 + (X + mT(X)) / 2
    A = (A0 * (1.25 / np.abs(A0).max(axis=(1, 2), keepdims=True))).astype(dtype) * dtype(2.0 ** top)
    w, V = eigh_jacobi(A)
    As = A.astype(np.float64) / 2.0 ** top
    check_eigenpairs(As, (w.astype(np.float64) / 2.0 ** top).astype(dtype), V, np.linalg.eigvalsh(As), dtype)


def test_graded_positive_definite_relative_accuracy(rng):
    """Jacobi with the relative threshold finds the eigenvalues of D B D (B well conditioned, D graded
    over 24 orders of magnitude) to about n eps cond(B) relative (Demmel & Veselic); LAPACK's
    tridiagonal methods do not guarantee that for the small ones. Reference: mpmath at 60 digits."""
    n = 6
    for _ in range(3):
        Q = random_orthogonal(rng, n)
        B = (Q * np.linspace(1.0, 4.0, n)) @ Q.T
        d = 10.0 ** np.linspace(0, -12, n)
        A = d[:, None] * B * d[None, :]
        w, _ = eigh_jacobi(A[None])
        with mpmath.workdps(60):
            ref = sorted(float(x) for x in mpmath.eigsy(mpmath.matrix(A.tolist()), eigvals_only=True))
        assert np.abs(w[0] / ref - 1).max() <= 20 * n * eps(np.float64) * 4.0


def test_reads_lower_triangle_only_and_systems_are_independent(rng):
    """Only the lower triangle is read; a system's result does not depend on its batch neighbours
    (each stops after its own sweep that rotates nothing)."""
    n = 7
    X = rng.standard_normal((6, n, n))
    A = X + mT(X)
    A[2] = np.diag(np.arange(n, dtype=float))                          # done before the first rotation
    w1, V1 = eigh_jacobi(A)
    w2, V2 = eigh_jacobi(np.tril(A) + np.triu(rng.standard_normal((6, n, n)), 1))
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(V1, V2)
    for s in range(6):
        ws, Vs = eigh_jacobi(A[s:s + 1])
        np.testing.assert_array_equal(ws[0], w1[s])
        np.testing.assert_array_equal(Vs[0], V1[s])
    np.testing.assert_array_equal(w1[2], np.arange(n))


@pytest.mark.parametrize("dtype, tiny", [(np.float32, 1e-25), (np.float64, 1e-160)])
def test_tiny_pivots_keep_their_relative_accuracy(rng, dtype, tiny):
    """A 2 x 2 block far below the rest of the matrix: d and u of its rotation are scaled by a power of
    2 before d^2 + u^2 (which would underflow), so its eigenvalues keep their relative accuracy
    (reference: mpmath at 50 digits on the dtype's entries)."""
    n = 5
    A = np.zeros((n, n))
    A[:3, :3] = np.diag([1.0, -2.0, 3.0])
    B = rng.uniform(-0.2, 0.2, (2, 2))
    A[3:, 3:] = (np.diag([2.0, 3.0]) + B + B.T) * tiny                 # eigenvalues in [1.2, 3.8] tiny
    A = A.astype(dtype)
    w, V = eigh_jacobi(A[None])
    with mpmath.workdps(50):
        ref = sorted(float(x) for x in mpmath.eigsy(mpmath.matrix(A.astype(np.float64).tolist()), eigvals_only=True))
    ref = np.array(ref)
    assert np.all(np.abs(w[0] - ref) <= 20 * n * eps(dtype) * np.abs(ref))
    assert np.abs(V[0].T.astype(np.float64) @ V[0] - np.eye(n)).max() <= 10 * n * eps(dtype)
