"""The nearest correlation matrix (Higham, "Computing the nearest correlation matrix: a problem from finance",
IMA J. Numer. Anal. 22, 2002): alternating projections with Dykstra's correction between the symmetric positive
semidefinite matrices (the eigen-step, by the blocked one-sided Jacobi eigensolver ``linalg_gpu.jacobi``) and
the matrices of unit diagonal, in the Frobenius norm. A desk's estimated correlation (pairwise from prices of
unequal histories, or stressed by hand) is often not positive semidefinite; the market model needs one that is.

The last iterate is projected onto the semidefinite cone once more and scaled back to unit diagonal, so the
result is a correlation matrix whose smallest eigenvalue is >= 0 to rounding. The eigenvalues before and after
come from ``eigh_indefinite`` (Jacobi on the hyperbolic SVD: high relative accuracy, also for the negative ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linalg_gpu.jacobi import eigh_indefinite, jacobi_eigh

TOL = 1e-10              # relative change of the iterates that stops the projections
MAX_ITERATIONS = 1000


@dataclass
class Repair:
    """What :func:`nearest_correlation` did: the matrix, ||C - input||_F, the eigenvalues before and after
    (ascending) and the iterations."""

    matrix: np.ndarray
    distance: float
    eigenvalues_before: np.ndarray
    eigenvalues_after: np.ndarray
    iterations: int

    def to_json(self) -> dict:
        return {"distance_frobenius": self.distance, "iterations": self.iterations,
                "eigenvalues_before": self.eigenvalues_before.tolist(),
                "eigenvalues_after": self.eigenvalues_after.tolist(),
                "method": "nearest correlation matrix (Higham 2002, alternating projections with Dykstra's "
                          "correction; Jacobi eigensolver)"}


def _psd(X):
    """The nearest symmetric positive semidefinite matrix to the symmetric X: its negative eigenvalues set to 0."""
    w, V = jacobi_eigh(0.5 * (X + X.T))
    return (V * np.maximum(w, 0.0)) @ V.T


def nearest_correlation(A, tol=TOL, max_iterations=MAX_ITERATIONS) -> Repair:
    """The correlation matrix nearest to the symmetric A (d x d, unit diagonal expected but not needed)."""
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"the correlation must be a square matrix, got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError("the correlation has NaN or Inf entries")
    if np.abs(A - A.T).max() > 1e-10:
        raise ValueError("the correlation is not symmetric: the nearest correlation matrix needs a symmetric input")
    A = 0.5 * (A + A.T)
    Y, dS = A.copy(), np.zeros_like(A)
    for it in range(1, max_iterations + 1):  # noqa: B007 (the count is reported)
        R = Y - dS
        X = _psd(R)
        dS = X - R
        Y_new = X.copy()
        np.fill_diagonal(Y_new, 1.0)
        change = np.linalg.norm(Y_new - Y) / max(np.linalg.norm(Y_new), 1.0)
        Y = Y_new
        if change < tol and np.linalg.norm(Y - X) / np.linalg.norm(Y) < 10 * tol:
            break
    else:
        raise np.linalg.LinAlgError(f"the nearest correlation matrix did not converge in {max_iterations} "
                                    f"iterations (relative change {change:.2e})")
    X = _psd(Y)
    s = 1.0 / np.sqrt(np.diag(X))
    C = X * s[:, None] * s[None, :]
    C = 0.5 * (C + C.T)
    np.fill_diagonal(C, 1.0)
    return Repair(matrix=C, distance=float(np.linalg.norm(C - A)), eigenvalues_before=eigh_indefinite(A)[0],
                  eigenvalues_after=eigh_indefinite(C)[0], iterations=it)
