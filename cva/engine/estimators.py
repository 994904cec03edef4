"""Estimators of a nested expectation E[g(P)], P the netting-set values from M inner paths, that remove
the bias of the finite inner sample (Giles & Haji-Ali, "Multilevel nested simulation for efficient risk
estimation", SIAM/ASA J. Uncertainty Quantification 7, 2019: the antithetic multilevel estimator).

On an outer path, ``splits`` = s gives the values from the whole inner set of M paths and from its 2, 4,
..., 2^s equal parts (the keyed streams give the parts for free: :func:`cva.engine.nested.chunk_values`). The
antithetic correction of the finest count is Y(M) = g(P_M) - (g(P_a) + g(P_b)) / 2 with a, b the halves
of the same inner set; with a bias b(M) = c1 / M + c2 / M^2 + ..., E[Y(M)] = -c1 / M - 3 c2 / M^2.

- ``plain``: the mean of g(P_M); its bias estimate is -Y(M) (first order).
- ``extrapolated``: the Richardson step g(P_M) + Y(M) = 2 g(P_M) - (g(P_a) + g(P_b)) / 2 on the same outer
  paths, first-order bias removed; with the quarters, the remaining bias is -(2 / 3) (Y(M) - Y(M / 2) / 2).
- ``mlmc``: levels l = 0 .. L with M_l = M_0 2^l inner paths on independent outer paths, level 0 the mean
  of g(P_{M_0}) and level l > 0 the mean of Y(M_l); their sum estimates E[g(P_{M_L})] (the telescoping
  sum) and the finest level's correction is added once more (the same Richardson step), so the remaining
  bias is -(2 / 3) (Y(M_L) - Y(M_{L-1}) / 2) again. The outer paths per level follow the MLMC allocation
  N_l ~ w_l sqrt(V_l / C_l) for the measured variances V_l, the costs C_l and the weights w_l.

With antithetic outer paths (``paired`` levels) the samples are the pair means; the level table's variances
are per outer path (twice the pair means' variance), as the MLMC allocation counts outer paths.

The interval spans the estimate and the estimate less its estimated remaining bias, widened on each
side by 1.96 times the standard error of their difference's inputs combined (outer sampling and bias
estimate): it covers the truth where either the first-order model or the second-order one holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ESTIMATORS = ("mlmc", "extrapolated", "plain")
Z95 = 1.959963984540054


@dataclass
class Level:
    """One level's per-outer-path values: ``sets`` (1 + 2 + ... + 2^splits, N, K) from the whole inner set of
    ``inner_paths`` paths, then its halves, then its quarters (as far as ``splits``). ``paired``: outer paths
    2i and 2i + 1 are antithetic, so the samples are the pair means."""

    index: int
    inner_paths: int
    splits: int
    sets: np.ndarray
    seconds: float = 0.0
    paired: bool = False

    @property
    def paths(self) -> int:
        return self.sets.shape[1]

    def parts(self, g, depth):
        """g's mean over the 2^depth parts of the inner set, per outer path."""
        lo = 2 ** depth - 1
        return np.mean([g(self.sets[j]) for j in range(lo, 2 * lo + 1)], axis=0)

    def correction(self, g, depth=0):
        """Y at the count M / 2^depth per outer path: g of the parts minus the mean of g of their halves."""
        return self.parts(g, depth) - self.parts(g, depth + 1)

    def cost(self) -> float:
        """Inner paths simulated and regressed per outer path (the regressions of the parts count again)."""
        return self.inner_paths * (1 + self.splits)


def samples(x, paired=False):
    """The independent samples of per-path values x (N, ...): x itself, or with antithetic outer paths the
    means of the pairs (x_{2i} + x_{2i+1}) / 2, whose variance is that of one path's equivalent over two."""
    x = np.asarray(x, dtype=np.float64)
    if not paired:
        return x
    if x.shape[0] % 2:
        raise ValueError(f"antithetic outer paths come in pairs, got {x.shape[0]} paths")
    return 0.5 * (x[0::2] + x[1::2])


def _mean_se(x, paired=False):
    x = samples(x, paired)
    n = x.shape[0]
    se = x.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.full(x.shape[1:], np.nan)
    return x.mean(axis=0), se


def _controlled(F, X, mu, paired):
    """The control-variate estimate of E[F] with the controls X (N,) or (N, J) of means mu: (estimate, stderr,
    beta, variance ratio). beta is the least-squares fit of F on the centred controls (Glasserman, "Monte Carlo
    Methods in Financial Engineering", section 4.1.2); with antithetic pairs (``paired``) the pair means are the
    samples. Controls of no variance are left out."""
    Z = samples(F, paired)
    Xs = samples(np.asarray(X, dtype=np.float64).reshape(len(F), -1), paired)
    n = Z.shape[0]
    keep = Xs.std(axis=0) > 1e-12 * max(float(np.abs(Xs).max(initial=0.0)), 1e-300)
    if n <= keep.sum() + 2 or not keep.any():
        return float(Z.mean()), float(Z.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan"), [], 1.0
    Xk, mk = Xs[:, keep], np.broadcast_to(np.asarray(mu, dtype=np.float64).reshape(-1), keep.shape)[keep]
    Xc = Xk - Xk.mean(axis=0)
    Zc = Z - Z.mean()
    beta = np.linalg.lstsq(Xc, Zc, rcond=None)[0]
    R = Zc - Xc @ beta                                                # the residuals of the fit
    dof = n - 1 - int(keep.sum())
    var_r, var_z = float(R @ R) / dof, float(np.var(Z, ddof=1))
    return (float(Z.mean() - (Xk.mean(axis=0) - mk) @ beta), math.sqrt(var_r / n), beta.tolist(),
            var_r / var_z if var_z > 0 else 1.0)


def combine(levels, g, estimator, control=None):
    """The estimate of E[g(P)] (g: values (N, K) -> per-path (N,) or (N, K)) and its errors.

    Returns a dict: ``estimate``, ``stderr`` (outer sampling), ``bias_estimate`` and ``bias_stderr`` (the
    estimated bias of the finest level's plain mean, E[g(P_{M_L})] - E[g(P)]: what ``plain`` leaves in and
    the others remove), ``remaining_bias`` and ``remaining_stderr`` (of the returned estimate; None where it
    cannot be estimated), ``ci_low`` and ``ci_high``. With ``control`` = (X, mu), per-path controls X (N_l,) or
    (N_l, J) for each level and mu their means (:mod:`cva.xva.control`; scalar g only), the control variates correct the
    estimator's per-path values (``plain``, ``extrapolated``) or level 0's (``mlmc``), and ``control`` in the
    result holds its beta and the variance ratio.
    """
    top = levels[-1]
    ctl = None
    if estimator in ("plain", "extrapolated"):
        F = g(top.sets[0])
        Y = top.correction(g)
        if control is None:
            est, se = _mean_se(F if estimator == "plain" else F + Y, top.paired)
        else:
            est, se, beta, ratio = _controlled(F if estimator == "plain" else F + Y, control[0][-1], control[1],
                                              top.paired)
            ctl = {"beta": beta, "variance_ratio": ratio}
        bias, bias_se = _mean_se(-Y, top.paired)
        if estimator == "plain":
            rem, rem_se = bias, bias_se
        elif top.splits >= 2:
            rem, rem_se = _mean_se(-(2 / 3) * (Y - 0.5 * top.correction(g, 1)), top.paired)
        else:
            rem = rem_se = None
    elif estimator == "mlmc":
        parts = [_mean_se(g(lv.sets[0]) if lv.splits == 0 else lv.correction(g), lv.paired) for lv in levels]
        if control is not None and levels[0].splits == 0:
            e0, s0, beta, ratio = _controlled(g(levels[0].sets[0]), control[0][0], control[1], levels[0].paired)
            parts[0], ctl = (e0, s0), {"beta": beta, "variance_ratio": ratio}
        est = sum(m for m, _ in parts) + parts[-1][0]                                  # the last one twice
        se = np.sqrt(sum(s ** 2 for _, s in parts) + 3 * parts[-1][1] ** 2)              # (2 se_L)^2 for the last
        bias, bias_se = -parts[-1][0], parts[-1][1]
        if len(levels) >= 3:
            rem = -(2 / 3) * (parts[-1][0] - 0.5 * parts[-2][0])
            rem_se = (2 / 3) * np.sqrt(parts[-1][1] ** 2 + 0.25 * parts[-2][1] ** 2)
        else:
            rem = rem_se = None
    else:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if rem is None:
        lo, hi = est - Z95 * se, est + Z95 * se
    else:
        s = np.sqrt(se ** 2 + rem_se ** 2)
        lo, hi = np.minimum(est, est - rem) - Z95 * s, np.maximum(est, est - rem) + Z95 * s
    return {"estimate": est, "stderr": se, "bias_estimate": bias, "bias_stderr": bias_se,
            "remaining_bias": rem, "remaining_stderr": rem_se, "ci_low": lo, "ci_high": hi, "control": ctl}


def level_table(levels, g, estimator) -> list[dict]:
    """The rows an MLMC user checks, by increasing inner paths M: the term's mean, variance and standard
    error (``g(P)``: the plain mean of level 0 of ``mlmc``; ``Y``: the correction at M), its weight in the
    estimate, the mean and variance of g(P_M), the cost model (inner paths per outer path) and the seconds
    per outer path measured. ``mlmc`` has a row per level (the estimate is the weighted sum of the terms);
    ``plain`` and ``extrapolated`` one per depth of the split inner set, on the same outer paths (the
    estimate is the finest mean of g plus the weighted terms)."""
    if estimator == "mlmc":
        terms = [(lv, lv.inner_paths, g(lv.sets[0]) if lv.splits == 0 else lv.correction(g), lv.parts(g, 0),
                  2 if i == len(levels) - 1 else 1) for i, lv in enumerate(levels)]
    else:
        top = levels[-1]
        terms = [(top, top.inner_paths >> d, top.correction(g, d), top.parts(g, d),
                  1 if estimator == "extrapolated" and d == 0 else 0) for d in reversed(range(top.splits))]
    rows = []
    for lv, m, term, fine, weight in terms:
        n = term.shape[0]
        r = 2 if lv.paired else 1                            # outer paths per sample
        term, fine = samples(term, lv.paired), samples(fine, lv.paired)
        ns = term.shape[0]
        rows.append({"level": lv.index, "inner_paths": m, "outer_paths": n,
                     "term": "g(P)" if lv.splits == 0 else "Y", "weight": weight,
                     "mean": float(np.mean(term)), "variance": r * float(np.var(term, ddof=1)) if ns > 1 else 0.0,
                     "stderr": float(np.std(term, ddof=1) / math.sqrt(ns)) if ns > 1 else 0.0,
                     "fine_mean": float(np.mean(fine)),
                     "fine_variance": r * float(np.var(fine, ddof=1)) if ns > 1 else 0.0,
                     "cost_per_path": lv.cost(), "seconds_per_path": lv.seconds / max(n, 1)})
    return rows


def allocate(variances, costs, weights, target_variance) -> list[int]:
    """The MLMC allocation: N_l = ceil(w_l sqrt(V_l / C_l) sum_k w_k sqrt(V_k C_k) / eps^2), the least cost
    sum N_l C_l with sum w_l^2 V_l / N_l <= eps^2 (Giles, "Multilevel Monte Carlo path simulation", 2008)."""
    V = np.maximum(np.asarray(variances, dtype=np.float64), 0.0)
    C = np.asarray(costs, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if not target_variance > 0:
        raise ValueError(f"the target variance must be > 0, got {target_variance}")
    total = float(np.sum(w * np.sqrt(V * C)))
    return [int(math.ceil(x)) for x in w * np.sqrt(V / C) * total / target_variance]


def level_counts(inner_paths: int, min_inner_paths: int) -> list[int]:
    """M_0 < M_1 < ... < M_L = inner_paths, each twice the one before: halved while even and at least
    ``min_inner_paths``, and at least twice (three levels, where inner_paths is a multiple of 4)."""
    counts = [int(inner_paths)]
    while counts[0] % 2 == 0 and (counts[0] // 2 >= min_inner_paths or len(counts) < 3):
        counts.insert(0, counts[0] // 2)
    return counts


def decay_warnings(rows) -> list[str]:
    """What an MLMC user checks in the level table: the corrections' means (weak convergence) and variances
    (strong convergence) must fall from level to level; a warning per pair of corrections where they do not
    (the mean beyond two standard errors of the difference)."""
    out = []
    corr = [r for r in rows if r["term"] == "Y"]
    for a, b in zip(corr, corr[1:], strict=False):
        if abs(b["mean"]) - abs(a["mean"]) > 2 * math.hypot(a["stderr"], b["stderr"]):
            out.append(f"the mean correction grows from level {a['level']} to {b['level']} ({a['mean']:.3g} -> "
                       f"{b['mean']:.3g}): the bias does not decay, so its estimate is not reliable")
        if b["variance"] > a["variance"]:
            out.append(f"the correction's variance grows from level {a['level']} to {b['level']} "
                       f"({a['variance']:.3g} -> {b['variance']:.3g}): the levels do not couple")
    return out
