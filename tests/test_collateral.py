"""CSA collateral with a margin period of risk (ORE's classical model) against a 2-D quadrature, and its limits:
an infinite threshold or minimum transfer amount is the uncollateralized run, bit for bit."""

import math

import numpy as np
import pytest

import cva
from cva.instruments.analytic import black_scholes_array
from cva.io.config import ConfigError, load_config

Z_MC = 4.5
S0, K, VOL, RATE, T, LAM, R = 100.0, 100.0, 0.25, 0.03, 1.0, 0.03, 0.4


def _config(tmp_path, name, csa=None, outer=4000):
    cfg = {"run": {"name": "csa", "seed": 23, "backend": "cpu"}, "market": {"spot": S0, "vol": VOL, "rate": RATE},
           "portfolio": [{"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": K,
                          "maturity": T}],
           "counterparty": {"recovery": R, "hazard_rate": LAM},
           "simulation": {"dates": 4, "outer_paths": outer, "inner_paths": 8},
           "output": {"dir": str(tmp_path / name)}}
    if csa is not None:
        cfg["csa"] = csa
    return cfg


def _call(S, t):
    return np.maximum(S - K, 0.0) if t >= T else black_scholes_array(S, K, T - t, RATE, 0.0, VOL, "call")


def _quadrature_cva(mpr, dates=4, nodes=160):
    """(1 - R) sum_k E[D(t_k) (C(t_k, S_t) - C(t_k - MPR, S_{t - MPR}))^+] (S(t_{k-1}) - S(t_k)), zero threshold, the
    counterparty posting, by Gauss-Hermite in the two independent normals of S_{t - MPR} and S_t / S_{t - MPR}."""
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / math.sqrt(2 * math.pi)
    Z1, Z2 = np.meshgrid(z, z, indexing="ij")
    W = np.outer(w, w)
    total = 0.0
    for k in range(1, dates + 1):
        t, s = k * T / dates, k * T / dates - mpr
        S_s = S0 * np.exp((RATE - VOL ** 2 / 2) * s + VOL * math.sqrt(s) * Z1)
        S_t = S_s * np.exp((RATE - VOL ** 2 / 2) * mpr + VOL * math.sqrt(mpr) * Z2)
        exposure = np.sum(W * np.maximum(_call(S_t, t) - _call(S_s, s), 0.0)) * math.exp(-RATE * t)
        total += exposure * (math.exp(-LAM * (t - T / dates)) - math.exp(-LAM * t))
    return (1 - R) * total


def test_zero_threshold_with_a_margin_period_against_quadrature(tmp_path):
    res = cva.run(_config(tmp_path, "csa", {"margin_period_of_risk": 0.1, "posting": "counterparty"}), progress=False)
    ref = _quadrature_cva(0.1)
    assert abs(res.cva - ref) < Z_MC * res.stderr, (res.cva, res.stderr, ref)
    plain = cva.run(_config(tmp_path, "none"), progress=False)
    assert res.cva < plain.cva / 3                                               # collateral removes most of it
    assert res.summary["csa"]["margin_period_of_risk"] == 0.1


def test_ten_days_is_ten_calendar_days():
    cfg = load_config(_config(__import__("pathlib").Path("/tmp"), "x", {"margin_period_of_risk": "10d"}))
    assert cfg.csa.margin_period_of_risk == pytest.approx(10 / 365)


@pytest.mark.parametrize("csa", [{"margin_period_of_risk": 0.1, "threshold": 1e12},
                                 {"margin_period_of_risk": 0.1, "minimum_transfer_amount": 1e12}])
def test_an_unreachable_call_is_the_uncollateralized_exposure(tmp_path, csa):
    """No call is ever made: the collateral is exactly 0, so the exposure of the long call is its value
    (EE = the mean value, bit for bit) and the CVA the uncollateralized closed form (the margin dates change the
    grid, hence the paths: the comparison is statistical)."""
    res = cva.run(_config(tmp_path, "csa", csa, outer=2000), progress=False)
    assert (res.exposures["EE"] == res.exposures["mean_value"]).all()
    c0 = float(black_scholes_array(np.array([S0]), K, T, RATE, 0.0, VOL, "call")[0])
    ref = (1 - R) * c0 * (1 - math.exp(-LAM * T))
    assert abs(res.cva - ref) < Z_MC * res.stderr, (res.cva, res.stderr, ref)


@pytest.mark.parametrize("csa, words", [
    ({"margin_period_of_risk": 0.1, "threshold": -1}, "csa.threshold: must be >= 0"),
    ({"margin_period_of_risk": 2.0}, "csa.margin_period_of_risk: 2 years is not shorter than the horizon"),
    ({"margin_period_of_risk": "ten days"}, "csa.margin_period_of_risk: must be years > 0 or calendar days"),
    ({"margin_period_of_risk": 0.1, "posting": "both"}, "csa.posting"),
])
def test_csa_errors_name_the_key(tmp_path, csa, words):
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, "x", csa))
    assert any(words in p for p in info.value.problems), info.value.problems
