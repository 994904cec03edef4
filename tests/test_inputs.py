"""No silent nonsense: inputs that overflow the run's dtype, YAML nested too deep or too large, runs too
large to start, a backend that is not there, output to a full disk: each one line naming what to change."""

import os
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import cva
from cva.cli import main
from cva.io import rundir
from cva.io.config import MAX_YAML_BYTES, ConfigError, load_config
from linalg_gpu._backend import cupy_available

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def _base(tmp_path, changes=()):
    cfg = {"run": {"name": "in", "seed": 1, "backend": "cpu"},
           "market": {"spot": 100.0, "vol": 0.2, "rate": 0.02},
           "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0,
                          "maturity": 1.0, "exercise_dates": 4}],
           "counterparty": {"recovery": 0.4, "hazard_rate": 0.02},
           "simulation": {"dates": 4, "outer_paths": 64, "inner_paths": 16},
           "output": {"dir": str(tmp_path / "out")}}
    for (section, key), value in dict(changes).items():
        if section == "csa":
            cfg.setdefault("csa", {"margin_period_of_risk": "10d"})
        target = cfg[section][0] if section == "portfolio" else cfg[section]
        target[key] = value
    return cfg


def _one_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("where, value, dtype, words", [
    (("market", "spot"), 1e308, "float64", "market.spot: 1e+308 (asset 0) gives asset prices near"),
    (("market", "vol"), 1e308, "float64", "market.vol: 1e+308 (asset 0)"),
    (("portfolio", "quantity"), 1e308, "float64", "portfolio[0].quantity: 1e+308 gives contract values"),
    (("portfolio", "strike"), 1e300, "float64", "portfolio[0].strike: 1e+300 gives contract values"),
    (("portfolio", "strike"), 1e36, "float32", "portfolio[0].strike: 1e+36 gives contract values near e^84, beyond "
                                               "what the run can sum and square (e^69 in float32)"),
    (("portfolio", "quantity"), 1e150, "float64", "portfolio[0].quantity: 1e+150 gives contract values near e^353, "
                                                 "beyond what the run can sum and square (e^345 in float64)"),
    (("csa", "independent_amount"), -1e300, "float64", "csa.independent_amount: -1e+300 is beyond"),
    (("csa", "independent_amount"), 1e35, "float32", "csa.independent_amount: 1e+35 is beyond"),
    (("portfolio", "strike"), 1e-300, "float32", "portfolio[0].strike: 1e-300 is below the smallest normal float32"),
    (("market", "spot"), 1e-45, "float32", "market.spot: 1e-45 (asset 0) is below the smallest normal float32"),
])
def test_inputs_that_overflow_are_refused_naming_the_key(tmp_path, capsys, where, value, dtype, words):
    cfg = _base(tmp_path, {where: value, ("run", "dtype"): dtype})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path)]) == 2
    line = _one_line(capsys)
    assert words in line, line
    assert not (tmp_path / "out" / "summary.json").exists()


def test_large_but_representable_inputs_run(tmp_path):
    """The check is no tighter than it must be: a strike of 1e100 in float64 runs and gives finite numbers,
    the CVA scaling with the notional as the homogeneity of Black-Scholes says; so does a quantity of 1e145 just
    under the bound of the values' squares, with its report (its plots on log axes) and finite exposures."""
    small = cva.run(_base(tmp_path, {("output", "dir"): str(tmp_path / "s")}), progress=False)
    cfg = _base(tmp_path, {("market", "spot"): 1e102, ("portfolio", "strike"): 1e102})
    big = cva.run(cfg, progress=False)
    assert np.isfinite(big.cva) and big.cva == pytest.approx(small.cva * 1e100, rel=1e-6)
    cfg = _base(tmp_path, {("portfolio", "quantity"): 1e145, ("output", "dir"): str(tmp_path / "q")})
    many = cva.run(cfg, progress=False)
    assert many.cva == pytest.approx(small.cva * 1e145, rel=1e-12) and np.isfinite(many.stderr)
    assert np.isfinite(many.exposures.drop(columns="date").to_numpy(dtype=float)).all()
    assert (tmp_path / "q" / "report.html").exists()


def test_yaml_nested_too_deep_is_one_line(tmp_path, capsys):
    path = tmp_path / "deep.yaml"
    path.write_text("market: " + "[" * 500 + "]" * 500 + "\n")
    assert main(["validate", str(path)]) == 2
    assert "nests 501 levels deep, more than 32" in _one_line(capsys)


def test_a_huge_yaml_is_refused_before_it_is_parsed(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    row = "  - {style: european, payoff: call, underlying: {asset: 0}, strike: 100, maturity: 1}\n"
    path.write_text("market: {spot: 100, vol: 0.2}\nportfolio:\n" + row * (MAX_YAML_BYTES // len(row) + 10))
    with pytest.raises(ConfigError, match="more than a configuration's limit"):
        load_config(path)


def _cva_limited(args, cwd):
    """``python -m cva ARGS`` in a process whose address space is limited to 8 GiB (a regression that reads or
    allocates without bound fails there, not the test session): (exit code, stderr)."""
    import resource
    import subprocess
    import sys

    limit = 8 << 30
    env = {**os.environ, "PYTHONPATH": str(Path(cva.__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-m", "cva", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    return proc.returncode, proc.stderr


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_file_without_an_end_is_refused_after_the_limit(tmp_path):
    """/dev/zero reports no size: the configuration and a trades_file are read with a bound, not to the end."""
    rc, err = _cva_limited(["validate", "/dev/zero"], tmp_path)
    assert rc == 2 and err.strip() == ("/dev/zero: the file has no end, more than a configuration's limit of "
                                       "1,048,576 bytes: is it the right file?"), err
    cfg = {"market": {"spot": 100.0, "vol": 0.2}, "counterparties": [{"name": "A", "recovery": 0.4,
           "hazard_rate": 0.02, "netting_sets": [{"name": "a"}]}], "trades_file": "/dev/zero"}
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(cfg))
    rc, err = _cva_limited(["validate", "d.yaml"], tmp_path)
    assert rc == 2 and "trades_file: /dev/zero: no end, more than the limit of" in err and "Traceback" not in err


@pytest.mark.parametrize("where, value", [(("run", "name"), "a\nb"), (("output", "dir"), "out\x00q"),
                                          (("run", "name"), "tab\there")])
def test_names_with_control_characters_are_refused(tmp_path, where, value):
    cfg = _base(tmp_path, {where: value})
    with pytest.raises(ConfigError, match=rf"{'.'.join(where)}: must not hold control characters"):
        load_config(cfg)


def test_a_run_too_large_is_refused_before_any_work(tmp_path, capsys):
    cfg = _base(tmp_path, {("simulation", "outer_paths"): 4294967294, ("simulation", "inner_paths"): 1024})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path)]) == 2
    line = _one_line(capsys)
    assert "inner asset-steps" in line and "over the limit of 4 h: confirm with --yes" in line
    assert not any((tmp_path / "out").glob("*"))
    with pytest.raises(ValueError, match="confirm=True"):
        cva.run(cfg, progress=False)


@pytest.mark.parametrize("changes, args, words", [
    ({("simulation", "outer_paths"): 2, ("simulation", "inner_paths"): 2 ** 32}, [],
     "simulation.inner_paths: 4294967296 inner paths on"),
    ({("simulation", "outer_paths"): 2 ** 31}, ["--chunk", str(2 ** 30)], "chunk: 1073741824 outer paths need about"),
])
def test_a_chunk_beyond_the_machines_memory_is_refused_before_any_work(tmp_path, changes, args, words):
    """A run whose chunk of the fewest outer paths (or the chunk asked for) needs more than the machine's physical
    memory (terabytes here) is refused in one line naming what to change, not started to fail or be killed later
    (in a process of limited memory: a regression fails there). A chunk larger than the outer paths asked for
    counts only those paths (below)."""
    cfg = _base(tmp_path, {**changes, ("run", "backend"): "cpu"})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    rc, err = _cva_limited(["run", str(path), "--yes", *args], tmp_path)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert words in lines[0] and "GiB of this machine's memory" in lines[0], lines[0]
    assert [p.name for p in (tmp_path / "out").iterdir()] == [rundir.LOCK]


def test_validate_prints_the_estimate_and_checks_the_backend(tmp_path, capsys):
    assert main(["validate", str(QUICKSTART)]) == 0
    out = capsys.readouterr().out
    assert "a run: about" in out and "inner asset-steps" in out
    cfg = yaml.safe_load(QUICKSTART.read_text())
    cfg["run"]["backend"] = "gpu"
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(cfg))
    if cupy_available():
        assert main(["validate", str(path)]) == 0
    else:
        assert main(["validate", str(path)]) == 2
        assert "run.backend: backend 'gpu' asked for, but CuPy finds no CUDA device" in _one_line(capsys)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="/dev/full is a Linux device")
def test_price_json_to_a_full_disk_exits_1(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_base(tmp_path, {("simulation", "pricing_paths"): 100})))
    assert main(["price", str(path), "--json", "/dev/full"]) == 1
    assert capsys.readouterr().err.strip().endswith("cva: cannot write /dev/full: No space left on device")


def test_run_overrides_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_base(tmp_path)))
    assert main(["run", str(path), "--seed", "9", "--outer", "40", "--inner", "8", "--dtype", "float32",
                 "--estimator", "plain"]) == 0
    s = yaml.safe_load((tmp_path / "out" / "summary.json").read_text())
    assert (s["seed"], s["outer_paths"], s["inner_paths"], s["dtype"], s["estimator"]) == (9, 40, 8, "float32", "plain")
    assert "(plain, inner-sample bias" in capsys.readouterr().out
    assert main(["run", str(path), "--overwrite", "--inner", "6"]) == 2
    assert "simulation.inner_paths: estimator extrapolated splits" in _one_line(capsys)


def test_quiet_run_and_short_repr(tmp_path, capfd):
    res = cva.run(_base(tmp_path), progress=False)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    text = repr(res)
    assert len(text) < 300 and text.startswith("RunResult(cva=") and "estimator='extrapolated'" in text


def test_a_run_without_a_run_directory(tmp_path):
    """write=False: the same numbers as a written run, and no file anywhere."""
    cfg = _base(tmp_path)
    res = cva.run(cfg, progress=False, write=False)
    assert res.out_dir is None and not (tmp_path / "out").exists()
    written = cva.run(cfg, progress=False)
    assert res.cva == written.cva and res.summary["bias_estimate"] == written.summary["bias_estimate"]
    with pytest.raises(ValueError, match="cannot resume"):
        cva.run(cfg, progress=False, write=False, resume=True)


def test_eigh_small_on_a_huge_broadcast_batch_fails_at_once():
    """A broadcast batch of 1e9 systems: the outputs' memory is checked before the input is read."""
    import linalg_gpu as lg

    A = np.broadcast_to(np.eye(4), (10**9, 4, 4))
    with pytest.raises(MemoryError, match=r"eigh_small: the batch's outputs need 149.0 GiB"):
        lg.eigh_small(A)


def test_one_spelling_for_the_symmetry_option():
    """Every public function of linalg_gpu that can skip the symmetry check calls it assume_symmetric."""
    import inspect

    import linalg_gpu as lg

    spelled = {}
    for name in lg.__all__:
        obj = getattr(lg, name)
        if callable(obj):
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                continue
            spelled[name] = {p for p in params if "symmetric" in p}
    assert all(s <= {"assume_symmetric"} for s in spelled.values()), spelled
    assert "assume_symmetric" in spelled["jacobi_eigh"] and "assume_symmetric" in spelled["solve_small"]


def test_a_regression_too_large_for_the_gpu_is_named_before_the_run(tmp_path):
    """A basket Bermudan on 70 assets regresses on 71 regressors (linear basis): above the GPU solver's 64, one line
    naming the contract, checked before any path is drawn (the check runs on the CPU here)."""
    from cva.engine.plan import build_plan
    from cva.runner import _check_gpu_regressions

    cfg = _base(tmp_path)
    cfg["market"] = {"spot": 100.0, "vol": 0.2, "rate": 0.02, "assets": 70, "correlation": 0.3}
    cfg["portfolio"] = [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 3}, "strike": 100.0,
                         "maturity": 1.0, "exercise_dates": 4},
                        {"style": "european", "payoff": "call", "underlying": "basket", "strike": 100.0,
                         "maturity": 1.0},
                        {"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0,
                         "maturity": 1.0, "exercise_dates": 4}]
    c = load_config(cfg)
    with pytest.raises(ValueError, match=r"^portfolio.2: the bermudan basket contract's regression on d = 70 assets "
                                         r"has 71 regressors \(simulation.basis: linear\), above the GPU solver's 64"):
        _check_gpu_regressions(c, build_plan(c))
    c2 = load_config({**cfg, "portfolio": cfg["portfolio"][:2]})                # own-asset and European: fine
    _check_gpu_regressions(c2, build_plan(c2))


@pytest.mark.parametrize("seconds, words", [(0.2, "under a second"), (30.0, "30 s"), (300.0, "5 min"),
                                            (10800.0, "3.0 h"), (3 * 86400.0, "3 days")])
def test_the_cost_line_says_the_time_in_its_unit(seconds, words):
    from cva.engine.plan import describe_cost

    line = describe_cost({"inner_asset_steps": 1e9, "seconds": seconds, "backend": "gpu",
                          "bytes_per_outer_path": 2 ** 20})
    assert line == f"about 1e+09 inner asset-steps, 1 MiB per outer path of a chunk, of the order of {words} on the gpu"


@pytest.mark.parametrize("kwargs, error, words", [
    ({"overwrite": "no"}, TypeError, "overwrite must be True or False, got 'no'"),
    ({"confirm": "no"}, TypeError, "confirm must be True or False"),
    ({"resume": 1}, TypeError, "resume must be True or False"),
    ({"progress": "no"}, TypeError, "progress must be True or False"),
    ({"write": None}, TypeError, "write must be True or False"),
    ({"keep_chunks": "yes"}, TypeError, "keep_chunks must be True or False"),
    ({"chunk": 2.7}, ValueError, "chunk must be an integer >= 2, got 2.7"),
    ({"chunk": "abc"}, TypeError, "chunk must be an integer >= 2, got 'abc'"),
    ({"chunk": float("nan")}, ValueError, "chunk must be an integer >= 2, got nan"),
    ({"chunk": True}, TypeError, "chunk must be an integer >= 2, got True"),
    ({"chunk": 1.0}, ValueError, "chunk must be an integer >= 2, got 1.0"),
    ({"out": 123}, TypeError, "out must be a directory's path, got 123"),
    ({"log": "x"}, TypeError, "log must be a function of one string"),
    ({"cluster": 3}, TypeError, "cluster must be local, local:N, local-cuda, a scheduler address"),
    ({"cluster": "local:0"}, ConfigError, "run.cluster: must be local, local:N"),
    ({"cluster": "local:-1"}, ConfigError, "run.cluster: must be local, local:N"),
])
def test_run_arguments_of_the_wrong_type_or_value_are_named(tmp_path, kwargs, error, words):
    """cva.run's own arguments are checked before any work (a string "no" is not False; a chunk of 2.7 is not 2;
    cluster="local:0" would wait for workers that never come), the error naming the argument; nothing written."""
    cfg = _base(tmp_path)
    with pytest.raises(error, match=re.escape(words)):
        cva.run(cfg, **{"progress": False, **kwargs})
    assert not (tmp_path / "out").exists()


def test_run_out_naming_a_file_is_refused(tmp_path):
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(rundir.RunDirectoryError, match="out: .*afile is a file, not a directory"):
        cva.run(_base(tmp_path), out=tmp_path / "afile", progress=False)
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("kwargs, error, words", [
    ({"paths": 0}, ValueError, "paths must be an integer >= 2, got 0"),
    ({"paths": 2.9}, ValueError, "paths must be an integer >= 2, got 2.9"),
    ({"paths": "abc"}, TypeError, "paths must be an integer >= 2, got 'abc'"),
    ({"out_of_sample": "no"}, TypeError, "out_of_sample must be True or False, got 'no'"),
])
def test_price_arguments_are_named(tmp_path, kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        cva.price(_base(tmp_path), **kwargs)


def test_a_chunk_larger_than_the_run_counts_only_its_paths(tmp_path):
    """chunk 10^9 on a run of 64 outer paths holds 64: the memory check passes and the run is the same."""
    small = cva.run(_base(tmp_path, {("output", "dir"): str(tmp_path / "a")}), progress=False)
    big = cva.run(_base(tmp_path, {("output", "dir"): str(tmp_path / "b")}), chunk=10 ** 9, progress=False)
    assert big.cva == small.cva and big.stderr == small.stderr


def test_a_threshold_or_mta_of_any_size_is_a_setting(tmp_path):
    """A CSA threshold (or MTA) is only compared, never summed: 1e300 means no calls, as 1e6 does here."""
    runs = [cva.run(_base(tmp_path, {("csa", "threshold"): h, ("csa", "minimum_transfer_amount"): h,
                                     ("output", "dir"): str(tmp_path / str(i))}), progress=False)
            for i, h in enumerate((1e6, 1e300))]
    assert np.isfinite(runs[1].cva) and runs[1].cva == runs[0].cva and runs[1].stderr == runs[0].stderr


@pytest.mark.parametrize("where, value, words", [
    (("simulation", "outer_paths"), "64", "simulation.outer_paths: must be an integer, got '64'"),
    (("run", "seed"), "7", "run.seed: must be an integer, got '7'"),
    (("simulation", "outer_antithetic"), "no", "simulation.outer_antithetic: must be true or false, got 'no'"),
    (("simulation", "control_variate"), 1, "simulation.control_variate: must be true or false, got 1"),
    (("market", "rate"), "0.02", "market.rate: must be a number, got '0.02'"),
])
def test_quoted_numbers_and_flags_are_refused(tmp_path, where, value, words):
    """Text where a number or a flag belongs is a mistake (a quoted "no" would read as true)."""
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_config(_base(tmp_path, {where: value}))


def test_a_float_with_an_exponent_from_yaml_safe_load_is_a_number(tmp_path):
    """yaml.safe_load (YAML 1.1) gives 1.0e5 as the text '1.0e5': taken as the number, as the project's loader reads
    the file itself."""
    cfg = _base(tmp_path)
    cfg["regression"] = yaml.safe_load("{cond_max: 1.0e5}")
    assert cfg["regression"]["cond_max"] == "1.0e5"
    assert load_config(cfg).regression.cond_max == 1e5


def test_integral_floats_and_numpy_values_are_taken(tmp_path):
    """chunk=64.0 or np.int64(64), paths=1e3, a numpy bool flag in a configuration: taken as the values they are."""
    a = cva.run(_base(tmp_path, {("output", "dir"): str(tmp_path / "a")}), chunk=64.0, progress=False)
    b = cva.run(_base(tmp_path, {("output", "dir"): str(tmp_path / "b")}), chunk=np.int64(64), progress=False)
    assert a.cva == b.cva
    assert cva.price(_base(tmp_path), paths=1e3).attrs["paths"] == 1000
    assert load_config(_base(tmp_path, {("simulation", "outer_antithetic"): np.False_})).simulation.outer_antithetic \
        is False
    with pytest.raises(ConfigError, match="market.rate: must be a number, got "):
        load_config(_base(tmp_path, {("market", "rate"): np.True_}))


@pytest.mark.parametrize("text, value", [("rate: -.5e-1", -0.05), ("rate: .5e-1", 0.05), ("rate: 5e-2", 0.05),
                                         ("rate: 5.0e-2", 0.05)])
def test_floats_with_an_exponent_are_numbers_in_a_file_and_from_safe_load(tmp_path, text, value):
    path = tmp_path / "c.yaml"
    cfg = _base(tmp_path)
    del cfg["market"]["rate"]
    path.write_text(yaml.safe_dump(cfg).replace("market:\n", f"market:\n  {text}\n"))
    assert load_config(path).market.rate == value
    cfg["market"]["rate"] = yaml.safe_load(text)["rate"]
    assert load_config(cfg).market.rate == value
