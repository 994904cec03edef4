"""Regression bases psi(S) of the Longstaff-Schwartz continuation value.

The asset prices enter scaled, x = S / scale (``scale`` is the model's spot), so that the
regression matrices of a well-posed problem are well conditioned whatever the currency unit;
the paper's Fig. 2 case has S0 = 1 and so keeps its raw ``(1, S^1..S^d)`` basis.

- ``linear``: (1, x_1, ..., x_d), p = d + 1 (the paper's basis, section 2);
- ``quadratic``: (1, x_i, x_i x_j for i <= j), p = 1 + d + d (d + 1) / 2;
- ``laguerre`` (one asset): (1, L_0(x), L_1(x), L_2(x)) with the weighted Laguerre polynomials
  L_0 = e^{-x/2}, L_1 = e^{-x/2} (1 - x), L_2 = e^{-x/2} (1 - 2x + x^2/2) of Longstaff &
  Schwartz (2001), section 3; p = 4.
With ``payoff`` given, the exercise value (scaled by the mean of ``scale``) is one more column.
With ``order_statistics`` the scaled prices enter sorted, largest first: the natural state of a
max or min payoff, which is symmetric in the assets. On Andersen & Broadie's 5-asset max call
(quadratic basis, 2^17 paths, two path sets, this machine) it raised the LSM price by 0.15,
from 26.04 / 25.86 to 26.22 / 26.01 against their 26.15.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from linalg_gpu._backend import get_array_module

BASES = ("linear", "quadratic", "laguerre")
REGRESSION_DTYPES = ("auto", "run", "float64")


def basis_size(name: str, d: int, payoff_regressor: bool = False) -> int:
    """The number p of regressors (the size of the normal equations)."""
    if name not in BASES:
        raise ValueError(f"basis must be one of {BASES}, got {name!r}")
    if name == "laguerre" and d != 1:
        raise ValueError(f"the laguerre basis is for one asset; the market has d = {d}")
    p = {"linear": d + 1, "quadratic": 1 + d + d * (d + 1) // 2, "laguerre": 4}[name]
    return p + int(payoff_regressor)


def evaluate(name: str, S, scale, payoff=None, order_statistics=False, payoff_scale=None):
    """psi(S): the regressors, shape S.shape[:-1] + (p,). S (..., d); payoff (...) or None; ``scale`` (d,) or an
    array that broadcasts against S; ``payoff_scale`` the payoff column's divisor (default the mean of
    ``scale``), a number or an array that broadcasts against ``payoff``."""
    xp = get_array_module(S)
    d = S.shape[-1]
    basis_size(name, d)
    x = S / xp.asarray(scale, dtype=S.dtype)                                   # (..., d)
    if order_statistics:
        x = -xp.sort(-x, axis=-1)                                              # largest first
    one = xp.ones(S.shape[:-1] + (1,), dtype=S.dtype)
    if name == "linear":
        cols = [one, x]
    elif name == "quadratic":
        i, j = np.triu_indices(d)
        cols = [one, x, x[..., i] * x[..., j]]                                 # (..., d(d+1)/2)
    else:
        y = x[..., 0]
        w = xp.exp(-0.5 * y)
        cols = [one, xp.stack([w, w * (1 - y), w * (1 - 2 * y + 0.5 * y * y)], axis=-1)]
    if payoff is not None:
        c = S.dtype.type(np.mean(scale)) if payoff_scale is None else xp.asarray(payoff_scale, dtype=S.dtype)
        cols.append((payoff / c)[..., None])
    return xp.concatenate(cols, axis=-1)


@dataclass(frozen=True, eq=False)
class Basis:
    """psi(S, payoff) -> regressors: :func:`evaluate` with its options bound (for :mod:`cva.engine.lsm`).

    ``scale`` is (d,), one scale for every path set of a batch, or (m, d), one row per group of a batch whose sets
    come in m equal groups of consecutive sets (contracts on different assets stacked in one Longstaff-Schwartz
    call, :mod:`cva.engine.nested`): each group's regressors are those of its own basis, bit for bit."""

    name: str
    scale: np.ndarray
    payoff_regressor: bool = False
    order_statistics: bool = False

    def __call__(self, S, payoff):
        if self.scale.ndim == 1:
            return evaluate(self.name, S, self.scale, payoff if self.payoff_regressor else None,
                            order_statistics=self.order_statistics)
        m = self.scale.shape[0]
        Sg = S.reshape((m, -1) + S.shape[1:])                                  # (m, sets per group, ..., d)
        lead = (m,) + (1,) * (S.ndim - 1)
        X = evaluate(self.name, Sg, self.scale.reshape(lead + self.scale.shape[1:]),
                     None if not self.payoff_regressor else payoff.reshape(Sg.shape[:-1]),
                     order_statistics=self.order_statistics, payoff_scale=self.scale.mean(axis=1).reshape(lead))
        return X.reshape(S.shape[:-1] + X.shape[-1:])

    @property
    def groups(self) -> int:
        """The number of groups with their own scale (1: one scale for the batch)."""
        return 1 if self.scale.ndim == 1 else self.scale.shape[0]

    @property
    def affine(self) -> bool:
        """psi = (1, S / scale[, payoff / mean(scale)]): the LSM's GPU path then takes its normal equations
        and fitted values from S itself, without forming psi (:mod:`cva.engine.lsm`)."""
        return self.name == "linear" and not self.order_statistics

    @property
    def fused(self) -> bool:
        """The Laguerre basis (one asset): the LSM's GPU path evaluates psi inside its normal-equation and
        fitted-value kernels (``cva/engine/cuda/laguerre_lsm.cu``) instead of forming it."""
        return self.name == "laguerre" and not self.order_statistics

    def inverse_scale(self, d: int) -> np.ndarray:
        """1 / scale per asset, (d,) float64 (the factors of S in psi); (m, d) with a scale per group."""
        return 1.0 / np.broadcast_to(self.scale, self.scale.shape[:-1] + (d,))

    def payoff_column(self, payoff):
        """The payoff column of psi, payoff / mean(scale) (as :func:`evaluate`), with a scale per group for
        ``payoff`` (B, ...) of B sets in the basis's groups."""
        if self.scale.ndim == 1:
            return payoff / payoff.dtype.type(np.mean(self.scale))
        return per_group(payoff, self.scale.mean(axis=1), operator.truediv)


def per_group(x, rows, op=operator.mul):
    """``op(x, rows)`` group by group: x (B, ...) whose B sets come in m equal groups of consecutive sets, rows
    (m, ...) one operand per group (cast to x's dtype), broadcast against a set's x[i]."""
    xp = get_array_module(x)
    r = xp.asarray(rows, dtype=x.dtype)
    m = r.shape[0]
    r = r.reshape((m, 1) + (1,) * (x.ndim - r.ndim) + r.shape[1:])
    return op(x.reshape((m, -1) + x.shape[1:]), r).reshape(x.shape)


def regression_dtype(setting: str, dtype, name: str) -> np.dtype:
    """The dtype of the LSM regressions (config ``regression.dtype``, :func:`cva.engine.lsm.longstaff_schwartz`):
    ``run`` the paths' ``dtype``, ``float64`` always float64, ``auto`` float64 for the Laguerre basis and
    the paths' dtype otherwise.

    The weighted Laguerre functions of x = S / spot near 1 are close to collinear with the constant: the
    normal equations of Longstaff & Schwartz's put (S0 = 36, K = 40, 50 dates) have condition numbers
    3.8e9-2.2e11 (2^18 in-the-money paths at t = 0.1-0.9), beyond float32. With float32 paths and float32
    regressions 22 of its 49 dates fell back to the truncated eigen-solve and the price came out 2.65
    standard errors low (2^18 paths, CPU, the same normals: 4.4605 against 4.4756 with float64 paths);
    with float64 regressions 4.4756, every date solved by LDL^T. The linear and quadratic bases keep the
    run's dtype (the 5-asset max call, quadratic: 26.103 against 26.104).
    """
    if setting not in REGRESSION_DTYPES:
        raise ValueError(f"regression dtype must be one of {REGRESSION_DTYPES}, got {setting!r}")
    if setting == "float64" or (setting == "auto" and name == "laguerre"):
        return np.dtype(np.float64)
    return np.dtype(dtype)


def make_basis(name: str, scale, payoff_regressor: bool = False, order_statistics: bool = False) -> Basis:
    """The :class:`Basis` ``name`` with its scale and options (its size checked when it is called)."""
    if name not in BASES:
        raise ValueError(f"basis must be one of {BASES}, got {name!r}")
    return Basis(name, np.asarray(scale, dtype=float), payoff_regressor, order_statistics)
