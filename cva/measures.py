"""CVA and the exposure measures from the per-outer-path netting-set values.

With P(l, k) the netting-set value on outer path l at exposure date t_k, D(t) = exp(-r t), a
survival curve S and recovery R (paper 001, section 2),

    CVA = (1 - R) sum_k E[D(t_k) P^+(t_k)] (S(t_{k-1}) - S(t_k)),

estimated by the mean over l of the per-path contributions
c_l = (1 - R) sum_k D(t_k) P^+(l, k) (S(t_{k-1}) - S(t_k)), whose sample standard deviation
gives the standard error and a 95% interval. The exposure profile per date: EE = E[P^+],
ENE = E[P^-] (reported as a negative number), PFE = a high quantile of P^+ (``output.pfe_quantile``,
default :data:`PFE_LEVEL`); EPE is the time average of EE over (0, T], EEPE the Basel effective EPE:
the time average over the first year (or the horizon, if shorter) of the effective EE, the running
maximum of EE.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

Z95 = 1.959963984540054
PFE_LEVEL = 0.975             # the default of output.pfe_quantile


def cva_contributions(P, dates, rate, default_probs, recovery):
    """Per-outer-path CVA contributions c_l, shape (L,). P (L, K) netting-set values."""
    P = np.asarray(P, dtype=np.float64)
    disc = np.exp(-rate * np.asarray(dates, dtype=float))                     # (K,)
    return (1.0 - recovery) * (np.maximum(P, 0.0) @ (disc * np.asarray(default_probs)))


def cva_estimate(contrib) -> dict:
    """CVA, standard error and 95% interval from the per-path contributions."""
    c = np.asarray(contrib, dtype=np.float64)
    m = float(c.mean())
    se = float(c.std(ddof=1) / np.sqrt(c.size)) if c.size > 1 else float("nan")
    return {"cva": m, "stderr": se, "ci_low": m - Z95 * se, "ci_high": m + Z95 * se}


def exposure_profile(P, dates, quantile=PFE_LEVEL) -> pd.DataFrame:
    """Per date: EE, EE's standard error, ENE, PFE (the ``quantile`` of P^+) and the mean value."""
    P = np.asarray(P, dtype=np.float64)
    pos, neg = np.maximum(P, 0.0), np.minimum(P, 0.0)
    n = P.shape[0]
    return pd.DataFrame({
        "date": np.asarray(dates, dtype=float),
        "EE": pos.mean(0),
        "EE_stderr": pos.std(0, ddof=1) / np.sqrt(n) if n > 1 else np.nan,
        "ENE": neg.mean(0),
        "PFE": np.quantile(pos, quantile, axis=0),
        "mean_value": P.mean(0),
    })


def epe_eepe(dates, ee) -> dict:
    """EPE (time average of EE over (0, T]) and EEPE (Basel, over min(1, T) years)."""
    dates, ee = np.asarray(dates, dtype=float), np.asarray(ee, dtype=float)
    dt = np.diff(np.concatenate([[0.0], dates]))
    epe = float(np.sum(ee * dt) / dates[-1])
    horizon = min(1.0, dates[-1])
    eee = np.maximum.accumulate(ee)                                        # effective EE
    w = np.clip(np.minimum(dates, horizon) - np.concatenate([[0.0], dates[:-1]]), 0.0, None)
    eepe = float(np.sum(eee * w) / horizon)
    return {"EPE": epe, "EEPE": eepe}
