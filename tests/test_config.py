"""cva.io.config: the example of DESIGN.md loads normalized; every mistake is reported with its key."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from cva.io.config import AMERICAN_DATES_PER_YEAR, Config, ConfigError, load_config, validate_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

DESIGN_YAML = """\
run:        {name: quickstart, seed: 7, backend: auto, dtype: float64}
market:
  spot: [100, 100, 100]          # or a scalar with assets: d
  vol: [0.2, 0.25, 0.3]          # scalar or per asset
  rate: 0.05                     # continuously compounded, flat
  dividend: 0.0                  # scalar or per asset
  correlation: 0.3               # scalar (equicorrelation) or a full matrix
portfolio:                       # the netting set with the counterparty
  - {style: bermudan, payoff: put, underlying: basket, weights: [1, 1, 1],
     strike: 100, maturity: 1.0, exercise_dates: 10, quantity: 1.0}
  - {style: european, payoff: call, underlying: {asset: 0}, strike: 105, maturity: 1.0, quantity: -2}
counterparty: {recovery: 0.4, hazard_rate: 0.02}   # or cds_spreads: {1: 0.010, 5: 0.015}
simulation:
  dates: 10                      # exposure dates, equally spaced on (0, T], T = longest maturity
  outer_paths: 4096
  pricing_paths: 100000          # paths for `cva price` (plain LSM at t = 0)
  inner_paths: 256               # or {sqrt_outer: 4.0} for 4 * sqrt(outer_paths)
  basis: linear                  # linear | quadratic | laguerre
regression: {method: auto, cond_max: 1.0e5, rtol: 1.0e-4}
output:     {dir: reports/quickstart}
"""


def minimal(**sections) -> dict:
    """A valid one-asset configuration, with sections replaced or added."""
    cfg = {
        "market": {"spot": 100.0, "vol": 0.2, "rate": 0.05},
        "portfolio": [{"style": "european", "payoff": "put", "underlying": {"asset": 0},
                       "strike": 100.0, "maturity": 1.0}],
    }
    cfg.update(copy.deepcopy(sections))
    return cfg


def problems_of(source) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(source)
    problems = info.value.problems
    assert problems == validate_config(source)
    return problems


def assert_problem(problems, key, *words):
    """Some problem starts with ``key:`` and contains every word."""
    hits = [p for p in problems if p.startswith(f"{key}:")]
    assert hits, f"no problem at {key!r} in {problems}"
    assert any(all(w in p for w in words) for p in hits), f"{words} not in {hits}"


@pytest.fixture
def design_file(tmp_path) -> Path:
    path = tmp_path / "quickstart.yaml"
    path.write_text(DESIGN_YAML)
    return path


# ---------------------------------------------------------------------------------------------
# valid configurations


def test_design_example_loads_normalized(design_file):
    cfg = load_config(design_file)
    assert isinstance(cfg, Config)
    assert validate_config(design_file) == []
    assert (cfg.run.name, cfg.run.seed, cfg.run.backend, cfg.run.dtype) == ("quickstart", 7, "auto", "float64")
    m = cfg.market
    assert m.d == cfg.d == m.assets == 3
    assert m.spot == (100.0, 100.0, 100.0) and m.vol == (0.2, 0.25, 0.3)
    assert m.dividend == (0.0, 0.0, 0.0) and m.rate == 0.05
    C = m.correlation_matrix
    assert C.shape == (3, 3)
    np.testing.assert_allclose(C, 0.3 + 0.7 * np.eye(3))

    bermudan, european = cfg.portfolio
    assert (bermudan.index, european.index) == (0, 1)
    assert bermudan.name == "0: bermudan put basket"
    assert (bermudan.style, bermudan.payoff, bermudan.underlying, bermudan.asset) == ("bermudan", "put", "basket", None)
    assert bermudan.weights == (1.0, 1.0, 1.0)
    assert (bermudan.strike, bermudan.maturity, bermudan.quantity, bermudan.n_exercise) == (100.0, 1.0, 1.0, 10)
    assert european.underlying == "asset" and european.asset == 0 and european.weights is None
    assert european.n_exercise == 1 and european.quantity == -2.0 and european.name == "1: european call asset 0"

    assert cfg.counterparty.recovery == 0.4 and cfg.counterparty.hazard_rate == 0.02
    assert cfg.counterparty.kind == "flat" and cfg.require_counterparty() is cfg.counterparty
    s = cfg.simulation
    assert (s.dates, s.outer_paths, s.pricing_paths, s.inner_paths, s.basis) == (10, 4096, 100000, 256, "linear")
    assert s.inner_paths_for(4096) == 256
    assert (s.payoff_regressor, s.itm_only, s.antithetic, s.out_of_sample, s.chunk) == (False, True, False, False, None)
    r = cfg.regression
    assert (r.method, r.cond_max, r.rtol, r.dtype) == ("auto", 1e5, 1e-4, "auto")
    assert cfg.output.dir == "reports/quickstart"
    summary = cfg.summary()
    assert "quickstart" in summary and "d = 3" in summary and "2 contracts" in summary and "float64" in summary
    assert "regressions" not in summary
    put = load_config(minimal(run={"dtype": "float32"}, simulation={"basis": "laguerre"}))
    assert "float32 (float64 regressions)" in put.summary()


def test_config_is_frozen_and_round_trips(design_file):
    cfg = load_config(design_file)
    with pytest.raises(ValidationError):
        cfg.run.seed = 3
    assert load_config(cfg) is cfg
    again = load_config(cfg.to_dict())
    assert again == cfg


def test_defaults_and_scalar_broadcast():
    cfg = load_config({"market": {"spot": 100, "assets": 4, "vol": 0.25, "correlation": 0.5},
                       "portfolio": [{"style": "european", "payoff": "call", "underlying": "max",
                                      "strike": 100, "maturity": 2}]})
    assert cfg.market.d == 4 and cfg.market.spot == (100.0,) * 4 and cfg.market.vol == (0.25,) * 4
    assert cfg.market.dividend == (0.0,) * 4 and cfg.market.rate == 0.0
    assert (cfg.run.name, cfg.run.seed, cfg.run.backend, cfg.run.dtype) == ("run", 0, "auto", "float64")
    assert cfg.counterparty is None
    assert cfg.output.dir == "reports/run"
    assert cfg.simulation.inner_paths == 256 and cfg.regression.rtol is None
    c = cfg.portfolio[0]
    assert c.weights is None and c.quantity == 1.0 and c.name == "0: european call max"
    with pytest.raises(ConfigError) as info:
        cfg.require_counterparty()
    assert info.value.problems[0].startswith("counterparty:")


def test_basket_weights_default_to_ones():
    cfg = load_config(minimal(market={"spot": [90, 110], "vol": 0.2},
                              portfolio=[{"style": "european", "payoff": "call", "underlying": "basket",
                                          "strike": 100, "maturity": 1}]))
    assert cfg.portfolio[0].weights == (1.0, 1.0)


def test_inner_paths_sqrt_outer():
    cfg = load_config(minimal(simulation={"outer_paths": 10000, "inner_paths": {"sqrt_outer": 4.0}}))
    assert cfg.simulation.inner_paths_for() == 400
    assert cfg.simulation.inner_paths_for(2500) == 200
    assert cfg.simulation.inner_paths_for(1) == 8                     # two quarters' worth at least
    assert cfg.simulation.inner_paths_for(10001) == 400                # rounded to a multiple of 4
    tiny = load_config(minimal(simulation={"inner_paths": {"sqrt_outer": 0.01}, "estimator": "plain"}))
    assert tiny.simulation.inner_paths_for(100) == 4


def test_american_default_exercise_dates_and_times():
    cfg = load_config(minimal(portfolio=[
        {"style": "american", "payoff": "put", "underlying": {"asset": 0}, "strike": 40, "maturity": 1.0},
        {"style": "american", "payoff": "put", "underlying": {"asset": 0}, "strike": 40, "maturity": 0.3},
        {"style": "american", "payoff": "put", "underlying": {"asset": 0}, "strike": 40, "maturity": 2.0,
         "exercise_dates": 12},
        {"style": "bermudan", "payoff": "call", "underlying": "min", "strike": 40, "maturity": 3.0,
         "exercise_dates": 9},
    ]))
    a1, a03, a2, b = cfg.portfolio
    assert a1.n_exercise == 50 and a03.n_exercise == 15 and a2.n_exercise == 12
    assert a1.n_exercise == math.ceil(50 * a1.maturity)
    t = b.exercise_times()
    assert t.shape == (9,) and t.dtype == np.float64
    np.testing.assert_allclose(t, 3.0 * np.arange(1, 10) / 9)
    assert t[-1] == 3.0
    np.testing.assert_allclose(a1.exercise_times(), np.arange(1, 51) / 50)
    european = load_config(minimal()).portfolio[0]
    np.testing.assert_array_equal(european.exercise_times(), [1.0])


def test_hazard_specs():
    cfg = load_config(minimal(counterparty={"cds_spreads": {5: 0.015, 1: 0.010}}))
    assert cfg.counterparty.kind == "cds" and list(cfg.counterparty.cds_spreads) == [1.0, 5.0]
    assert cfg.counterparty.recovery == 0.4
    cfg = load_config(minimal(counterparty={"recovery": 0.3, "hazards": {"times": [1, 3], "rates": [0.01, 0.02]}}))
    assert cfg.counterparty.kind == "piecewise" and cfg.counterparty.hazards.times == (1.0, 3.0)


def test_shipped_configs_validate():
    put = load_config(CONFIGS / "american_put.yaml")
    assert put.d == 1 and put.simulation.basis == "laguerre" and put.simulation.pricing_paths == 100000
    bermudan = [c for c in put.portfolio if c.style != "european"]
    assert bermudan and bermudan[0].n_exercise == 50 and bermudan[0].strike == 40 and put.market.spot == (36.0,)
    assert any(c.style == "european" for c in put.portfolio)
    assert put.counterparty.recovery == 0.4 and put.counterparty.hazard_rate == 0.02
    mx = load_config(CONFIGS / "max_call.yaml")
    assert mx.d == 5 and mx.market.dividend == (0.1,) * 5 and mx.simulation.basis == "quadratic"
    assert mx.portfolio[0].underlying == "max" and mx.portfolio[0].n_exercise == 9


# ---------------------------------------------------------------------------------------------
# every mistake names its key


def test_unknown_key_with_suggestion():
    cfg = minimal()
    cfg["market"]["vols"] = 0.3
    cfg["simulaton"] = {}
    problems = problems_of(cfg)
    assert_problem(problems, "market.vols", "unknown key", "did you mean 'vol'?")
    assert_problem(problems, "simulaton", "did you mean 'simulation'?")


def test_unknown_key_inside_contract_and_underlying():
    cfg = minimal()
    cfg["portfolio"][0]["strik"] = 3
    cfg["portfolio"][0]["underlying"] = {"asst": 0}
    problems = problems_of(cfg)
    assert_problem(problems, "portfolio[0].strik", "did you mean 'strike'?")
    assert_problem(problems, "portfolio[0].underlying.asst", "did you mean 'asset'?")


def test_wrong_types():
    problems = problems_of(minimal(simulation={"outer_paths": "many", "antithetic": "maybe", "chunk": 1.5},
                                   run={"seed": -1, "backend": "gpus"}))
    assert_problem(problems, "simulation.outer_paths", "integer", "'many'")
    assert_problem(problems, "simulation.antithetic", "true or false")
    assert_problem(problems, "simulation.chunk", "integer")
    assert_problem(problems, "run.seed", ">= 0")
    assert_problem(problems, "run.backend", "auto, cpu, gpu", "did you mean 'gpu'?")


def test_negative_vol_and_spot():
    problems = problems_of(minimal(market={"spot": [100, -3], "vol": -0.2}))
    assert_problem(problems, "market.vol", "must be >= 0", "-0.2")
    assert_problem(problems, "market.spot[1]", "must be > 0", "-3")


@pytest.mark.parametrize("strike", [-5, 0])
def test_nonpositive_strike(strike):
    cfg = minimal()
    cfg["portfolio"][0]["strike"] = strike
    assert problems_of(cfg) == [f"portfolio[0].strike: must be > 0, got {strike}"]


def test_negative_maturity():
    cfg = minimal()
    cfg["portfolio"][0]["maturity"] = -1.0
    assert_problem(problems_of(cfg), "portfolio[0].maturity", "must be > 0", "-1")


def test_inconsistent_list_lengths():
    problems = problems_of(minimal(market={"spot": [100, 100, 100], "vol": [0.2, 0.3]}))
    assert_problem(problems, "market", "spot has 3", "vol has 2")
    problems = problems_of(minimal(market={"spot": [100, 100], "vol": 0.2, "assets": 3}))
    assert_problem(problems, "market.assets", "3", "spot")


def test_asset_index_out_of_range():
    cfg = minimal(market={"spot": [100, 100], "vol": 0.2})
    cfg["portfolio"][0]["underlying"] = {"asset": 2}
    assert_problem(problems_of(cfg), "portfolio[0].underlying.asset", "out of range", "d = 2")
    cfg["portfolio"][0]["underlying"] = {"asset": -1}
    assert_problem(problems_of(cfg), "portfolio[0].underlying.asset", ">= 0")


def test_weights_wrong_length_and_misplaced():
    cfg = minimal(market={"spot": [100, 100, 100], "vol": 0.2})
    cfg["portfolio"] = [
        {"style": "european", "payoff": "call", "underlying": "basket", "weights": [1, 2], "strike": 1, "maturity": 1},
        {"style": "european", "payoff": "call", "underlying": "max", "weights": [1, 2, 3], "strike": 1, "maturity": 1},
        {"style": "european", "payoff": "call", "underlying": "basket", "weights": [1, -1, 0], "strike": 1,
         "maturity": 1},
    ]
    problems = problems_of(cfg)
    assert_problem(problems, "portfolio[0].weights", "2 entries", "d = 3")
    assert_problem(problems, "portfolio[1].weights", "basket")
    assert_problem(problems, "portfolio[2].weights", "zero")


def test_european_with_exercise_dates():
    cfg = minimal()
    cfg["portfolio"][0]["exercise_dates"] = 5
    assert_problem(problems_of(cfg), "portfolio[0].exercise_dates", "european", "bermudan")
    cfg["portfolio"][0]["exercise_dates"] = 1
    assert load_config(cfg).portfolio[0].n_exercise == 1


def test_bermudan_needs_exercise_dates():
    cfg = minimal()
    cfg["portfolio"][0]["style"] = "bermudan"
    assert_problem(problems_of(cfg), "portfolio[0].exercise_dates", "required")


def test_laguerre_needs_one_asset():
    problems = problems_of(minimal(market={"spot": [100, 100], "vol": 0.2}, simulation={"basis": "laguerre"}))
    assert_problem(problems, "simulation.basis", "laguerre", "d = 2")
    assert load_config(minimal(simulation={"basis": "laguerre"})).simulation.basis == "laguerre"


def test_two_hazard_specs():
    problems = problems_of(minimal(counterparty={"hazard_rate": 0.02, "cds_spreads": {1: 0.01}}))
    assert_problem(problems, "counterparty", "hazard_rate", "cds_spreads")
    problems = problems_of(minimal(counterparty={"recovery": 0.4}))
    assert_problem(problems, "counterparty", "hazard_rate")
    problems = problems_of(minimal(counterparty={"recovery": 1.0, "hazards": {"times": [2, 1], "rates": [0.1]}}))
    assert_problem(problems, "counterparty.recovery", "< 1")
    assert_problem(problems, "counterparty.hazards.times", "increasing")


@pytest.mark.parametrize("corr, words", [
    ([[1, 0.9, -0.9], [0.9, 1, 0.9], [-0.9, 0.9, 1]], ["positive semi-definite"]),
    ([[1, 0.5, 0], [0.4, 1, 0], [0, 0, 1]], ["symmetric"]),
    ([[2, 0, 0], [0, 1, 0], [0, 0, 1]], ["diagonal"]),
    ([[1, 0], [0, 1]], ["shape"]),
    (-0.9, ["positive semi-definite"]),
    ("high", ["number"]),
])
def test_bad_correlation(corr, words):
    problems = problems_of(minimal(market={"spot": 100, "assets": 3, "vol": 0.2, "correlation": corr}))
    assert_problem(problems, "market.correlation", *words)


def test_many_errors_reported_at_once():
    cfg = {
        "market": {"spot": 100, "vols": 0.2, "correlation": [[1, 0.5], [0.4, 1]], "assets": 2},
        "portfolio": [
            {"style": "european", "payoff": "cal", "underlying": {"asset": 3}, "strike": -5, "maturity": 1,
             "exercise_dates": 5},
            {"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 1, "maturity": -1},
        ],
        "counterparty": {"hazard_rate": -0.1},
        "simulation": {"basis": "laguerre", "inner_paths": {"sqrt_outer": -1}},
        "regression": {"cond_max": 0.5, "method": "qr", "dtype": "float16"},
    }
    problems = problems_of(cfg)
    for key in ["market.vol", "market.vols", "market.correlation", "portfolio[0].payoff",
                "portfolio[0].underlying.asset", "portfolio[0].strike", "portfolio[0].exercise_dates",
                "portfolio[1].maturity", "portfolio[1].exercise_dates", "counterparty.hazard_rate",
                "simulation.basis", "simulation.inner_paths.sqrt_outer", "regression.cond_max", "regression.method",
                "regression.dtype"]:
        assert_problem(problems, key)
    assert len(problems) == len(set(problems))
    err = pytest.raises(ConfigError, load_config, cfg).value
    assert str(err) == "\n".join(err.problems)


def test_missing_sections_and_empty_portfolio():
    problems = problems_of({})
    assert_problem(problems, "market", "required")
    assert_problem(problems, "portfolio", "required")
    assert_problem(problems_of(minimal(portfolio=[])), "portfolio", "at least 1")


# ---------------------------------------------------------------------------------------------
# files


def test_yaml_syntax_error_gives_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("market:\n  spot: 100\n   vol: 0.2\nportfolio: []\n")
    err = pytest.raises(ConfigError, load_config, path).value
    assert len(err.problems) == 1 and "line 3" in err.problems[0]
    assert str(path) in str(err)
    assert validate_config(path) == err.problems


def test_duplicate_yaml_key(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("market:\n  spot: 100\n  vol: 0.2\n  vol: 0.3\n")
    (problem,) = validate_config(path)
    assert "duplicate key 'vol'" in problem and "line 4" in problem


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    err = pytest.raises(ConfigError, load_config, path).value
    assert err.problems == ["file not found"] and str(path) in str(err)
    assert validate_config(str(path)) == ["file not found"]


def test_top_level_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    (problem,) = validate_config(path)
    assert "mapping" in problem
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    (problem,) = validate_config(empty)
    assert "empty" in problem


def test_yaml_exponent_numbers(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("market: {spot: 1e2, vol: 2e-1}\n"
                    "portfolio: [{style: european, payoff: put, underlying: {asset: 0}, strike: 1e2, maturity: 1}]\n"
                    "simulation: {outer_paths: 1e4}\nregression: {cond_max: 1e6}\n")
    cfg = load_config(path)
    assert cfg.market.spot == (100.0,) and cfg.simulation.outer_paths == 10000 and cfg.regression.cond_max == 1e6


# ---------------------------------------------------------------------------------------------
# limits of the random streams, the simulation grid, the run directory


def test_path_counts_stay_within_the_random_streams():
    """Outer, inner and pricing paths are keyed by 32-bit counters: at most rng.PATH_LIMIT each."""
    from cva.market.rng import PATH_LIMIT

    for key in ("outer_paths", "inner_paths", "pricing_paths"):
        assert_problem(problems_of(minimal(simulation={key: PATH_LIMIT + 1})), f"simulation.{key}", f"<= {PATH_LIMIT}")
        assert getattr(load_config(minimal(simulation={key: PATH_LIMIT})).simulation, key) == PATH_LIMIT
    assert_problem(problems_of(minimal(simulation={"pricing_paths": 1e23})), "simulation.pricing_paths")
    huge = minimal(simulation={"outer_paths": 10_000, "inner_paths": {"sqrt_outer": PATH_LIMIT / 50}})
    assert_problem(problems_of(huge), "simulation.inner_paths", "sqrt_outer", str(PATH_LIMIT))


@pytest.mark.parametrize("d", [1, 5])
def test_dates_stay_within_the_random_streams(d):
    """simulation.dates, each contract's exercise_dates and the grid of both: at most rng.step_limit(d)."""
    from cva.market.rng import step_limit

    limit = step_limit(d)
    market = {"spot": [100.0] * d, "vol": 0.2}
    berm = {"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0, "maturity": 1.0}
    assert_problem(problems_of(minimal(market=market, simulation={"dates": limit + 1})),
                   "simulation.dates", f"<= {limit}", f"d = {d}")
    assert_problem(problems_of(minimal(market=market, portfolio=[{**berm, "exercise_dates": limit + 1}])),
                   "portfolio[0].exercise_dates", f"<= {limit}")
    american = {**berm, "style": "american", "maturity": limit / AMERICAN_DATES_PER_YEAR + 1}
    assert_problem(problems_of(minimal(market=market, portfolio=[american])), "portfolio[0].exercise_dates",
                   "american")
    cfg = load_config(minimal(market=market, portfolio=[{**berm, "exercise_dates": limit}], simulation={"dates": 1}))
    assert cfg.grid_keys()[0].size == limit
    apart = [{**berm, "exercise_dates": limit // 2 + 1}, {**berm, "maturity": 0.7, "exercise_dates": limit // 2}]
    assert_problem(problems_of(minimal(market=market, portfolio=apart, simulation={"dates": 3})),
                   "simulation.dates", "grid", str(limit))


@pytest.mark.parametrize("maturity, dates", [(1e-13, None), (1e-11, 100)])
def test_exercise_dates_that_the_grid_cannot_tell_apart(maturity, dates):
    """Exercise dates within the grid's rounding of t = 0 or of each other are refused at the maturity."""
    short = {"style": "european" if dates is None else "bermudan", "payoff": "put", "underlying": {"asset": 0},
             "strike": 100.0, "maturity": maturity, **({} if dates is None else {"exercise_dates": dates})}
    long = {"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0}
    assert_problem(problems_of(minimal(portfolio=[short, long])), "portfolio[0].maturity", "too short")
    assert validate_config(minimal(portfolio=[{**short, "maturity": 1e-6}, long])) == []


@pytest.mark.parametrize("name", ["../escape", "a/b", "a\\b", "..", "  ", ""])
def test_run_name_is_a_plain_directory_name(name):
    assert_problem(problems_of(minimal(run={"name": name})), "run.name")
    assert load_config(minimal(run={"name": "my run-2"})).output.dir == "reports/my run-2"


def test_chunk_at_least_two():
    assert_problem(problems_of(minimal(simulation={"chunk": 1})), "simulation.chunk", ">= 2")
    assert load_config(minimal(simulation={"chunk": 2})).simulation.chunk == 2
