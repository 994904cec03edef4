"""Antithetic outer paths (``simulation.outer_antithetic``, the default): the pairs are mirrored, keyed so
that any slice of outer paths draws the same numbers, the standard errors come from the pair means, the
CVA of long European calls stays on its closed form with a smaller error, and odd counts are refused."""

import math

import numpy as np
import pytest

import cva
from cva.engine.estimators import Level, combine, level_table, samples
from cva.instruments import analytic
from cva.instruments.products import Contract
from cva.io.config import ConfigError, load_config
from cva.market.model import BlackScholes

Z_MC = 4.5          # standard errors allowed to a Monte Carlo estimate (as in test_nested)


def _model():
    return BlackScholes(spot=[100.0, 90.0], vol=[0.2, 0.35], dividend=[0.0, 0.01], rate=0.03, correlation=0.4)


def test_pairs_are_mirrored_and_keyed_by_path():
    m = _model()
    times = np.array([0.0, 0.25, 0.5, 1.0])
    S = m.sample(times, 1, seed=5, purpose="outer", outer=(0, 10), outer_antithetic=True)[:, 0]    # (10, 3, 2)
    # log returns less the drift: z-driven parts of paths 2i and 2i + 1 are opposite
    x = np.log(S / m.spot) - (m.rate - m.dividend - 0.5 * m.vol ** 2) * times[1:, None]
    np.testing.assert_allclose(x[0::2], -x[1::2], rtol=0, atol=1e-12)
    assert np.abs(x[0::2]).min() > 0                                              # not a degenerate draw
    # any slice, odd first path included, is the same numbers
    part = m.sample(times, 1, seed=5, purpose="outer", outer=(3, 6), outer_antithetic=True)[:, 0]
    np.testing.assert_array_equal(part, S[3:9])
    # the pairs' first members are the plain draw of the pair index
    plain = m.sample(times, 1, seed=5, purpose="outer", outer=(0, 5))[:, 0]
    np.testing.assert_array_equal(S[0::2], plain)
    with pytest.raises(ValueError, match="outer_antithetic"):
        m.sample(times, 2, seed=5, purpose="outer", outer=(0, 2), outer_antithetic=True)


def test_statistics_come_from_the_pair_means(rng):
    x = rng.standard_normal((10, 3))
    x[1::2] = -0.8 * x[0::2] + 0.1 * rng.standard_normal((5, 3))                  # strongly anti-correlated pairs
    sets = np.stack([x, x, x])                                                    # whole set and halves alike
    lv = Level(0, 8, 1, sets, paired=True)
    res = combine([lv], lambda P: P.sum(axis=1), "plain")
    pairs = 0.5 * (x[0::2] + x[1::2]).sum(axis=1)
    assert res["estimate"] == pytest.approx(pairs.mean(), rel=1e-14)
    assert res["stderr"] == pytest.approx(pairs.std(ddof=1) / math.sqrt(5), rel=1e-12)
    (row,) = level_table([lv], lambda P: P.sum(axis=1), "plain")
    assert row["outer_paths"] == 10
    assert row["fine_variance"] == pytest.approx(2 * pairs.var(ddof=1), rel=1e-12)   # per outer path
    with pytest.raises(ValueError, match="pairs"):
        samples(x[:9], paired=True)


def _calls(tmp_path, anti, outer=2000):
    port = [{"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0},
            {"style": "european", "payoff": "put", "underlying": {"asset": 1}, "strike": 90.0, "maturity": 1.0,
             "quantity": 0.5}]
    return {"run": {"name": "a", "seed": 3, "backend": "cpu"},
            "market": {"spot": [100.0, 90.0], "vol": [0.2, 0.35], "dividend": [0.0, 0.01], "rate": 0.03,
                       "correlation": 0.4},
            "portfolio": port, "counterparty": {"recovery": 0.4, "hazard_rate": 0.03},
            "simulation": {"dates": 4, "outer_paths": outer, "inner_paths": 16, "outer_antithetic": anti},
            "output": {"dir": str(tmp_path / f"run{int(anti)}")}}


def test_long_european_options_cva_on_the_closed_form_both_ways(tmp_path):
    """CVA = (1 - R) (C(0) + P(0) / 2) (1 - e^{-lambda T}) for long European options held to the horizon,
    with and without antithetic outer paths; the antithetic error is the smaller (the values are monotone
    in the driving normals)."""
    m = _model()
    c = analytic.closed_form_price(Contract("european", "call", "asset", 100.0, 1.0, asset=0), m)
    p = analytic.closed_form_price(Contract("european", "put", "asset", 90.0, 1.0, asset=1), m)
    ref = 0.6 * (c + 0.5 * p) * (1 - math.exp(-0.03))
    runs = {anti: cva.run(_calls(tmp_path, anti), progress=False) for anti in (False, True)}
    for res in runs.values():
        assert abs(res.cva - ref) < Z_MC * res.stderr, (res.cva, res.stderr, ref)
    assert runs[True].stderr < runs[False].stderr


def test_odd_counts_are_refused_with_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"simulation\.outer_paths: must be even with outer_antithetic"):
        load_config(_calls(tmp_path, True, outer=2001))
    load_config(_calls(tmp_path, False, outer=2001))                               # without pairs: any count
    cfg = _calls(tmp_path, True)
    cfg["simulation"].update({"estimator": "mlmc", "inner_paths": 32, "level_paths": [100, 51, 20]})
    with pytest.raises(ConfigError, match=r"simulation\.level_paths: must be even"):
        load_config(cfg)
