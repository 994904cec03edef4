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


@pytest.mark.parametrize("name", ["american_put.yaml", "max_call.yaml"])
def test_validate_ok(name, capsys):
    path = str(CONFIGS / name)
    assert main(["validate", path]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{path}: ok (") and err == ""


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
                   f"simulation: {{dates: 2, outer_paths: 8, inner_paths: 4}}\noutput: {{dir: {tmp_path / 'o'}}}\n")
    assert cli_main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tenor 2" in err[0] and "Traceback" not in err[0]
