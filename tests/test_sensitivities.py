"""CVA sensitivities (central differences, common random numbers) against the derivatives of the closed form
of long European calls: CVA = (1 - R) q C0 (1 - exp(-lambda T)) for a flat hazard, the calls valued in closed
form along the paths, so E[D(t) C(t, S_t)] = C0 for every exposure date."""

import math

import pytest

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
