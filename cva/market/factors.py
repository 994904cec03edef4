"""Factor reduction of the market's correlation by the Karhunen-Loeve transform.

The correlation C (d x d) is diagonalized by the two-sided parallel cyclic Jacobi eigensolver
(Torun et al.'s KLT, ``linalg_gpu.jacobi.jacobi_eigh``), C = V diag(lambda) V^T with lambda descending.
The k leading factors give the loadings B = V_k diag(sqrt(lambda_k)); each row of B is then scaled to unit
norm, so that every asset keeps its own volatility and only the dependence is approximated. The model draws k
normals per time step instead of d and correlates them as w = B z: its correlation is B B^T (unit diagonal,
rank k). Factor j explains the share lambda_j / d of the total variance (trace C = d).

With k = d the rows already have unit norm and B B^T = C to rounding: the full model in another square root.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from linalg_gpu.jacobi import jacobi_eigh


@dataclass(frozen=True)
class Factors:
    """``loading`` (d, k), the unit-norm rows B; ``eigenvalues`` (d,) of the correlation, descending."""

    loading: np.ndarray
    eigenvalues: np.ndarray

    @property
    def k(self) -> int:
        return self.loading.shape[1]

    @property
    def explained(self) -> np.ndarray:
        """The share of the total variance of each factor, (d,) descending (the first k are kept)."""
        return self.eigenvalues / self.eigenvalues.sum()

    @property
    def correlation(self) -> np.ndarray:
        """The model's correlation B B^T."""
        C = self.loading @ self.loading.T
        C = 0.5 * (C + C.T)
        np.fill_diagonal(C, 1.0)
        return C

    def to_json(self, C) -> dict:
        """Summary data: k, d, the explained share per kept factor and in all, and ||B B^T - C||_F."""
        e = self.explained
        return {"k": self.k, "d": int(self.loading.shape[0]), "explained": e[:self.k].tolist(),
                "explained_total": float(e[:self.k].sum()), "eigenvalues": self.eigenvalues.tolist(),
                "correlation_distance_frobenius": float(np.linalg.norm(self.correlation - C)),
                "method": "Karhunen-Loeve transform of the correlation (parallel cyclic Jacobi eigensolver), "
                          "loadings scaled to unit norm per asset"}


def factor_count(eigenvalues, explained: float) -> int:
    """The fewest leading factors whose share of the variance reaches ``explained`` (in (0, 1])."""
    if not 0.0 < explained <= 1.0:
        raise ValueError(f"explained must lie in (0, 1], got {explained}")
    share = np.cumsum(eigenvalues) / np.sum(eigenvalues)
    return int(min(np.searchsorted(share, explained - 1e-12) + 1, len(share)))


@lru_cache(maxsize=8)
def _spectrum(key: bytes, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The KLT of the correlation whose float64 bytes are ``key``: eigenvalues (clipped at 0) and eigenvectors,
    descending, read-only. Kept for the config check, the model and the bumped markets of a run, which would
    otherwise each diagonalize the same matrix (55 ms at d = 100)."""
    C = np.frombuffer(key, dtype=np.float64).reshape(d, d)
    w, V = jacobi_eigh(0.5 * (C + C.T))
    w, V = np.clip(w[::-1], 0.0, None), np.ascontiguousarray(V[:, ::-1])
    w.setflags(write=False)
    V.setflags(write=False)
    return w, V


def klt_factors(C, k: int | None = None, *, explained: float | None = None) -> Factors:
    """The k-factor KLT loadings of the correlation C (or the fewest factors explaining ``explained``).

    Raises
    ------
    ValueError
        Neither or both of k and explained, k outside [1, d], explained outside (0, 1], or an asset with no
        weight on the kept factors (its variance would vanish: keep more factors).
    """
    C = np.ascontiguousarray(C, dtype=np.float64)
    d = C.shape[0]
    if (k is None) == (explained is None):
        raise ValueError("give either the number of factors k or the share explained, not both")
    w, V = _spectrum(C.tobytes(), d)                                      # descending
    if k is None:
        k = factor_count(w, explained)
    if not 1 <= k <= d:
        raise ValueError(f"factors must lie in [1, d = {d}], got {k}")
    B = V[:, :k] * np.sqrt(w[:k])
    norm = np.linalg.norm(B, axis=1)
    if norm.min() < 1e-8:
        i = int(np.argmin(norm))
        raise ValueError(f"asset {i} has no weight on the {k} leading factor(s) (loading norm {norm[i]:.3g}): "
                         "its volatility would vanish; keep more factors")
    return Factors(loading=B / norm[:, None], eigenvalues=w)
