"""CVA sensitivities (central differences, common random numbers) against the derivatives of the closed form
of long European calls: CVA = (1 - R) q C0 (1 - exp(-lambda T)) for a flat hazard, the calls valued in closed
form along the paths, so E[D(t) C(t, S_t)] = C0 for every exposure date; a desk's batched bumps against its whole
bumped runs; the base market's inner exercise dates held fixed in the bumped markets (the default) against the
base's cube without a bump and against the bumped markets' own regressions."""

import math

import numpy as np
import pytest
from engine_testlib import bumped_desk as _desk
from engine_testlib import kept_exercise_dates_give_the_base_cube

import cva
from cva.instruments import analytic
from cva.instruments.products import Contract
from cva.market.model import BlackScholes

Z_MC = 4.5
R, LAM, Q, T = 0.4, 0.03, 2.0, 1.0


def _price(spot=100.0, vol=0.25, rate=0.03):
    m = BlackScholes(spot=[spot], vol=[vol], dividend=[0.0], rate=rate, correlation=0.0)
    return analytic.closed_form_price(Contract("european", "call", "asset", 100.0, T, asset=0), m)


def _cva(spot=100.0, vol=0.25, rate=0.03, lam=LAM):
    return (1 - R) * Q * _price(spot, vol, rate) * (1 - math.exp(-lam * T))


def _derivative(f, x, h):
    return (f(x + h) - f(x - h)) / (2 * h)                                        # of the closed form (smooth)


@pytest.mark.parametrize("estimator", ["extrapolated", "mlmc"])
def test_sensitivities_of_long_calls_against_the_closed_form(tmp_path, estimator):
    cfg = {"run": {"name": "s", "seed": 5, "backend": "cpu"}, "market": {"spot": 100.0, "vol": 0.25, "rate": 0.03},
           "portfolio": [{"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 100.0,
                          "maturity": T, "quantity": Q}],
           "counterparty": {"recovery": R, "hazard_rate": LAM},
           "simulation": {"dates": 4, "outer_paths": 2000, "inner_paths": 16, "estimator": estimator,
                          "pilot_paths": 200},
           "sensitivities": {"spot": 0.01, "vol": 0.01, "rate": 0.0001, "hazard": 0.0001},
           "output": {"dir": str(tmp_path / "run")}}
    res = cva.run(cfg, progress=False)
    s = res.summary["sensitivities"]
    refs = {"delta": _derivative(lambda x: _cva(spot=x), 100.0, 1e-3),
            "vega": _derivative(lambda x: _cva(vol=x), 0.25, 1e-5),
            "rho": _derivative(lambda x: _cva(rate=x), 0.03, 1e-6),
            "cs01": _derivative(lambda x: _cva(lam=x), LAM, 1e-6)}
    got = {"delta": s["delta"]["asset 0"], "vega": s["vega"]["asset 0"], "rho": s["rho"], "cs01": s["cs01"]}
    for name, (value, se) in got.items():
        # the central difference's own error is O(h^2): 1e-4 relative at a 1 % spot bump
        assert abs(value - refs[name]) < Z_MC * se + 1e-3 * abs(refs[name]), (name, value, se, refs[name])
        assert se < 0.05 * abs(refs[name])                                       # common random numbers: sharp
    html = (tmp_path / "run" / "report.html").read_text()
    assert 'id="sensitivities"' in html


def test_sensitivities_bumps_are_checked():
    from cva.io.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="sensitivities.spot: must be < 1"):
        load_config({"market": {"spot": 100, "vol": 0.2},
                     "portfolio": [{"style": "european", "payoff": "call", "underlying": {"asset": 0},
                                    "strike": 100, "maturity": 1}],
                     "sensitivities": {"spot": 2.0}})


def test_a_desks_batched_bumps_are_its_whole_bumped_runs(tmp_path):
    """A desk's spot, vol and rate scenarios are valued in every chunk next to the base, trades on one asset in one
    valuation with every asset bumped, a basket once per asset: the central differences are those of whole runs
    with one market input bumped at a time (the same paths; the netting-set values equal up to rounding). Covers a
    CSA, our own credit (bilateral weights), a credit curve from CDS spreads (bootstrapped again at the bumped
    rate), a vol below its bump (one-sided) and a basket weight of 0 (its regression still takes that asset)."""
    base = _desk()
    market = base["market"]
    bumps = {"spot": 0.01, "vol": 0.01, "rate": 0.0001, "exercise_policy": "bumped"}
    res = cva.run({**base, "sensitivities": bumps, "output": {"dir": str(tmp_path / "batched")}}, progress=False)
    sens = res.summary["sensitivities"]

    def cvas(change, name):
        m = {k: (list(v) if isinstance(v, list) else v) for k, v in market.items()}
        change(m)
        out = cva.run({**base, "market": m, "output": {"dir": str(tmp_path / name)}}, progress=False)
        return {k: v["cva"] for k, v in out.summary["counterparties"].items()}

    def at(key, i, value):
        def change(m):
            if i is None:
                m[key] = value
            else:
                m[key][i] = value
        return change

    flat = cvas(lambda m: None, "flat")
    checks = []
    for i, s in enumerate(market["spot"]):
        h = 0.01 * s
        checks.append((("delta", f"asset {i}"), cvas(at("spot", i, s + h), f"s{i}u"), cvas(at("spot", i, s - h),
                                                                                            f"s{i}d"), 2 * h))
    for i, v in enumerate(market["vol"]):
        up = cvas(at("vol", i, v + 0.01), f"v{i}u")
        down, width = (cvas(at("vol", i, v - 0.01), f"v{i}d"), 0.02) if v >= 0.01 else (flat, 0.01)
        checks.append((("vega", f"asset {i}"), up, down, width))
    checks.append((("rho", None), cvas(at("rate", None, 0.0301), "ru"), cvas(at("rate", None, 0.0299), "rd"), 2e-4))
    for (family, label), up, down, width in checks:
        for name in ("A", "B"):
            got = sens[name][family] if label is None else sens[name][family][label]
            want = (up[name] - down[name]) / width
            assert got[0] == pytest.approx(want, rel=1e-10, abs=1e-12 * abs(flat[name])), (family, label, name)
    assert sens["B"]["delta"]["asset 0"][0] == 0.0 and sens["B"]["delta"]["asset 2"][0] == 0.0      # not its assets
    assert sens["A"]["delta"]["asset 2"][1] > 0                                                   # a real estimate


def test_the_base_exercise_dates_in_an_unbumped_market_give_the_base_cube():
    """``exercise_policy: base``: a market valued with the base's kept inner exercise dates and no bump is the base's
    value cube bit for bit, for every trade and for a subset (a bump's pass), on one chunk and on two
    (:func:`engine_testlib.kept_exercise_dates_give_the_base_cube`)."""
    kept_exercise_dates_give_the_base_cube(np)


def test_the_base_exercise_dates_agree_with_the_bumped_regressions(tmp_path):
    """The default ``exercise_policy: base`` (the pathwise estimator with the exercise times held fixed) and
    ``bumped`` (every bumped market regressed again) estimate the same derivatives: within four standard errors
    of the two (their difference's, were they independent; they share their paths). Held fixed, the exercise
    times add no regression noise: the rho of the basket's counterparty is sharper."""
    bumps = {"spot": 0.01, "vol": 0.01, "rate": 0.0001}
    runs = {}
    for policy in ("base", "bumped"):
        cfg = {**_desk(), "sensitivities": {**bumps, "exercise_policy": policy},
               "output": {"dir": str(tmp_path / policy)}}
        runs[policy] = cva.run(cfg, progress=False).summary["sensitivities"]
    compared = 0
    for name in ("A", "B"):
        pairs = [(runs["base"][name]["rho"], runs["bumped"][name]["rho"])]
        for family in ("delta", "vega"):
            base, bumped = runs["base"][name][family], runs["bumped"][name][family]
            pairs += [(base[a], bumped[a]) for a in base]
        for (a, sa), (b, sb) in pairs:
            assert abs(a - b) <= 4 * math.hypot(sa, sb), (name, a, sa, b, sb)
            compared += sa > 0
    assert compared >= 8
    assert runs["base"]["A"]["rho"][1] < 0.5 * runs["bumped"]["A"]["rho"][1]


@pytest.mark.parametrize("bumps", [{"spot": 0.01, "vol": 0.01, "rate": 0.0001, "hazard": 0.0001}, {"vol": 0.01},
                                   {"rate": 0.0001}, {"hazard": 0.0001}])
def test_the_cost_estimate_counts_the_bumped_valuations(bumps):
    """cva.engine.plan.bumped_valuations (the run's cost, before any work) are the valuations BumpedDesk makes: the
    same number, each of the same contracts (configs/desk.yaml: one-asset trades, a basket and max options; every
    vol above its bump); the cost grows by their inner steps."""
    from pathlib import Path

    from cva.engine.plan import build_plan, bumped_valuations, run_cost
    from cva.io.config import load_config
    from cva.xva.desk import Book
    from cva.xva.sensitivities import BumpedDesk

    raw = load_config(Path(__file__).resolve().parents[1] / "configs" / "desk.yaml").to_dict()
    cfg = load_config({**raw, "sensitivities": bumps})
    plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)
    passes = BumpedDesk(cfg, plan, model, Book.of_config(cfg, plan, model)).passes
    assert sorted(sorted(t) for t in bumped_valuations(cfg, plan)) == sorted(sorted(t) for _, _, t in passes)
    base = run_cost(load_config({k: v for k, v in raw.items() if k != "sensitivities"}), "cpu")
    grows = run_cost(cfg, "cpu")["inner_asset_steps"] > base["inner_asset_steps"]
    assert grows == bool(passes)
