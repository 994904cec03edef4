"""cva bench: the timed runs are the nested CVA of the config (same numbers as ``cva run``), their
timings are reported, and the command line's mistakes exit 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import cva
from cva.bench import bench, with_paths
from cva.cli import main
from cva.engine.nested import STAGES

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
QUICKSTART = CONFIGS / "quickstart.yaml"
OUTER, INNER = 48, 32


def quickstart_regressions_per_path():
    """Regressions per outer path of the quickstart, counted from the config: its one Bermudan contract,
    at each grid date before its maturity, one regression per later exercise date but the last."""
    cfg = with_paths(QUICKSTART)
    (bermudan,) = [c for c in cfg.portfolio if c.style == "bermudan"]
    grid = np.union1d(cfg.exposure_times(), bermudan.exercise_times())
    ex = bermudan.exercise_times()
    return sum(max(int((ex > t + 1e-12).sum()) - 1, 0) for t in grid if t < ex[-1] - 1e-12)


def test_bench_runs_are_the_nested_cva(tmp_path):
    df = bench(QUICKSTART, backend="cpu", outer=OUTER, inner=INNER, repeat=2)
    ref = cva.run(with_paths(QUICKSTART, OUTER, INNER), out=tmp_path, backend="cpu", progress=False)
    assert list(df["run"]) == [1, 2] and not df["first"].any()                       # no compilation on the CPU
    np.testing.assert_array_equal(df["cva"], ref.cva)                                 # same seed, same numbers
    np.testing.assert_array_equal(df["stderr"], ref.stderr)
    assert df.attrs["outer_paths"] == OUTER and df.attrs["inner_paths"] == INNER
    assert df.attrs["backend"] == "cpu" and df.attrs["method_mix"] == ref.summary["solver"]["method_mix"]
    assert (df["systems"] == OUTER * quickstart_regressions_per_path()).all()
    # the timings are reported (finite, non-negative), not compared with each other: a comparison of
    # wall-clock times depends on the machine's load, and one of them failed this test once
    stages = df[[f"{s}_seconds" for s in STAGES] + ["engine_seconds", "seconds"]].to_numpy()
    assert np.isfinite(stages).all() and (stages >= 0).all()
    np.testing.assert_allclose(df["outer_paths_per_s"], OUTER / df["engine_seconds"], rtol=1e-12)
    np.testing.assert_allclose(df["solve_systems_per_s"], df["systems"] / df["solve_seconds"], rtol=1e-12)


@pytest.mark.parametrize("repeat", (0, -1, 1.5, True))
def test_bench_repeat_must_be_a_positive_integer(repeat):
    with pytest.raises(ValueError, match="repeat"):
        bench(QUICKSTART, backend="cpu", outer=OUTER, inner=INNER, repeat=repeat)


def test_with_paths_validates_the_override():
    with pytest.raises(ValueError, match="simulation.outer_paths"):
        with_paths(QUICKSTART, outer=1)


def test_cli_bench_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", str(QUICKSTART), "--backend", "cpu", "--outer", str(OUTER), "--inner", str(INNER),
            "--repeat", "2", "--json", str(out)]
    assert main(argv) == 0
    stdout, stderr = capsys.readouterr()
    lines = stdout.strip().splitlines()
    assert lines[0].startswith("cva bench quickstart: cpu") and f"{OUTER} outer x {INNER} inner" in lines[0]
    assert [ln.split()[0] for ln in lines[2:4]] == ["1", "2"]
    doc = json.loads(out.read_text())
    assert doc["config"] == str(QUICKSTART) and len(doc["runs"]) == 2
    assert lines[4].startswith(f"CVA = {doc['runs'][-1]['cva']:.6g} +- ")
    assert lines[-1] == f"wrote {out}"
    assert stderr == ""


@pytest.mark.parametrize("extra, word", [
    (["--repeat", "0"], "--repeat"),
    (["--outer", "1"], "--outer"),
    (["--inner", "x"], "--inner"),
    (["--backend", "tpu"], "--backend"),
    (["--json", "/no/such/dir/b.json"], "does not exist"),
])
def test_cli_bench_mistakes_exit_2(extra, word, capsys):
    assert main(["bench", str(QUICKSTART), "--backend", "cpu", *extra]) == 2
    _, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and word in err and "Traceback" not in err


def _one_call(tmp_path, more=""):
    """A config of one European call on one asset (closed form along the paths), with ``more`` YAML."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("market: {spot: 100, vol: 0.2}\n"
                   "portfolio: [{style: european, payoff: call, underlying: {asset: 0}, strike: 100, maturity: 1}]\n"
                   + more)
    return cfg


def test_cli_bench_needs_a_counterparty(tmp_path, capsys):
    cfg = _one_call(tmp_path)
    assert main(["bench", str(cfg), "--backend", "cpu"]) == 2
    _, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "counterparty" in err


def test_cli_bench_without_regressions(tmp_path, capsys):
    """A netting set of one-asset Europeans (closed form): no regression, no solver rate."""
    cfg = _one_call(tmp_path, "counterparty: {recovery: 0.4, hazard_rate: 0.02}\n"
                              "simulation: {dates: 4, outer_paths: 64, inner_paths: 8}\n")
    assert main(["bench", str(cfg), "--backend", "cpu", "--repeat", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[2].split()[4] == "-" and " 0 regression systems" in lines[3]


def test_bench_scale_reports_the_bytes_a_task_sends_back(tmp_path, monkeypatch):
    """benchmarks/bench_scale.py's bytes per task are those of the chunk's values as a task returns them (read from
    the chunk file's header), not of the netted values: a small desk's first chunk, against the values loaded."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_scale
    from bench_desk import desk

    from cva.io import rundir

    cfg = desk(2, 3, 12, 2, 4, 16, 8, "cpu", "float32", False)
    res = cva.run(cfg, out=tmp_path / "run", progress=False, chunk=8, keep_chunks=True)
    level = len(res.levels) - 1
    (values, _), _ = rundir.load_chunks(tmp_path / "run", res.summary["config_hash"], level)
    assert bench_scale._chunk_bytes(tmp_path / "run", level) == values.nbytes
    netted = np.prod(res.levels[-1].sets.shape[2:])                         # a path's netted values per inner set
    assert values.shape[:2] == (7, 8) and values.shape[-1] > netted and values.dtype == np.float32


def test_bench_scale_row_is_the_median_run(tmp_path, monkeypatch):
    """benchmarks/bench_scale.py's row is the run of median engine seconds among its repeats, lists them all, and
    says whether every run was bitwise the reference (a run of another seed is not)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_scale
    from bench_desk import desk

    cfg = desk(2, 3, 12, 2, 4, 16, 8, "cpu", "float32", False)
    res, row = bench_scale.median_of(cfg, 3)
    runs = row["engine_seconds_runs"]
    assert len(runs) == 3 and row["engine_seconds"] == sorted(runs)[1] and row["bitwise"] is True
    other, _ = bench_scale.timed(desk(2, 3, 12, 2, 4, 16, 8, "cpu", "float32", False, seed=6))
    assert bench_scale.median_of(cfg, 2, ref=other)[1]["bitwise"] is False
    assert bench_scale.median_of(cfg, 1, ref=res)[1]["bitwise"] is True
