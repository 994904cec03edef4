"""Contracts: payoffs as pure functions of the asset prices, and their exercise grids.

A contract is European (exercise at maturity only), Bermudan (``n_exercise`` equally spaced
dates on (0, T]) or American (a Bermudan with many dates). The payoff is a call or a put on
one asset, the weighted average of a basket, the max or the min of the assets, times a signed
quantity in the netting set. Everything here works on numpy and cupy arrays alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from linalg_gpu import strided
from linalg_gpu._backend import get_array_module

CUDA_DIR = Path(__file__).resolve().parent / "cuda"                   # vanilla_payoff.cu
STYLES = ("european", "bermudan", "american")
PAYOFFS = ("call", "put")
UNDERLYINGS = ("asset", "basket", "max", "min")


@dataclass(frozen=True)
class Contract:
    """One contract of the netting set (the normalized form of a ``portfolio`` entry)."""

    style: str
    payoff: str
    underlying: str
    strike: float
    maturity: float
    n_exercise: int = 1
    asset: int | None = None
    weights: tuple | None = None
    quantity: float = 1.0
    name: str = ""

    def __post_init__(self):
        if self.style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {self.style!r}")
        if self.payoff not in PAYOFFS:
            raise ValueError(f"payoff must be one of {PAYOFFS}, got {self.payoff!r}")
        if self.underlying not in UNDERLYINGS:
            raise ValueError(f"underlying must be one of {UNDERLYINGS}, got {self.underlying!r}")
        if self.underlying == "asset" and self.asset is None:
            raise ValueError("underlying 'asset' needs the asset index")
        if not (self.strike > 0 and self.maturity > 0 and self.n_exercise >= 1):
            raise ValueError("strike and maturity must be positive and n_exercise >= 1")
        if self.style == "european" and self.n_exercise != 1:
            raise ValueError("a european contract has one exercise date")

    @classmethod
    def from_config(cls, c) -> Contract:
        """From a normalized contract of :class:`cva.io.config.Config` (``config.portfolio[i]``)."""
        return cls(style=c.style, payoff=c.payoff, underlying=c.underlying, strike=c.strike, maturity=c.maturity,
                   n_exercise=c.n_exercise, asset=c.asset, weights=None if c.weights is None else tuple(c.weights),
                   quantity=c.quantity, name=c.name)

    @property
    def is_european(self) -> bool:
        return self.style == "european"

    def exercise_times(self) -> np.ndarray:
        """The exercise dates maturity * (1..m) / m; the last one is the maturity."""
        m = self.n_exercise
        return self.maturity * np.arange(1, m + 1) / m

    def underlying_value(self, S):
        """The underlying of the payoff: S[..., i], the weighted average, the max or the min. S (..., d)."""
        xp = get_array_module(S)
        if self.underlying == "asset":
            return S[..., self.asset]
        if self.underlying == "max":
            return S.max(axis=-1)
        if self.underlying == "min":
            return S.min(axis=-1)
        w = np.ones(S.shape[-1]) if self.weights is None else np.asarray(self.weights, dtype=float)
        return strided.matmul(S, xp.asarray(w / w.sum(), dtype=S.dtype))        # a path slice as it lies

    def payoff_value(self, S):
        """The exercise value per unit, max(U - K, 0) or max(K - U, 0), shape S.shape[:-1]."""
        xp = get_array_module(S)
        U = self.underlying_value(S)
        return xp.maximum(U - self.strike, 0) if self.payoff == "call" else xp.maximum(self.strike - U, 0)

    @property
    def symmetric_in_assets(self) -> bool:
        """The payoff depends on the assets only through their order statistics (max, min)."""
        return self.underlying in ("max", "min")

    def describe(self) -> str:
        und = f"asset {self.asset}" if self.underlying == "asset" else self.underlying
        dates = "" if self.is_european else f", {self.n_exercise} dates"
        return f"{self.style} {self.payoff} on {und}, K={self.strike:g}, T={self.maturity:g}{dates}"


def stacked_payoff(contracts, sets, xp):
    """The exercise value of one-asset contracts stacked in a batch (``sets`` path sets each) on their asset's slice
    (..., 1): max(S - K, 0) or max(K - S, 0) per set, the same operations as :meth:`Contract.payoff_value` (the
    strikes rounded to the slice's dtype, as a Python float strike is: float32 paths may meet float64
    regressions)."""
    if len(contracts) == 1:
        return replace(contracts[0], asset=0).payoff_value
    K = xp.asarray(np.repeat([float(c.strike) for c in contracts], sets))[:, None]     # float64
    call = xp.asarray(np.repeat([c.payoff == "call" for c in contracts], sets))[:, None]
    rounded = {}                                                        # the strikes per dtype, cast once

    def payoff(S):
        U = S[..., 0]
        if U.dtype not in rounded:
            rounded[U.dtype] = K.astype(U.dtype)
        if xp is not np:
            return vanilla_payoff_gpu(U, rounded[U.dtype], call)
        k, c = (rounded[U.dtype], call) if U.ndim == 2 else (rounded[U.dtype][:, :, None], call[:, :, None])
        return xp.maximum(xp.where(c, U - k, k - U), 0)
    return payoff


def vanilla_payoff_gpu(U, strikes, calls):
    """max(+-(U - K), 0) per row of U (B, M) or (B, M, N) as it lies, ``strikes`` (B, 1) in U's dtype and ``calls``
    (B, 1) bool: ``cuda/vanilla_payoff.cu``, one launch; numpy twin: :func:`stacked_payoff`'s operations."""
    import cupy as cp

    from linalg_gpu._kernels import get_function, grid_blocks

    shape = U.shape if U.ndim == 3 else U.shape + (1,)
    strides = [st // U.itemsize for st in U.strides] + ([0] if U.ndim == 2 else [])
    out = cp.empty(U.shape, dtype=U.dtype)
    if out.size:
        get_function("vanilla_payoff.cu", "vanilla_payoff", U.dtype, cuda_dir=CUDA_DIR)(
            (grid_blocks(out.size),), (256,),
            (U, *(np.int64(st) for st in strides), cp.ascontiguousarray(strikes), cp.ascontiguousarray(calls), out,
             *(np.int64(n) for n in shape)))
    return out
