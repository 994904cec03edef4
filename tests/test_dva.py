"""Bilateral CVA and DVA, first to default (own_credit), against closed forms: Europeans on one asset are
valued in closed form along the outer paths, so E[D(t) V(t)] = V(0) and the only error is the outer
sampling's."""

import math

import pytest

import cva
from cva.instruments import analytic
from cva.instruments.products import Contract
from cva.market.model import BlackScholes

Z_MC = 4.5          # standard errors allowed (a false failure about 7e-6 of the seeds per assertion)
MARKET = {"spot": 100.0, "vol": 0.25, "rate": 0.03}
CALL = {"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0}


def _config(tmp_path, quantity, own=None, dates=4):
    cfg = {"run": {"name": "dva", "seed": 17, "backend": "cpu"}, "market": MARKET,
           "portfolio": [{**CALL, "quantity": quantity}],
           "counterparty": {"recovery": 0.4, "hazard_rate": 0.03},
           "simulation": {"dates": dates, "outer_paths": 4000, "inner_paths": 8},
           "output": {"dir": str(tmp_path / f"run{quantity}{own}")}}
    if own is not None:
        cfg["own_credit"] = {"recovery": 0.25, "hazard_rate": own}
    return cfg


def _call_price():
    m = BlackScholes(spot=[100.0], vol=[0.25], dividend=[0.0], rate=0.03, correlation=0.0)
    return analytic.closed_form_price(Contract("european", "call", "asset", 100.0, 1.0, asset=0), m)


def _first_to_default(lam_first, lam_other, dates=4):
    """sum_k (S_1(t_{k-1}) - S_1(t_k)) S_2(t_{k-1}) on the grid k / dates, flat hazards."""
    t = [k / dates for k in range(dates + 1)]
    return sum((math.exp(-lam_first * t[k - 1]) - math.exp(-lam_first * t[k])) * math.exp(-lam_other * t[k - 1])
               for k in range(1, dates + 1))


def test_dva_of_short_calls(tmp_path):
    res = cva.run(_config(tmp_path, -2.0, own=0.05), progress=False)
    s = res.summary
    ref = (1 - 0.25) * 2.0 * _call_price() * _first_to_default(0.05, 0.03)
    assert abs(s["dva"] - ref) < Z_MC * s["dva_stderr"], (s["dva"], s["dva_stderr"], ref)
    assert s["dva_ci_low"] < s["dva"] < s["dva_ci_high"]
    assert res.cva == 0                                                          # a short call has no exposure


def test_bilateral_cva_of_long_calls(tmp_path):
    res = cva.run(_config(tmp_path, 1.5, own=0.05), progress=False)
    ref = (1 - 0.4) * 1.5 * _call_price() * _first_to_default(0.03, 0.05)
    assert abs(res.cva - ref) < Z_MC * res.stderr, (res.cva, res.stderr, ref)
    # against the unilateral run on the same outer paths: the paired difference is far sharper
    uni = cva.run(_config(tmp_path, 1.5), progress=False)
    d = res.contributions - uni.contributions
    se = d.std(ddof=1) / math.sqrt(d.size)
    ref_d = ref - (1 - 0.4) * 1.5 * _call_price() * _first_to_default(0.03, 0.0)
    assert abs(d.mean() - ref_d) < Z_MC * se and abs(ref_d) > 10 * se, (d.mean(), ref_d, se)
    assert res.summary["dva"] == 0
    assert sum(t["cva_allocation"] for t in res.summary["trades"]) == pytest.approx(res.cva, rel=1e-12)


def test_own_credit_that_cannot_default_is_the_unilateral_cva(tmp_path):
    """S_B = 1: the first-to-default CVA is the unilateral one (to rounding) and the DVA is zero."""
    port = [{**CALL, "quantity": 1.0}, {**CALL, "strike": 90.0, "quantity": -1.0}]
    base = _config(tmp_path, 1.0)
    base["portfolio"] = port
    with_own = {**base, "own_credit": {"recovery": 0.3, "hazard_rate": 0.0}, "output": {"dir": str(tmp_path / "o")}}
    a, b = cva.run(base, progress=False), cva.run(with_own, progress=False)
    assert b.cva == pytest.approx(a.cva, rel=1e-12) and b.summary["dva"] == 0
    assert "dva" not in a.summary and a.summary["own_credit"] is None
    html = (tmp_path / "o" / "report.html").read_text()
    assert "DVA = <b>" in html and "first to default" in html


def test_dva_allocations_add_up_to_the_dva(tmp_path):
    port = [{**CALL, "quantity": -1.0}, {**CALL, "strike": 90.0, "quantity": 0.5},
            {**CALL, "strike": 110.0, "quantity": -0.7}]
    cfg = _config(tmp_path, 1.0, own=0.05)
    cfg["portfolio"] = port
    res = cva.run(cfg, progress=False)
    trades = res.summary["trades"]
    assert sum(t["dva_allocation"] for t in trades) == pytest.approx(res.summary["dva"], rel=1e-10)
    assert sum(t["cva_allocation"] for t in trades) == pytest.approx(res.cva, rel=1e-10)
    assert trades[0]["dva_allocation"] > 0 > trades[1]["dva_allocation"]        # the long call offsets the DVA
