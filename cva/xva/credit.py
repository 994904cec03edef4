"""The counterparty's default: a hazard curve, survival and default probabilities, recovery.

Default is independent of the market (no wrong-way risk), so the CVA of Abbas-Turki-Graillat (section 2)
needs only the survival curve S(t) = exp(-int_0^t lambda) at the exposure dates:
per-interval default probabilities S(t_{k-1}) - S(t_k).

The hazard rate is flat, piecewise constant on given intervals (flat beyond the last), or
bootstrapped from CDS par spreads: tenor by tenor, the hazard of the new interval is the one
that prices that tenor's CDS at par,

    premium leg  s * sum_i delta_i D(t_i) (S(t_i) + S(t_{i-1})) / 2       (accrual on default: half period)
    protection   (1 - R) * int_0^T D(t) dS(t)                              (exact on each constant-hazard piece)

with quarterly premium dates and the flat discount rate D(t) = exp(-r t) of the market.
"""

from __future__ import annotations

import numpy as np

PREMIUM_FREQUENCY = 4          # CDS premium payments per year
MAX_HAZARD = 1e4               # the bootstrap's bracket: no spread needs a larger hazard rate


class HazardCurve:
    """Piecewise-constant hazard: ``rates[i]`` on (times[i-1], times[i]], the last rate beyond.

    Parameters
    ----------
    times : (n,) increasing positive floats, the right ends of the pieces.
    rates : (n,) non-negative floats.
    """

    def __init__(self, times, rates):
        times = np.atleast_1d(np.asarray(times, dtype=float))
        rates = np.atleast_1d(np.asarray(rates, dtype=float))
        if times.shape != rates.shape or times.ndim != 1 or times.size == 0:
            raise ValueError(f"hazard times and rates must be vectors of one length, got {times.shape}, {rates.shape}")
        if np.any(times <= 0) or np.any(np.diff(times) <= 0):
            raise ValueError(f"hazard times must be positive and increasing, got {times}")
        if np.any(~np.isfinite(rates)) or np.any(rates < 0):
            raise ValueError(f"hazard rates must be finite and non-negative, got {rates}")
        self.times, self.rates = times, rates

    @classmethod
    def flat(cls, rate: float) -> HazardCurve:
        return cls([1.0], [rate])

    @classmethod
    def from_cds(cls, spreads: dict, recovery: float, rate: float) -> HazardCurve:
        """Bootstrap from CDS par spreads {tenor: spread} (decimal, e.g. 0.01 = 100 bp)."""
        tenors = np.array(sorted(float(t) for t in spreads))
        quotes = np.array([float(spreads[t]) for t in sorted(spreads, key=float)])
        if tenors.size == 0 or np.any(tenors <= 0) or np.any(quotes < 0):
            raise ValueError("cds_spreads needs positive tenors and non-negative spreads")
        rates = []
        for i, s in enumerate(quotes):
            def pv(lam, i=i, s=s):
                return _cds_value(cls(tenors[: i + 1], np.array(rates + [lam])), tenors[i], s, recovery, rate)

            if pv(0.0) > -1e-14:
                raise ValueError(f"counterparty.cds_spreads: the spread {s} at tenor {tenors[i]:g} is below what the "
                                 f"hazards of the shorter tenors already imply; no non-negative hazard rate reprices "
                                 f"it (an inverted curve this steep is not arbitrage-free)")
            lo, hi = 0.0, 1.0
            while pv(hi) < 0:                                   # protection grows with the hazard
                hi *= 2.0
                if hi > MAX_HAZARD:
                    raise ValueError(f"counterparty.cds_spreads: the spread {s:g} at tenor {tenors[i]:g} is too high: "
                                     f"no hazard rate up to {MAX_HAZARD:g} reprices it with recovery {recovery:g} "
                                     f"(the premium accrued to a default exceeds the protection 1 - R)")
            for _ in range(100):                                # bisection to machine precision
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if pv(mid) < 0 else (lo, mid)
                if hi - lo <= 1e-15 * max(hi, 1e-12):
                    break
            rates.append(0.5 * (lo + hi))
        return cls(tenors, rates)

    def cumulative(self, t):
        """int_0^t lambda(u) du, for t >= 0 (array)."""
        t = np.asarray(t, dtype=float)
        left = np.concatenate([[0.0], self.times[:-1]])
        rates = self.rates
        # the last rate continues beyond the last time
        widths = np.clip(t[..., None] - left, 0.0, None)
        widths[..., :-1] = np.minimum(widths[..., :-1], self.times[:-1] - left[:-1])
        return widths @ rates

    def survival(self, t):
        """S(t) = exp(-int_0^t lambda)."""
        return np.exp(-self.cumulative(t))

    def default_probabilities(self, dates):
        """S(t_{k-1}) - S(t_k) for the dates t_1 < ... < t_K (t_0 = 0)."""
        s = self.survival(np.concatenate([[0.0], np.asarray(dates, dtype=float)]))
        return s[:-1] - s[1:]


def _cds_value(curve, tenor, spread, recovery, rate, steps_per_year=400):
    """Protection minus premium leg per unit notional (zero at the par spread)."""
    n_pay = max(1, int(round(tenor * PREMIUM_FREQUENCY)))
    pay = tenor * np.arange(1, n_pay + 1) / n_pay
    prev = np.concatenate([[0.0], pay[:-1]])
    S_pay, S_prev = curve.survival(pay), curve.survival(prev)
    premium = spread * np.sum((pay - prev) * np.exp(-rate * pay) * 0.5 * (S_pay + S_prev))
    # protection: on each small step the hazard is constant, so int D dS is exact per step
    n = max(8, int(np.ceil(tenor * steps_per_year)))
    grid = np.linspace(0.0, tenor, n + 1)
    cum = curve.cumulative(grid)
    S = np.exp(-cum)
    lam_dt = np.diff(cum)                                                   # hazard * dt per step (S may underflow)
    dt = np.diff(grid)
    a = lam_dt + rate * dt                                                  # total decay per step
    frac = np.where(a > 1e-12, lam_dt / np.where(a > 1e-12, a, 1.0) * (1 - np.exp(-a)), lam_dt)
    protection = (1.0 - recovery) * np.sum(np.exp(-rate * grid[:-1]) * S[:-1] * frac)
    return protection - premium


class Counterparty:
    """Recovery and hazard curve of the counterparty (from the config's ``counterparty`` section)."""

    def __init__(self, recovery: float, curve: HazardCurve, description: str):
        if not 0 <= recovery < 1:
            raise ValueError(f"recovery must be in [0, 1), got {recovery}")
        self.recovery, self.curve, self.description = float(recovery), curve, description

    @classmethod
    def from_config(cls, cp, rate: float) -> Counterparty:
        if cp.hazard_rate is not None:
            return cls(cp.recovery, HazardCurve.flat(cp.hazard_rate), f"flat hazard rate {cp.hazard_rate:g} per year")
        if cp.hazards is not None:
            return cls(cp.recovery, HazardCurve(cp.hazards.times, cp.hazards.rates),
                       f"piecewise-constant hazard rates {_pieces(cp.hazards.times, cp.hazards.rates)}")
        curve = HazardCurve.from_cds(dict(cp.cds_spreads), cp.recovery, rate)
        quotes = ", ".join(f"{float(t):g}y {1e4 * float(s):.4g} bp"
                           for t, s in sorted(cp.cds_spreads.items(), key=lambda kv: float(kv[0])))
        return cls(cp.recovery, curve, f"CDS par spreads {quotes}; bootstrapped hazard rates "
                                       f"{_pieces(curve.times, curve.rates)}")


def run_credits(cfg, rate: float) -> tuple[dict[str, Counterparty], Counterparty | None]:
    """A run's credit: each counterparty of its netting sets by name, and its own (``own_credit``; None without)."""
    credits = {e.counterparty: Counterparty.from_config(e.credit, rate) for e in cfg.book()}
    return credits, None if cfg.own_credit is None else Counterparty.from_config(cfg.own_credit, rate)


def shifted(counterparty: Counterparty, h: float) -> Counterparty:
    """The counterparty with its hazard curve shifted in parallel by ``h`` (a CS01 bump)."""
    curve = counterparty.curve
    return Counterparty(counterparty.recovery, HazardCurve(curve.times, np.asarray(curve.rates) + h),
                        f"{counterparty.description}, hazards shifted by {h:g}")


def _pieces(times, rates) -> str:
    """``0.01 to 1y, 0.02 to 3y (flat beyond)``: a piecewise-constant hazard curve in words."""
    return ", ".join(f"{r:.4g} to {t:g}y" for t, r in zip(times, rates, strict=True)) + " (flat beyond)"
