"""cva.cli: `cva validate` and the error paths of `cva price` (exit 2, one line per problem, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cva.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"

BAD_YAML = """\
market:
  spot: [100, 100]
  vols: 0.2
portfolio:
  - {style: european, payoff: put, underlying: {asset: 2}, strike: -5, maturity: 1, exercise_dates: 5}
"""
BAD_KEYS = ["market.vol", "market.vols", "portfolio[0].underlying.asset", "portfolio[0].strike",
            "portfolio[0].exercise_dates"]


@pytest.fixture
def bad_config(tmp_path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_YAML)
    return path


def check_problems(stderr: str, path, keys):
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr
    assert len(lines) == len(keys), lines
    for line, key in zip(lines, keys, strict=True):
        assert line.startswith(f"{path}: {key}: "), line


@pytest.mark.parametrize("name", ["american_put.yaml", "max_call.yaml", "desk.yaml"])
def test_validate_ok(name, capsys):
    """A valid file: ok, and the run's estimated cost as the run would log it (a desk's too; a file for `cva price`
    only, without a counterparty, has no run to cost)."""
    from cva.backend import resolve_backend
    from cva.engine.plan import describe_cost, run_cost
    from cva.io.config import load_config

    path = str(CONFIGS / name)
    assert main(["validate", path]) == 0
    out, err = capsys.readouterr()
    cfg = load_config(path)
    kind = "cpu" if resolve_backend(cfg.run.backend)[0].__name__ == "numpy" else "gpu"
    cost = f"; a run: {describe_cost(run_cost(cfg, kind))}" if cfg.counterparty is not None or cfg.is_desk else ""
    assert out == f"{path}: ok ({cfg.summary()}){cost}\n" and err == ""


def test_validate_reports_every_problem(bad_config, capsys):
    assert main(["validate", str(bad_config)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    check_problems(err, bad_config, BAD_KEYS)


def test_validate_missing_file(tmp_path, capsys):
    path = tmp_path / "missing.yaml"
    assert main(["validate", str(path)]) == 2
    _, err = capsys.readouterr()
    assert err.strip() == f"{path}: file not found"


def test_validate_yaml_syntax_error(tmp_path, capsys):
    path = tmp_path / "syntax.yaml"
    path.write_text("market:\n  spot: 1\n   vol: 2\n")
    assert main(["validate", str(path)]) == 2
    _, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "line 3" in err


def test_price_invalid_config(bad_config, capsys):
    assert main(["price", str(bad_config), "--backend", "cpu"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    check_problems(err, bad_config, BAD_KEYS)


def test_price_missing_file(tmp_path, capsys):
    path = tmp_path / "missing.yaml"
    assert main(["price", str(path), "--json", str(tmp_path / "out.json")]) == 2
    _, err = capsys.readouterr()
    assert err.strip() == f"{path}: file not found"
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("argv", [
    ["price", "x.yaml", "--paths", "1"],
    ["price", "x.yaml", "--paths", "lots"],
    ["price", "x.yaml", "--backend", "tpu"],
    ["frobnicate"],
    [],
])
def test_bad_options_exit_2(argv, capsys):
    assert main(argv) == 2
    _, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_price_json_directory_missing(tmp_path, capsys):
    assert main(["price", str(CONFIGS / "american_put.yaml"), "--json", str(tmp_path / "no" / "p.json")]) == 2
    _, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "does not exist" in err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "validate" in capsys.readouterr().out


def test_python_m_cva_subprocess(bad_config):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "cva", "validate", str(bad_config)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    check_problems(proc.stderr, bad_config, BAD_KEYS)

    ok = subprocess.run([sys.executable, "-m", "cva", "validate", str(CONFIGS / "max_call.yaml")],
                        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert ok.returncode == 0 and ": ok (" in ok.stdout and ok.stderr == ""


def test_ctrl_c_exits_130(monkeypatch, capsys):
    import cva.cli

    def interrupted(_source):
        raise KeyboardInterrupt

    monkeypatch.setattr(cva.cli, "load_config", interrupted)
    assert main(["validate", "x.yaml"]) == 130
    _, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "interrupted" in err


def test_engine_errors_on_a_valid_config_are_one_line(tmp_path, capsys):
    """A config that validates but that the engine cannot run (an inverted CDS curve) exits 2, one line."""
    from cva.cli import main as cli_main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("market: {spot: 100, vol: 0.2}\n"
                   "portfolio: [{style: european, payoff: call, underlying: {asset: 0}, strike: 100, maturity: 1}]\n"
                   "counterparty: {recovery: 0.4, cds_spreads: {1: 0.05, 2: 0.001}}\n"
                   f"simulation: {{dates: 2, outer_paths: 8, inner_paths: 8}}\noutput: {{dir: {tmp_path / 'o'}}}\n")
    assert cli_main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tenor 2" in err[0] and "Traceback" not in err[0]


# ---------------------------------------------------------------------------------------------
# problems found before any work: the run directory, the --json file, the options


RUN_YAML = """\
run: {{name: t, seed: 3, backend: cpu}}
market: {{spot: 100, vol: 0.2, rate: 0.02}}
portfolio:
  - {{style: bermudan, payoff: put, underlying: {{asset: 0}}, strike: 100, maturity: 1, exercise_dates: 2}}
counterparty: {{recovery: 0.4, hazard_rate: 0.02}}
simulation: {{dates: 2, outer_paths: 8, inner_paths: 8, pricing_paths: 64}}
output: {{dir: {out}}}
"""


@pytest.fixture
def run_config(tmp_path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(RUN_YAML.format(out=tmp_path / "out"))
    return path


@pytest.fixture
def no_engine(monkeypatch):
    """The engines fail the test if they are called: the problem must be found before any work."""
    import cva.bench
    import cva.engine.pricing
    import cva.runner

    def called(*args, **kw):
        raise AssertionError("the engine ran")

    for module, name in ((cva.runner, "run"), (cva.engine.pricing, "price"), (cva.bench, "bench")):
        monkeypatch.setattr(module, name, called)


def one_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_unusable_run_directory(run_config, tmp_path, capsys, no_engine):
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    assert main(["run", str(run_config), "--out", str(afile)]) == 2
    assert one_line(capsys) == f"--out {afile}: cannot use it as the run directory: Not a directory"
    run_config.write_text(RUN_YAML.format(out=afile / "x"))
    assert main(["run", str(run_config)]) == 2
    line = one_line(capsys)
    assert line.startswith(f"{run_config}: output.dir {afile / 'x'}: ") and line.endswith("Not a directory")
    assert main(["run", str(run_config), "--out", ""]) == 2
    assert "--out: must not be empty" in one_line(capsys)


def test_json_target_checked_before_any_work(run_config, tmp_path, capsys, no_engine):
    assert main(["price", str(run_config), "--json", str(tmp_path)]) == 2
    assert one_line(capsys) == f"--json {tmp_path}: is a directory, not a file"
    if Path("/proc").is_dir():                                  # a directory no one, not even root, writes in
        assert main(["bench", str(run_config), "--json", "/proc/b.json"]) == 2
        assert one_line(capsys).startswith("--json /proc/b.json: cannot write: ")


@pytest.mark.parametrize("argv, words", [
    (["run", "{cfg}", "--bogus"], ["cva run: unrecognized arguments: --bogus", "see cva run --help"]),
    (["run", "{cfg}", "--chunk", "1"], ["--chunk", ">= 2"]),
    (["price", "{cfg}", "--paths", "99999999999999999999999"], ["--paths", "<= 4294967296"]),
])
def test_option_errors_name_the_option(argv, words, run_config, capsys, no_engine):
    assert main([a.format(cfg=run_config) for a in argv]) == 2
    line = one_line(capsys)
    assert all(w in line for w in words), line


def test_chunk_help_says_where_the_default_comes_from(capsys):
    assert main(["run", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "simulation.chunk, else with --resume the interrupted run's, else from free memory" in text


# ---------------------------------------------------------------------------------------------
# problems during the work: memory, Ctrl-C, output that cannot be written


def test_out_of_memory_names_the_path_count(run_config, capsys, monkeypatch):
    import numpy as np

    from cva.engine import nested
    from cva.market.model import BlackScholes

    def too_big(*args, **kw):
        raise MemoryError("Unable to allocate 268. GiB for an array")

    monkeypatch.setattr(BlackScholes, "sample", too_big)
    assert main(["price", str(run_config), "--paths", "3000000000"]) == 2
    line = one_line(capsys)
    assert line.startswith(f"{run_config}: ") and "3000000000 paths (--paths)" in line and "268. GiB" in line
    assert main(["price", str(run_config)]) == 2
    assert "64 paths (simulation.pricing_paths)" in one_line(capsys)

    monkeypatch.setattr(nested, "chunk_values", too_big)
    assert main(["run", str(run_config), "--chunk", "4"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]                                         # after the run's log line
    assert line.startswith(f"{run_config}: out of memory")
    assert "level 0 (4 outer x 8 inner paths" in line and "simulation.inner_paths" in line and "--chunk" in line
    assert np.isfinite(float(line.split("about ")[1].split(" GiB")[0]))


def test_interrupt_hint_repeats_the_options(run_config, tmp_path, capsys, monkeypatch):
    from cva import runner

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", interrupted)
    out = tmp_path / "my out"
    assert main(["run", str(run_config), "--out", str(out), "--backend", "cpu", "--chunk", "4"]) == 130
    err = capsys.readouterr().err
    assert f"cva run {run_config} --out '{out}' --resume --backend cpu --chunk 4" in err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_output_to_a_full_disk_is_one_line(run_config):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "cva", "validate", str(run_config)], stdout=full,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "cva: cannot write the output: No space left on device"


def test_validate_a_pricing_only_file_costs_no_run(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text("market: {spot: 100, vol: 0.2}\nportfolio:\n  - {style: bermudan, payoff: put, underlying: "
                    "{asset: 0}, strike: 100, maturity: 1, exercise_dates: 4}\n")
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: ok (") and "a run:" not in out
