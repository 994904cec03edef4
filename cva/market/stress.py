"""Stress against base: the directions of the asset space in which a stressed market's variance grows most over
the base market's, by the generalized SVD of the pair of covariance factors (``linalg_gpu.jacobi.gsvd``, the
implicit Hari-Zimmermann algorithm of Novakovic & Singer).

With the log-return covariances per year Sigma = diag(vol) C diag(vol) = L L^T of the stressed (s) and the base
(b) market, the GSVD of (F, G) = (L_s^T, L_b^T) gives F Z = U diag(alpha), G Z = V diag(beta): the columns z_j of Z
are the generalized eigenvectors of (Sigma_s, Sigma_b), Sigma_s z = ratio Sigma_b z with ratio_j = (alpha_j /
beta_j)^2 = z_j^T Sigma_s z_j / z_j^T Sigma_b z_j, the factor by which the stress multiplies the variance of the
position z_j (in log-returns). Sorted descending: the first direction is the one the stress hurts most, the
last the one it calms most.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cva.market.model import BlackScholes
from linalg_gpu.jacobi import gsvd

#: The smallest eigenvalue of the base correlation below which its covariance counts as singular.
SINGULAR_TOL = 1e-8


@dataclass
class StressDirections:
    """``ratios`` (d,) variance ratios, descending; ``directions`` (d, d) the positions z_j as columns, scaled to a
    base volatility of 1 (z^T Sigma_b z = 1) with the largest weight positive; ``alpha``, ``beta`` the GSVD's."""

    ratios: np.ndarray
    directions: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray

    def to_json(self) -> dict:
        return {"variance_ratios": self.ratios.tolist(), "directions": self.directions.T.tolist(),
                "alpha": self.alpha.tolist(), "beta": self.beta.tolist(),
                "method": "generalized SVD of the covariance factors (Hari-Zimmermann, Jacobi)"}


def covariance_factor(model: BlackScholes) -> np.ndarray:
    """L with L L^T = diag(vol) C diag(vol), the log-return covariance per year."""
    return model.vol[:, None] * model.square_root()


def stress_directions(base: BlackScholes, stress: BlackScholes) -> StressDirections:
    """The directions and variance ratios of ``stress`` against ``base`` (markets of the same d; the base's
    covariance must be nonsingular: every base vol > 0 and its correlation positive definite)."""
    if base.d != stress.d:
        raise ValueError(f"the markets have different numbers of assets: base d = {base.d}, stress d = {stress.d}")
    if np.any(base.vol <= 0):
        raise ValueError("the base market has a zero volatility: its covariance is singular, no ratio is defined")
    low = float(np.linalg.eigvalsh(base.correlation)[0])
    if low < SINGULAR_TOL or base.n_normals < base.d:
        raise ValueError(f"the base correlation is singular (smallest eigenvalue {low:.3g}; a repaired correlation "
                         "lies on the semidefinite boundary, a factor model has rank k < d): the stress's variance "
                         "ratio in its null direction is infinite; give a positive definite base")
    Lb, Ls = covariance_factor(base), covariance_factor(stress)
    try:
        _, _, Z, alpha, beta = gsvd(Ls.T.copy(), Lb.T.copy())
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"the base covariance is singular (its correlation is not positive definite): {exc}") from None
    Sb = Lb @ Lb.T
    Z = Z / np.sqrt(np.einsum("ij,ik,kj->j", Z, Sb, Z))                        # base volatility 1
    big = np.argmax(np.abs(Z), axis=0)
    Z = Z * np.sign(Z[big, np.arange(Z.shape[1])])
    return StressDirections(ratios=(alpha / beta) ** 2, directions=Z, alpha=alpha, beta=beta)


def plot(result: StressDirections, names=None) -> bytes:
    """A PNG: the variance ratios and the weights of the three directions the stress hurts most."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = result.ratios.size
    names = names or [f"asset {i}" for i in range(d)]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    a1.bar(range(1, d + 1), result.ratios, color="tab:red")
    a1.set_xticks(range(1, d + 1))
    a1.axhline(1.0, color="k", lw=0.6)
    a1.set_xlabel("direction")
    a1.set_ylabel("variance ratio stress / base")
    a1.set_title("How much the stress scales each direction's variance")
    for j in range(min(3, d)):
        a2.plot(range(d), result.directions[:, j], "o-", label=f"direction {j + 1} (x{result.ratios[j]:.3g})")
    a2.set_xticks(range(d), names, rotation=45, ha="right", fontsize=8)
    a2.axhline(0.0, color="k", lw=0.5)
    a2.set_title("Weights of the most amplified directions")
    a2.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()
