"""An exact reference for the nested CVA of Bermudan contracts on one Black-Scholes asset (a test helper).

Value functions: dynamic programming over the exercise dates t_1 < ... < t_n = T (Geske & Johnson 1984,
Bermudan form), in y = log S,

    C_j(y) = e^{-r dt} E[V_{j+1}(Y_{j+1}) | Y_j = y],   V_j = max(h, C_j) (V_n = h),

the last step by the Black-Scholes formula, the others by Gauss-Legendre quadrature in the standard normal of
the lognormal transition, split at the kinks of V_{j+1} (its exercise boundaries, where h = C_{j+1}), with
C_{j+1} a cubic spline on a fine uniform log grid. Netting-set values on outer paths follow the
conventions of ``cva.engine.nested.chunk_values`` with the exact exercise rule; the CVA uses ``cva.xva.measures`` and
``cva.xva.credit`` as the engine does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.interpolate import CubicSpline
from scipy.optimize import brentq
from scipy.special import ndtr

from cva.engine.estimators import samples
from cva.engine.plan import build_plan
from cva.io.config import load_config
from cva.market.model import BlackScholes
from cva.xva import measures
from cva.xva.credit import Counterparty

__all__ = ["BermudanBS", "ReferenceCVA", "bs_price", "cva_contributions", "engine_outer_paths", "model_of",
           "netting_values", "numpy_outer_paths", "paired_difference", "reference_cva"]

DATE_TOL = 1e-9          # times closer than this fraction of the maturity are one date
_CHUNK = 4096            # points per quadrature batch


def bs_price(S, K, tau, r, q, sigma, payoff="put"):
    """Black-Scholes price of a European call or put at the spots S (array), tau > 0, sigma > 0."""
    S = np.asarray(S, dtype=np.float64)
    sd = sigma * math.sqrt(tau)
    d1 = (np.log(S / K) + (r - q + 0.5 * sigma * sigma) * tau) / sd
    d2 = d1 - sd
    dq, dr = math.exp(-q * tau), math.exp(-r * tau)
    if payoff == "call":
        return S * dq * ndtr(d1) - K * dr * ndtr(d2)
    return K * dr * ndtr(-d2) - S * dq * ndtr(-d1)


class BermudanBS:
    """Bermudan put or call on one Black-Scholes asset, exercisable at ``maturity * (1..n) / n``.

    Backward induction with quadrature of the lognormal transition (see the module docstring).
    ``spot`` only centres the grid (with the strike); the grid spans ``width`` standard deviations of
    log S at the maturity beyond both, with ``points_per_sd`` points per standard deviation of one step;
    ``nodes`` Gauss-Legendre nodes per piece on |z| <= ``z_max``. The defaults give about 1e-9 relative
    on the price.
    """

    def __init__(self, strike, maturity, n_exercise, rate, vol, dividend=0.0, payoff="put", *, spot=None,
                 width=10.0, points_per_sd=24, nodes=48, z_max=9.0):
        if payoff not in ("put", "call"):
            raise ValueError(f"payoff must be put or call, got {payoff!r}")
        if not (vol > 0 and strike > 0 and maturity > 0 and int(n_exercise) >= 1):
            raise ValueError("need vol, strike, maturity > 0 and n_exercise >= 1")
        self.strike, self.maturity, self.n = float(strike), float(maturity), int(n_exercise)
        self.rate, self.vol, self.dividend, self.payoff_type = float(rate), float(vol), float(dividend), payoff
        self.spot = float(strike if spot is None else spot)
        self.times = self.maturity * np.arange(1, self.n + 1) / self.n
        self.z_max = float(z_max)
        self._x, self._w = np.polynomial.legendre.leggauss(int(nodes))
        dt = self.maturity / self.n
        s = self.vol * math.sqrt(dt)
        lo, hi = math.log(min(self.spot, self.strike)), math.log(max(self.spot, self.strike))
        half = width * self.vol * math.sqrt(self.maturity) + self.z_max * s
        n_pts = int(math.ceil((hi - lo + 2 * half) * points_per_sd / s)) + 1
        self.grid = np.linspace(lo - half, hi + half, n_pts)                 # log S
        self._spline = [None] * self.n                                      # C_j on the grid, j < n - 1
        self._edge = [None] * self.n                                         # (value, slope) at both ends
        self._breaks = [np.empty(0)] * self.n                                # kinks of V_j in log S, j < n - 1
        for j in range(self.n - 2, -1, -1):
            self._set(j, self._expect(j + 1, self.grid, dt))

    # -- the pieces

    def payoff(self, S):
        """The exercise value h(S) per unit."""
        S = np.asarray(S, dtype=np.float64)
        return np.maximum(S - self.strike, 0.0) if self.payoff_type == "call" else np.maximum(self.strike - S, 0.0)

    def _set(self, j, c):
        """Store C_j from its grid values; its exercise boundaries (roots of h - C_j where h > 0) by Brent."""
        y = self.grid
        sp = CubicSpline(y, c)
        d1 = sp.derivative()
        self._spline[j] = sp
        self._edge[j] = (c[0], float(d1(y[0])), c[-1], float(d1(y[-1])))
        h = self.payoff(np.exp(y))
        pos = h - c > 0
        roots = []
        for i in np.flatnonzero(pos[:-1] != pos[1:]):
            roots.append(brentq(lambda u, j=j: float(self._h1(u) - self._cont(j, np.array([u]))[0]),
                                y[i], y[i + 1], xtol=1e-15, rtol=1e-15))
        self._breaks[j] = np.array(sorted(roots))

    def _h1(self, y):
        S = math.exp(y)
        return max(S - self.strike, 0.0) if self.payoff_type == "call" else max(self.strike - S, 0.0)

    def _cont(self, j, y):
        """C_j at log-spots y: the spline, linear in S beyond the grid, at least 0."""
        y = np.asarray(y, dtype=np.float64)
        c = self._spline[j](y)
        c0, s0, c1, s1 = self._edge[j]
        for out, y_end, c_end, slope in ((y < self.grid[0], self.grid[0], c0, s0),
                                         (y > self.grid[-1], self.grid[-1], c1, s1)):
            if out.any():
                c[out] = c_end + slope * np.expm1(y[out] - y_end)
        return np.maximum(c, 0.0, out=c)

    def _value_at(self, j, y):
        """V_j at log-spots y: max(h, C_j), the payoff at the maturity."""
        h = self.payoff(np.exp(y))
        return h if j == self.n - 1 else np.maximum(h, self._cont(j, y))

    def _expect(self, j, y0, tau):
        """e^{-r tau} E[V_j(Y)], Y ~ N(y0 + (r - q - sigma^2/2) tau, sigma^2 tau), at the log-spots y0."""
        y0 = np.asarray(y0, dtype=np.float64)
        if j == self.n - 1:
            return bs_price(np.exp(y0), self.strike, tau, self.rate, self.dividend, self.vol, self.payoff_type)
        m = (self.rate - self.dividend - 0.5 * self.vol**2) * tau
        s = self.vol * math.sqrt(tau)
        Z = self.z_max
        out = np.empty(y0.shape)
        flat, res = y0.ravel(), out.reshape(-1)
        for a in range(0, flat.size, _CHUNK):
            yc = flat[a:a + _CHUNK]
            e = np.clip((self._breaks[j][None, :] - yc[:, None] - m) / s, -Z, Z)
            e = np.sort(np.concatenate([np.full((yc.size, 1), -Z), e, np.full((yc.size, 1), Z)], axis=1), axis=1)
            half, mid = 0.5 * np.diff(e, axis=1), 0.5 * (e[:, 1:] + e[:, :-1])           # (N, pieces)
            z = mid[..., None] + half[..., None] * self._x                                # (N, pieces, nodes)
            f = self._value_at(j, yc[:, None, None] + m + s * z) * np.exp(-0.5 * z * z)
            res[a:a + _CHUNK] = np.einsum("npk,np,k->n", f, half, self._w) / math.sqrt(2 * math.pi)
        return math.exp(-self.rate * tau) * out

    # -- the value functions

    def _index(self, t):
        """The exercise date at t (its index) or None."""
        i = int(np.argmin(np.abs(self.times - t)))
        return i if abs(self.times[i] - t) <= DATE_TOL * self.maturity else None

    def continuation(self, t, S):
        """C(t, S): the price at time t, spot S, of the contract with the exercise dates after t (0 from T on)."""
        S = np.asarray(S, dtype=np.float64)
        later = np.flatnonzero(self.times > t + DATE_TOL * self.maturity)
        if later.size == 0:
            return np.zeros(S.shape)
        j = int(later[0])
        return self._expect(j, np.log(S), float(self.times[j] - t))

    def value(self, t, S):
        """V(t, S): at an exercise date the payoff where h > 0 and h >= C (the payoff at T), else C(t, S)."""
        i = self._index(t)
        if i is None:
            return self.continuation(t, S)
        h = self.payoff(S)
        if i == self.n - 1:
            return h
        C = self.continuation(t, S)
        return np.where((h > 0) & (h >= C), h, C)

    def at(self, t):
        """The callables (S -> C(t, S), S -> V(t, S)) of the date t."""
        return (lambda S: self.continuation(t, S)), (lambda S: self.value(t, S))

    def price(self, S=None):
        """The t = 0 price at the spot S (default the ``spot`` of the grid)."""
        return self.continuation(0.0, self.spot if S is None else S)

    def boundaries(self, j):
        """The exercise boundaries (spots where h = C) at the exercise date j (0-based); the strike at T."""
        return np.array([self.strike]) if j == self.n - 1 else np.exp(self._breaks[j])


def model_of(contract, model: BlackScholes, **options) -> BermudanBS:
    """The exact model of a contract (``cva.instruments.products.Contract`` or a config one), one-asset market."""
    a = 0 if contract.underlying != "asset" else contract.asset
    return BermudanBS(contract.strike, contract.maturity, contract.n_exercise, model.rate, float(model.vol[a]),
                      float(model.dividend[a]), contract.payoff, spot=float(model.spot[a]), **options)


def _setup(config):
    cfg = load_config(config)
    if cfg.d != 1:
        raise ValueError(f"the reference needs a one-asset market, got d = {cfg.d}")
    return cfg, build_plan(cfg), BlackScholes.from_market(cfg.market)


def engine_outer_paths(config, outer_paths=None, first=0) -> np.ndarray:
    """Outer paths (L, G) on the plan's grid from the engine's keyed generator, keys first .. first + L - 1, as
    ``chunk_values`` draws them (common random numbers with ``cva.run``), as float64."""
    cfg, plan, model = _setup(config)
    L = plan.outer_paths if outer_paths is None else int(outer_paths)
    grid0 = np.concatenate([[0.0], plan.grid])
    S = model.sample(grid0, 1, seed=cfg.run.seed, purpose="outer", dtype=np.dtype(cfg.run.dtype), outer=(first, L),
                     outer_antithetic=cfg.simulation.outer_antithetic)
    return np.asarray(S[:, 0, :, 0], dtype=np.float64)


def numpy_outer_paths(config, outer_paths=None, seed=0) -> np.ndarray:
    """Outer paths (L, G) on the plan's grid from ``numpy.random.default_rng(seed)``, exact lognormal steps."""
    cfg, plan, model = _setup(config)
    L = plan.outer_paths if outer_paths is None else int(outer_paths)
    dt = np.diff(np.concatenate([[0.0], plan.grid]))
    z = np.random.default_rng(seed).standard_normal((L, dt.size))
    v = float(model.vol[0])
    dlog = (model.rate - float(model.dividend[0]) - 0.5 * v * v) * dt + v * np.sqrt(dt) * z
    return float(model.spot[0]) * np.exp(np.cumsum(dlog, axis=1))


def netting_values(config, S, **options) -> np.ndarray:
    """Netting-set values P (L, K) at the exposure dates on the outer paths S (L, G) (or (L, G, 1)).

    The conventions of ``cva.engine.nested.chunk_values`` with the exact continuation value: at its maturity a
    contract is worth its payoff; a European before by Black-Scholes; a Bermudan at an exercise date
    exercises (the holder's decision, whatever the sign of the quantity) where h > 0 and h >= C, is worth h
    there and 0 after, else C; P = sum quantity * value. ``options`` go to :class:`BermudanBS`.
    """
    cfg, plan, model = _setup(config)
    S = np.asarray(S, dtype=np.float64)
    S = S[..., 0] if S.ndim == 3 else S
    G, K = len(plan.grid), len(plan.exposure_index)
    if S.ndim != 2 or S.shape[1] != G:
        raise ValueError(f"outer paths must be (L, {G}), got {S.shape}")
    pos = -np.ones(G, dtype=int)
    pos[plan.exposure_index] = np.arange(K)
    r, q, v = model.rate, float(model.dividend[0]), float(model.vol[0])
    P = np.zeros((S.shape[0], K))
    for ci, c in enumerate(plan.contracts):
        ex_idx = [int(i) for i in plan.exercise_index[ci]]
        exact = None if plan.closed_form[ci] else model_of(c, model, **options)
        alive = np.ones(S.shape[0], dtype=bool)
        for g in range(ex_idx[-1] + 1):
            k, t, s = pos[g], float(plan.grid[g]), S[:, g]
            if k < 0 and g not in ex_idx:
                continue
            ex = None
            h = np.maximum(s - c.strike, 0.0) if c.payoff == "call" else np.maximum(c.strike - s, 0.0)
            if g == ex_idx[-1]:
                val = h                                                          # at maturity: the payoff
            elif exact is None:
                val = bs_price(s, c.strike, c.maturity - t, r, q, v, c.payoff)
            else:
                C = exact.continuation(t, s)
                if g in ex_idx:
                    ex = (h > 0) & (h >= C)
                    val = np.where(ex, h, C)
                else:
                    val = C
            if k >= 0:
                P[:, k] += c.quantity * np.where(alive, val, 0.0)
            if ex is not None:
                alive &= ~ex
    return P


def cva_contributions(config, values) -> np.ndarray:
    """Per-path CVA contributions (L,) of the values (L, K): ``cva.xva.measures.cva_contributions`` with the
    default probabilities of ``cva.xva.credit`` at the exposure dates, as the engine computes them."""
    cfg, plan, model = _setup(config)
    cp = Counterparty.from_config(cfg.require_counterparty(), model.rate)
    q = cp.curve.default_probabilities(plan.dates)
    return measures.cva_contributions(values, plan.dates, model.rate, q, cp.recovery)


@dataclass
class ReferenceCVA:
    """What :func:`reference_cva` returns."""

    cva: float
    stderr: float
    paths: np.ndarray = field(repr=False)            # (L, G) outer paths
    values: np.ndarray = field(repr=False)           # (L, K) netting-set values
    contributions: np.ndarray = field(repr=False)    # (L,) per-path CVA contributions


def reference_cva(config, paths="engine", outer_paths=None, seed=0, first=0, **options) -> ReferenceCVA:
    """CVA with the exact values on outer paths: ``"engine"`` (the engine's own from key ``first`` on, common
    random numbers with ``cva.run``; with antithetic outer paths the standard error from the pair means),
    ``"numpy"`` (``numpy_outer_paths(seed)``) or an array (L, G)."""
    if isinstance(paths, str):
        if paths not in ("engine", "numpy"):
            raise ValueError(f"paths must be 'engine', 'numpy' or an array, got {paths!r}")
        S = (engine_outer_paths(config, outer_paths, first) if paths == "engine"
             else numpy_outer_paths(config, outer_paths, seed))
    else:
        S = np.asarray(paths, dtype=np.float64)
    P = netting_values(config, S, **options)
    c = cva_contributions(config, P)
    paired = isinstance(paths, str) and paths == "engine" and load_config(config).simulation.outer_antithetic
    est = measures.cva_estimate(samples(c, paired))                # antithetic pairs: the pair means
    return ReferenceCVA(cva=est["cva"], stderr=est["stderr"], paths=S, values=P, contributions=c)


def paired_difference(a, b) -> tuple[float, float]:
    """mean(a - b) and its standard error, for per-path contributions on the same outer paths."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size))
