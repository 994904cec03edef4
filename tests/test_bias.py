"""The nested estimators against an exact reference (tests/bermudan_reference.py: the Bermudan value function
by quadrature of the backward induction, then the exact exercise rule along the same outer paths).

The single-level estimators are compared path by path with the reference on the engine's own outer paths
(common random numbers): the paired difference has a standard error far below the outer sampling's, so
what is left is the inner-sample bias the estimator did not remove. The tolerance is the issue's: three
standard errors plus 0.5 % of the reference.
"""

import math

import numpy as np
import pytest
from bermudan_reference import cva_contributions, paired_difference, reference_cva

import cva
from cva.engine import estimators

BERMUDAN = {"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "maturity": 1.0}
CASES = {
    # at the money, long, vol 0.2, 10 exercise dates (plain bias +1.8 % at 1024 inner paths)
    "atm long put": ({"spot": 100.0, "vol": 0.2, "rate": 0.05}, [{**BERMUDAN, "strike": 100.0, "exercise_dates": 10}],
                     512),
    # in the money, 50 exercise dates (the Longstaff-Schwartz put)
    "itm put, 50 dates": ({"spot": 36.0, "vol": 0.2, "rate": 0.06},
                          [{**BERMUDAN, "strike": 40.0, "exercise_dates": 50}], 128),
    # vol 0.4, a long put and a short out-of-the-money put in one netting set
    "long atm and short otm puts": ({"spot": 100.0, "vol": 0.4, "rate": 0.05},
                                    [{**BERMUDAN, "strike": 100.0, "exercise_dates": 10},
                                     {**BERMUDAN, "strike": 80.0, "exercise_dates": 10, "quantity": -1.0}], 512),
    # vol 0.4, short only: the bias is negative
    "short otm put and long call": ({"spot": 100.0, "vol": 0.4, "rate": 0.05},
                                    [{**BERMUDAN, "strike": 80.0, "exercise_dates": 10, "quantity": -1.0},
                                     {"style": "european", "payoff": "call", "underlying": {"asset": 0},
                                      "strike": 110.0, "maturity": 1.0, "quantity": 0.5}], 512),
}


def _config(tmp_path, case, estimator=None, inner=1024, outer=None, seed=11, **sim):
    market, portfolio, default_outer = CASES[case]
    cfg = {"run": {"name": "bias", "seed": seed, "backend": "cpu"}, "market": market, "portfolio": portfolio,
           "counterparty": {"recovery": 0.4, "hazard_rate": 0.02},
           "simulation": {"dates": 10, "outer_paths": outer or default_outer, "inner_paths": inner,
                          "basis": "laguerre", **sim},
           "output": {"dir": str(tmp_path / "run")}}
    if estimator is not None:
        cfg["simulation"]["estimator"] = estimator
    return cfg


def _per_path(cfg, level, weights):
    """sum_j weights[j] * g(values of inner set j) per outer path (g: the per-path CVA contribution)."""
    return sum(w * cva_contributions(cfg, level.sets[j]) for j, w in enumerate(weights) if w)


@pytest.mark.parametrize("case", list(CASES))
def test_default_estimator_against_the_exact_reference(tmp_path, case):
    cfg = _config(tmp_path, case)
    res = cva.run(cfg, progress=False)
    assert res.summary["estimator"] == "extrapolated"                           # the default
    (level,) = res.levels
    per_path = _per_path(cfg, level, [2.0, -0.5, -0.5])                          # 2 g(P) - (g(P_a) + g(P_b)) / 2
    assert per_path.mean() == pytest.approx(res.cva, rel=1e-12)
    ref = reference_cva(cfg, paths="engine", outer_paths=level.paths)
    diff, se = paired_difference(per_path, ref.contributions)
    assert abs(diff) <= 3 * se + 0.005 * ref.cva, (case, res.cva, ref.cva, diff, se)
    assert se <= res.stderr                                                      # paired: never a weaker test


def test_plain_bias_is_detected_by_its_estimate(tmp_path):
    """The plain estimator's bias_estimate has the sign of its true bias and agrees within its error."""
    cfg = _config(tmp_path, "atm long put", estimator="plain", inner=512, outer=2048)
    res = cva.run(cfg, progress=False)
    ref = reference_cva(cfg, paths="engine", outer_paths=2048)
    bias, bias_se = paired_difference(res.contributions, ref.contributions)       # the truth on these paths
    s = res.summary
    assert bias > 3 * bias_se and s["bias_estimate"] > 3 * s["bias_stderr"]      # both clearly positive
    assert abs(s["bias_estimate"] - bias) <= 3 * math.hypot(s["bias_stderr"], bias_se), (s["bias_estimate"], bias)
    assert s["remaining_bias"] == s["bias_estimate"]                            # plain leaves it in
    assert s["ci_low"] < res.cva - s["bias_estimate"] < res.cva < s["ci_high"]   # the interval spans the shift


def test_mlmc_against_the_exact_reference(tmp_path):
    """A fixed MLMC plan from 16 to 1024 inner paths: level 0 paired with the reference on its paths, the
    corrections with their standard errors."""
    plan = [4096, 1024, 512, 256, 256, 256, 512]
    cfg = _config(tmp_path, "atm long put", estimator="mlmc", level_paths=plan)
    res = cva.run(cfg, progress=False)
    levels = res.levels
    assert [lv.inner_paths for lv in levels] == [16, 32, 64, 128, 256, 512, 1024]
    assert [lv.paths for lv in levels] == plan
    ref0 = reference_cva(cfg, paths="engine", outer_paths=plan[0])                # level 0's keys: 0 .. N_0 - 1
    d0, se0 = paired_difference(cva_contributions(cfg, levels[0].sets[0]), ref0.contributions)
    rows = res.summary["levels"]
    corr = sum(r["mean"] * r["weight"] for r in rows[1:])
    se = math.sqrt(se0 ** 2 + sum((r["stderr"] * r["weight"]) ** 2 for r in rows[1:]))
    assert res.cva == pytest.approx(rows[0]["mean"] + corr, rel=1e-12)
    assert abs(d0 + corr) <= 3 * se + 0.005 * ref0.cva, (d0, corr, se, ref0.cva)


def test_european_contracts_get_no_correction(tmp_path):
    """Long Europeans valued by inner means: the correction is zero path by path (up to rounding), so the
    default estimator adds no noise to the plain one (measured: the same CVA and standard error)."""
    port = [{"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0},
            {"style": "european", "payoff": "call", "underlying": "max", "strike": 105.0, "maturity": 1.0,
             "quantity": 2.0}]
    cfg = {"run": {"name": "eu", "seed": 3, "backend": "cpu"},
           "market": {"spot": [100.0, 95.0], "vol": [0.25, 0.3], "rate": 0.03, "correlation": 0.5},
           "portfolio": port, "counterparty": {"recovery": 0.4, "hazard_rate": 0.03},
           "simulation": {"dates": 4, "outer_paths": 1000, "inner_paths": 64, "basis": "quadratic"},
           "output": {"dir": str(tmp_path / "x")}}
    res = cva.run(cfg, progress=False)
    cfg["simulation"]["estimator"], cfg["output"]["dir"] = "plain", str(tmp_path / "p")
    plain = cva.run(cfg, progress=False)
    scale = abs(plain.cva) * 1e-12
    assert abs(res.cva - plain.cva) <= scale and abs(res.stderr - plain.stderr) <= scale
    assert abs(res.summary["bias_estimate"]) <= scale


def test_remaining_bias_of_the_extrapolation_is_its_second_order_term():
    """combine() on synthetic levels with a known bias c1 / M + c2 / M^2 (exact, no noise): the
    extrapolation removes c1 / M and the remaining-bias estimate is -2 c2 / M^2."""
    M, c1, c2, N = 64, 0.3, 5.0, 4
    b = {m: c1 / m + c2 / m ** 2 for m in (M, M // 2, M // 4)}
    sets = np.array([np.full((N, 1), 1.0 + b[M])] + [np.full((N, 1), 1.0 + b[M // 2])] * 2
                    + [np.full((N, 1), 1.0 + b[M // 4])] * 4)
    sets[:, :, 0] += np.linspace(-1e-9, 1e-9, N)                                  # a variance > 0
    level = estimators.Level(0, M, 2, sets)
    out = estimators.combine([level], lambda P: P[:, 0], "extrapolated")
    assert out["bias_estimate"] == pytest.approx(c1 / M + 3 * c2 / M ** 2, rel=1e-9)
    assert out["estimate"] - 1.0 == pytest.approx(-2 * c2 / M ** 2, rel=1e-6)
    assert out["remaining_bias"] == pytest.approx(-2 * c2 / M ** 2, rel=1e-6)


def test_mlmc_allocation_is_the_optimum():
    """allocate() against the Lagrange optimum: the cost is least for the variance, by a brute check."""
    V, C, w = [4.0, 1.0, 0.25], [1.0, 4.0, 16.0], [1, 1, 2]
    N = estimators.allocate(V, C, w, 1e-3)
    assert sum(wi ** 2 * v / n for wi, v, n in zip(w, V, N, strict=True)) <= 1e-3
    cost = sum(n * c for n, c in zip(N, C, strict=True))
    rng = np.random.default_rng(5)
    for _ in range(200):
        other = np.array(N) * np.exp(rng.normal(0, 0.2, 3))
        var = sum(wi ** 2 * v / n for wi, v, n in zip(w, V, other, strict=True))
        scaled = other * var / 1e-3                                               # meet the same variance
        assert sum(n * c for n, c in zip(scaled, C, strict=True)) >= cost * (1 - 1e-3)
