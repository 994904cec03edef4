"""`cva.price` end to end on the CPU: European prices against their closed forms, the American
put config against QuantLib, reproducibility from the seed."""

from pathlib import Path

import numpy as np
import pytest
from engine_testlib import black_scholes_columns_against_each_contract

import cva

ROOT = Path(__file__).resolve().parents[1]


def _cfg(seed, portfolio, **sim):
    return {"run": {"seed": seed}, "market": {"spot": [100.0, 90.0], "vol": [0.25, 0.35], "dividend": [0.01, 0.03],
                                              "rate": 0.04, "correlation": 0.4},
            "portfolio": portfolio, "simulation": {"pricing_paths": 200_000, **sim}}


def test_european_prices_against_closed_forms(rng):
    seed = int(rng.integers(2**32))
    port = [{"style": "european", "payoff": p, "underlying": u, "strike": k, "maturity": t}
            for p, u, k, t in [("call", {"asset": 0}, 105.0, 1.0), ("put", {"asset": 1}, 95.0, 0.5),
                               ("call", "max", 100.0, 2.0), ("put", "min", 95.0, 1.5)]]
    df = cva.price(_cfg(seed, port, antithetic=bool(rng.integers(2))))
    assert df["closed_form"].notna().all()
    z = (df["price"] - df["closed_form"]) / df["stderr"]
    assert np.all(np.abs(z) < 4), df
    assert np.all((df["ci_low"] < df["price"]) & (df["price"] < df["ci_high"]))


def test_same_seed_same_numbers_other_seed_other_numbers():
    port = [{"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4, "quantity": -2}]
    a = cva.price(_cfg(3, port, pricing_paths=5000))
    b = cva.price(_cfg(3, port, pricing_paths=5000))
    c = cva.price(_cfg(4, port, pricing_paths=5000))
    assert a["price"][0] == b["price"][0] and a["price"][0] != c["price"][0]
    assert a["value"][0] == -2 * a["price"][0]


def test_american_put_config_against_quantlib():
    from test_lsm import ql_bermudan_put

    df = cva.price(str(ROOT / "configs" / "american_put.yaml"), paths=40_000, out_of_sample=True)
    ref = ql_bermudan_put(36.0, 40.0, 0.06, 0.2, 1.0, 50)
    berm = df[df["style"] != "european"].iloc[0]
    assert abs(berm["price"] - ref) < 3 * berm["stderr"] + 0.02
    assert berm["price_oos"] < ref + 3 * berm["stderr_oos"]
    assert df.attrs["solver"] and df.attrs["backend"].startswith("cpu")


@pytest.mark.parametrize("regression", ["auto", "run"])
def test_float32_american_put_regressions(regression):
    """The American put config (Laguerre basis) in float32: with ``regression.dtype: auto`` the regressions
    run in float64 and the price is the float64 run's (the same normals: the European put agrees to 1e-6),
    in and out of sample; with ``run`` they are float32 and singular."""
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "american_put.yaml").read_text())
    cfg["run"]["backend"] = "cpu"
    ref = cva.price(cfg, paths=1 << 15, out_of_sample=True)
    cfg["run"]["dtype"] = "float32"
    cfg["regression"] = {"dtype": regression}
    df = cva.price(cfg, paths=1 << 15, out_of_sample=True)
    assert df.attrs["dtype"] == "float32"
    assert df.attrs["regression_dtype"] == ("float64" if regression == "auto" else "float32")
    assert abs(df["price"][1] - ref["price"][1]) < 1e-5 * ref["price"][1]          # the European put
    berm, berm_ref = df.iloc[0], ref.iloc[0]
    dates = df.attrs["solver"][berm["contract"]]["dates"]
    fallbacks = sum(d["eig_truncate"] for d in dates)
    if regression == "auto":
        assert fallbacks == 0
        for key in ("price", "price_oos"):
            assert abs(berm[key] - berm_ref[key]) < 0.25 * berm_ref["stderr"], (key, berm[key], berm_ref[key])
    else:
        assert fallbacks > 0


def test_paths_argument_checked():
    with pytest.raises(ValueError, match="paths"):
        cva.price(_cfg(1, [{"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 1.0,
                             "maturity": 1.0}]), paths=1)


def test_antithetic_standard_error_is_over_pairs(rng):
    """With antithetic paths the standard error comes from the pair means (the pairs are the
    independent samples); checked against the spread of independent repetitions."""
    port = [{"style": "european", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0}]
    seeds = rng.integers(2**32, size=100)
    runs = [cva.price(_cfg(int(s), port, pricing_paths=2000, antithetic=True)) for s in seeds]
    prices = np.array([r["price"][0] for r in runs])
    reported = np.mean([r["stderr"][0] for r in runs])
    # (reported / sd)^2 ~ 99 / chi2_99: outside [0.7, 1.5] with probability 3e-7 (30 repetitions and
    # [0.6, 1.6] failed 1.3e-3 of the runs)
    assert 0.7 < reported / prices.std(ddof=1) < 1.5


def test_degenerate_two_asset_market_has_no_closed_form():
    cfg = _cfg(1, [{"style": "european", "payoff": "call", "underlying": "max", "strike": 100.0, "maturity": 1.0}],
               pricing_paths=100)
    cfg["market"].update(vol=[0.2, 0.2], correlation=1.0)
    df = cva.price(cfg)
    assert np.isnan(df["closed_form"][0]) and np.isfinite(df["price"][0])


def test_a_bermudan_on_one_asset_of_several_against_quantlib():
    """A Bermudan put on asset 1 of a correlated 2-asset market regresses on its own asset alone: its price is
    QuantLib's one-asset Bermudan (finite differences), in and out of sample."""
    from test_lsm import ql_bermudan_put

    port = [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 1}, "strike": 95.0, "maturity": 1.0,
             "exercise_dates": 4}]
    cfg = {"run": {"seed": 8, "backend": "cpu"}, "market": {"spot": [100.0, 90.0], "vol": [0.25, 0.35], "rate": 0.04,
                                                            "correlation": 0.4},
           "portfolio": port, "simulation": {"pricing_paths": 100_000}}
    df = cva.price(cfg, out_of_sample=True)
    ref = ql_bermudan_put(90.0, 95.0, 0.04, 0.35, 1.0, 4)
    row = df.iloc[0]
    assert abs(row["price"] - ref) < 4 * row["stderr"] + 0.02, (row["price"], row["stderr"], ref)
    assert row["price_oos"] < ref + 4 * row["stderr_oos"]
    assert row["price_oos"] > ref - 4 * row["stderr_oos"] - 0.05



@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_black_scholes_columns_are_each_contract(dtype):
    black_scholes_columns_against_each_contract(np, dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_schedules_one_asset_contracts_priced_together_are_each_alone(dtype, monkeypatch):
    """Bermudan contracts on one asset of a market of several, with one schedule, are priced in one
    stacked call (several calls past ``STACK_VALUES``): prices, errors, out-of-sample prices and solver statistics
    bit for bit each contract's own run (the keyed paths are the same whatever the portfolio)."""
    import cva.engine.pricing as pricing

    put = {"style": "bermudan", "payoff": "put", "maturity": 1.0, "exercise_dates": 4}
    port = [{**put, "underlying": {"asset": 1}, "strike": 95.0}, {**put, "underlying": {"asset": 0}, "strike": 104.0},
            {"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0},
            {**put, "payoff": "call", "underlying": {"asset": 1}, "strike": 85.0, "quantity": -2.0},
            {**put, "underlying": {"asset": 0}, "strike": 101.0, "exercise_dates": 2},
            {**put, "underlying": "basket", "weights": [0.5, 0.5], "strike": 95.0}]
    cfg = _cfg(4, port, pricing_paths=2000)
    cfg["run"]["dtype"] = dtype
    from cva.io.config import load_config

    contracts = [pricing.Contract.from_config(c) for c in load_config(cfg).portfolio]
    assert [len(b) for b in pricing._batches(contracts, 2, 2000) if len(b) > 1] == [3]
    for stack_values in (1 << 25, 2 * 2000 * 4):
        monkeypatch.setattr(pricing, "STACK_VALUES", stack_values)
        together = cva.price(cfg, out_of_sample=True)
        for i, c in enumerate(port):
            alone = cva.price({**cfg, "portfolio": [c]}, out_of_sample=True)
            for col in ("price", "stderr", "price_oos", "stderr_oos", "closed_form"):
                np.testing.assert_array_equal(together[col][i], alone[col][0], err_msg=f"{col} of contract {i}")
            name = together["contract"][i]
            if name in together.attrs["solver"]:
                assert together.attrs["solver"][name] == alone.attrs["solver"][alone["contract"][0]]
