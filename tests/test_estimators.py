"""The estimators' plumbing: the same bits whatever the chunking and after a resume (also for the adaptive
MLMC plan), target_rmse reached, the config keys and their one-line errors, the report section."""

import json
import math

import numpy as np
import pytest
import yaml

import cva
from cva.cli import main
from cva.engine import nested
from cva.io.config import ConfigError, load_config


def _config(tmp_path, name, estimator, **sim):
    port = [{"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4},
            {"style": "european", "payoff": "call", "underlying": {"asset": 1}, "strike": 100.0, "maturity": 0.5,
             "quantity": -1.0}]
    return {"run": {"name": "e", "seed": 21, "backend": "cpu"},
            "market": {"spot": [100.0, 95.0], "vol": [0.25, 0.3], "rate": 0.03, "correlation": 0.5},
            "portfolio": port, "counterparty": {"recovery": 0.4, "hazard_rate": 0.03},
            "simulation": {"dates": 4, "outer_paths": 300, "inner_paths": 32, "basis": "linear",
                           "estimator": estimator, "pilot_paths": 100, **sim},
            "output": {"dir": str(tmp_path / name)}}


def _same(a, b):
    assert a.cva == b.cva and a.stderr == b.stderr and a.ci == b.ci
    assert [lv.paths for lv in a.levels] == [lv.paths for lv in b.levels]
    for x, y in zip(a.levels, b.levels, strict=True):
        np.testing.assert_array_equal(x.sets, y.sets)
    assert a.exposures.drop(columns=[]).equals(b.exposures)
    assert a.solver_stats.equals(b.solver_stats)


@pytest.mark.parametrize("estimator", ["mlmc", "extrapolated", "plain"])
def test_same_bits_whatever_the_chunking(tmp_path, estimator):
    runs = [cva.run(_config(tmp_path, f"c{c}", estimator), chunk=c, progress=False) for c in (300, 41, 7)]
    if estimator == "mlmc":
        assert len({lv.paths for lv in runs[0].levels}) > 1                      # the allocation did its work
    for r in runs[1:]:
        _same(runs[0], r)


def test_mlmc_resume_after_interruption_is_bitwise(tmp_path, monkeypatch):
    full = cva.run(_config(tmp_path, "full", "mlmc"), chunk=50, progress=False)
    calls = {"n": 0}
    original = nested.chunk_values

    def interrupted(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 9:                                                       # inside the allocation rounds
            raise KeyboardInterrupt
        return original(*args, **kw)

    monkeypatch.setattr(nested, "chunk_values", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cva.run(_config(tmp_path, "part", "mlmc"), chunk=50, progress=False)
    monkeypatch.setattr(nested, "chunk_values", original)
    resumed = cva.run(_config(tmp_path, "part", "mlmc"), resume=True, progress=False)
    _same(full, resumed)


def test_target_rmse_is_met(tmp_path):
    """target_rmse: half the squared target for the variance (the allocation) and levels added until the
    remaining bias and its error are within target / sqrt(2)."""
    res = cva.run(_config(tmp_path, "t", "mlmc", target_rmse="8%", max_inner_paths=128), progress=False)
    s = res.summary
    eps = 0.08 * res.cva
    assert res.stderr <= eps / math.sqrt(2) * (1 + 1e-12)
    top = res.levels[-1].inner_paths
    assert abs(s["remaining_bias"]) + s["remaining_bias_stderr"] <= eps / math.sqrt(2) or top == 128
    res2 = cva.run(_config(tmp_path, "t2", "mlmc", target_rmse=0.08 * res.cva, max_inner_paths=128),
                   progress=False)
    assert res2.stderr <= eps / math.sqrt(2) * (1 + 1e-12)


def test_a_target_not_met_is_a_warning(tmp_path, monkeypatch):
    """With the allocation's rounds spent (none here) and the finest level at max_inner_paths, a target_rmse the
    run did not meet is said: in summary.json's warnings (and the report), not left for the user to find."""
    monkeypatch.setattr(nested, "MLMC_ITERATIONS", 0)
    res = cva.run(_config(tmp_path, "w", "mlmc", target_rmse="0.1%", max_inner_paths=32), progress=False)
    assert [lv.paths for lv in res.levels] == [100, 100, 100]                          # the pilot paths only
    warnings = res.summary["warnings"]
    assert any("after 0 rounds" in w and "the variance target is not met" in w for w in warnings), warnings
    assert any(w.startswith("simulation.target_rmse: not met") for w in warnings), warnings
    html = (tmp_path / "w" / "report.html").read_text()
    assert html.count("<b>Warning:</b>") == len(warnings)


def test_levels_added_for_the_bias_leave_the_allocation_its_rounds(tmp_path, monkeypatch):
    """With one round of the allocation and levels added for a 5 % target, the outer paths still grow past the
    pilot's on every level (the levels added used up the rounds before, leaving the pilot paths only)."""
    monkeypatch.setattr(nested, "MLMC_ITERATIONS", 1)
    res = cva.run(_config(tmp_path, "r", "mlmc", target_rmse="5%", max_inner_paths=128), progress=False)
    assert len(res.levels) > 3 and all(lv.paths > 100 for lv in res.levels), [lv.paths for lv in res.levels]


def test_a_target_beyond_the_levels_keys_is_one_line(tmp_path, capsys):
    """A target_rmse whose allocation needs more outer paths than a level's keys ends the run in one line, after
    its progress lines."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path, "x", "mlmc", target_rmse=1e-6, max_inner_paths=64)))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "outer paths, more than 134217728: ask for a larger simulation.target_rmse" in err.strip().splitlines()[-1]


def test_fixed_level_plan(tmp_path):
    res = cva.run(_config(tmp_path, "f", "mlmc", level_paths=[120, 60, 30]), progress=False)
    assert [(lv.inner_paths, lv.paths) for lv in res.levels] == [(8, 120), (16, 60), (32, 30)]
    rows = res.summary["levels"]
    assert [r["weight"] for r in rows] == [1, 1, 2] and res.cva == pytest.approx(
        rows[0]["mean"] + rows[1]["mean"] + 2 * rows[2]["mean"], rel=1e-12)
    assert res.summary["outer_paths"] == 210


@pytest.mark.parametrize("sim, words", [
    ({"estimator": "mlmc", "inner_paths": 6}, "simulation.inner_paths: estimator mlmc needs at least 3 levels"),
    ({"estimator": "extrapolated", "inner_paths": 6}, "simulation.inner_paths: estimator extrapolated splits"),
    ({"estimator": "plain", "inner_paths": 7}, "a multiple of 2"),
    ({"estimator": "plain", "target_rmse": 0.1}, "simulation.target_rmse: is for estimator mlmc only"),
    ({"estimator": "mlmc", "target_rmse": "abc%"}, "simulation.target_rmse: must be a number > 0 or a percentage"),
    ({"estimator": "mlmc", "target_rmse": -1}, "simulation.target_rmse: must be a number > 0"),
    ({"estimator": "mlmc", "target_rmse": "120%"}, "(0 < x < 100)"),
    ({"estimator": "mlmc", "level_paths": [10, 10]}, "simulation.level_paths: has 2 entries, expected one per level"),
    ({"estimator": "mlmc", "level_paths": [10, 10, 10], "target_rmse": 0.1}, "exclude each other"),
    ({"estimator": "mlmc", "max_inner_paths": 16}, "simulation.max_inner_paths: must be >= inner_paths (32)"),
    ({"estimator": "richardson"}, "simulation.estimator"),
])
def test_config_errors_name_the_key(tmp_path, sim, words):
    cfg = _config(tmp_path, "x", "mlmc")
    cfg["simulation"].update(sim)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert any(words in p for p in info.value.problems), info.value.problems


def test_summary_and_report_carry_the_estimate(tmp_path):
    res = cva.run(_config(tmp_path, "r", "extrapolated"), progress=False)
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    for key in ("estimator", "bias_estimate", "bias_stderr", "remaining_bias", "remaining_bias_stderr", "levels",
                "ci_low", "ci_high", "warnings"):
        assert key in s, key
    assert [r["inner_paths"] for r in s["levels"]] == [16, 32] and [r["weight"] for r in s["levels"]] == [0, 1]
    assert s["ci_low"] <= min(res.cva, res.cva - s["remaining_bias"])
    html = (tmp_path / "r" / "report.html").read_text()
    assert 'id="levels"' in html and "levels.png" not in html.split("<img")[0]
    assert "EE_uncorrected" in res.exposures.columns
