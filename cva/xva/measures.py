"""CVA and the exposure measures from the per-outer-path netting-set values.

With P(l, k) the netting-set value on outer path l at exposure date t_k, D(t) = exp(-r t), a
survival curve S and recovery R (Abbas-Turki-Graillat, section 2),

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

from cva.engine.estimators import combine, level_table

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


def bilateral_weights(dates, rate, counterparty, own):
    """The first-to-default weights on the exposure grid t_0 = 0 < t_1 < ...: for the CVA
    (1 - R_C) D(t_k) (S_C(t_{k-1}) - S_C(t_k)) S_B(t_{k-1}), for the DVA
    (1 - R_B) D(t_k) (S_B(t_{k-1}) - S_B(t_k)) S_C(t_{k-1}); C the counterparty, B ourselves (``own``)."""
    dates = np.asarray(dates, dtype=float)
    prev = np.concatenate([[0.0], dates[:-1]])
    disc = np.exp(-rate * dates)
    w_cva = (1.0 - counterparty.recovery) * disc * counterparty.curve.default_probabilities(dates) * \
        own.curve.survival(prev)
    w_dva = (1.0 - own.recovery) * disc * own.curve.default_probabilities(dates) * counterparty.curve.survival(prev)
    return w_cva, w_dva


def exposure_weights(dates, rate, counterparty, own=None):
    """(w_cva, w_dva): the weights of E^+ and E^- at each exposure date, (1 - R) D(t_k) (S(t_{k-1}) - S(t_k)) without
    our own credit (w_dva None), else :func:`bilateral_weights`."""
    if own is None:
        q = counterparty.curve.default_probabilities(dates)
        return (1.0 - counterparty.recovery) * np.exp(-rate * dates) * q, None
    return bilateral_weights(dates, rate, counterparty, own)


def cva_functional(plan, model, counterparty, own=None):
    """g(P): the per-path CVA contributions of the values P (N, K); with our own credit ``own``, the
    first-to-default (bilateral) CVA of :func:`bilateral_weights`."""
    if own is not None:
        w = bilateral_weights(plan.dates, model.rate, counterparty, own)[0]
        return lambda P: np.maximum(P, 0.0) @ w
    q = counterparty.curve.default_probabilities(plan.dates)
    return lambda P: cva_contributions(P, plan.dates, model.rate, q, counterparty.recovery)


def dva_functional(plan, model, counterparty, own):
    """g(P): the per-path DVA contributions (1 - R_B) sum_k D (S_B(t_{k-1}) - S_B(t_k)) S_C(t_{k-1}) P^-(t_k),
    P^- = max(-P, 0) (what we owe when we default first)."""
    w = bilateral_weights(plan.dates, model.rate, counterparty, own)[1]
    return lambda P: np.maximum(-P, 0.0) @ w


def exposures_and_cva(plan, model, counterparty, levels, estimator, pfe_quantile=PFE_LEVEL, own=None, twin=None):
    """The exposure profile (DataFrame; EE, ENE and the mean value by the estimator, PFE the ``pfe_quantile``
    quantile of the finest level's P^+, not bias-corrected), the CVA estimate (dict of
    :func:`cva.engine.estimators.combine` with ``cva``, ``stderr``, ``ci_low``, ``ci_high``) and the finest level's
    per-path contributions. With our own credit ``own``: the bilateral CVA and the DVA (``dva``,
    ``dva_stderr``, ``dva_ci_low``, ``dva_ci_high``). With ``twin`` (:func:`cva.xva.control.european_twin`) the CVA
    and the DVA use the European twin's values at the exposure dates as control variates (the profiles do not)."""
    dates = plan.dates
    g = cva_functional(plan, model, counterparty, own)
    est = combine(levels, g, estimator, twin)
    ee = combine(levels, lambda P: np.maximum(P, 0.0), estimator)
    ene = combine(levels, lambda P: np.minimum(P, 0.0), estimator)
    mean = combine(levels, lambda P: P, estimator)
    fine = levels[-1].sets[0]
    q = counterparty.curve.default_probabilities(dates)
    prof = pd.DataFrame({"date": dates, "EE": ee["estimate"], "EE_stderr": ee["stderr"], "ENE": ene["estimate"],
                         "PFE": np.quantile(np.maximum(fine, 0.0), pfe_quantile, axis=0),
                         "mean_value": mean["estimate"]})
    if estimator != "plain":
        prof["EE_uncorrected"] = np.maximum(fine, 0.0).mean(axis=0)
    prof["discount"] = np.exp(-model.rate * dates)
    prof["survival"] = counterparty.curve.survival(dates)
    prof["default_prob"] = q
    if own is None:
        prof["cva_contribution"] = (1 - counterparty.recovery) * prof["discount"] * prof["EE"] * q
    else:
        w_cva, w_dva = bilateral_weights(dates, model.rate, counterparty, own)
        prof["own_survival"] = own.curve.survival(dates)
        prof["cva_contribution"] = prof["EE"] * w_cva
        prof["dva_contribution"] = -prof["ENE"] * w_dva
    summary = {"cva": float(est["estimate"]), "stderr": float(est["stderr"]), "ci_low": float(est["ci_low"]),
               "ci_high": float(est["ci_high"]), "estimator": estimator,
               "bias_estimate": float(est["bias_estimate"]), "bias_stderr": float(est["bias_stderr"]),
               "remaining_bias": None if est["remaining_bias"] is None else float(est["remaining_bias"]),
               "remaining_bias_stderr": None if est["remaining_stderr"] is None else float(est["remaining_stderr"]),
               "levels": level_table(levels, g, estimator), "control_variate": est["control"]}
    if own is not None:
        dva = combine(levels, dva_functional(plan, model, counterparty, own), estimator, twin)
        summary.update({"dva": float(dva["estimate"]), "dva_stderr": float(dva["stderr"]),
                        "dva_ci_low": float(dva["ci_low"]), "dva_ci_high": float(dva["ci_high"])})
    return prof, summary, g(fine)
