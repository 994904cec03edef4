"""The run directory cannot be corrupted: its lock, the refused overwrite, foreign chunks, failed
writes, summary.json written last, the chunk files removed after a complete run, the sizes, and a
condition sample that does not depend on the chunking."""

import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import yaml

import cva
from cva.cli import main
from cva.engine import nested
from cva.io import report, rundir
from cva.xva import measures


def _config(tmp_path, name, seed=11, outer=240):
    port = [{"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4},
            {"style": "european", "payoff": "call", "underlying": {"asset": 1}, "strike": 100.0, "maturity": 0.5,
             "quantity": -1.0}]
    return {"run": {"name": "t", "seed": seed, "backend": "cpu"},
            "market": {"spot": [100.0, 95.0], "vol": [0.25, 0.3], "rate": 0.03, "correlation": 0.5},
            "portfolio": port, "counterparty": {"recovery": 0.4, "hazard_rate": 0.03},
            "simulation": {"dates": 4, "outer_paths": outer, "inner_paths": 48, "basis": "linear"},
            "output": {"dir": str(tmp_path / name)}}


def _interrupt_at(monkeypatch, target, name, at):
    """Make ``target.name`` raise KeyboardInterrupt on its ``at``-th call (1-based)."""
    calls = {"n": 0}
    original = getattr(target, name)

    def wrapped(*args, **kw):
        calls["n"] += 1
        if calls["n"] == at:
            raise KeyboardInterrupt
        return original(*args, **kw)

    monkeypatch.setattr(target, name, wrapped)
    return original


def test_a_run_directory_in_use_is_refused(tmp_path, capsys):
    """Another process holds the directory's lock: the run is refused in one line, nothing is written."""
    cfg = _config(tmp_path, "busy")
    out = tmp_path / "busy"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from filelock import FileLock
            with FileLock({str(out / rundir.LOCK)!r}):
                print("locked", flush=True)
                sys.stdin.read()
            """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(rundir.RunDirectoryError, match="is in use by another run"):
            cva.run(cfg, progress=False)
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(cfg))
        assert main(["run", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is in use by another run" in err[0]
        assert sorted(p.name for p in out.iterdir()) == [rundir.LOCK]
    finally:
        holder.communicate("")
    assert cva.run(cfg, progress=False).out_dir == out                  # free again once the holder is gone


def test_a_fresh_run_into_a_non_empty_directory_needs_overwrite(tmp_path, capsys):
    cfg = _config(tmp_path, "full")
    first = cva.run(cfg, progress=False)
    notes = tmp_path / "full" / "my_notes.txt"
    notes.write_text("the user's own file")
    with pytest.raises(rundir.RunDirectoryError, match="is not empty"):
        cva.run(cfg, progress=False)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--overwrite" in err[0]
    before = (tmp_path / "full" / "summary.json").read_bytes()
    assert json.loads(before)["cva"] == first.cva                       # untouched by the refused runs
    cfg["run"]["seed"] = 12
    again = cva.run(cfg, progress=False, overwrite=True)
    assert notes.read_text() == "the user's own file"                   # not ours: left alone
    assert json.loads((tmp_path / "full" / "summary.json").read_text())["cva"] == again.cva != first.cva
    assert main(["run", str(path), "--overwrite"]) == 0
    assert main(["run", str(path), "--overwrite", "--resume"]) == 2


def test_overwrite_refuses_a_directory_that_holds_no_run(tmp_path, capsys):
    """Files named as a run's outputs in a directory without a run's run.json are the user's: --overwrite refuses
    (one line), and every file stays as it was; with a foreign run.json too."""
    cfg = _config(tmp_path, "mine")
    out = tmp_path / "mine"
    (out / "exposures").mkdir(parents=True)
    mine = {out / "trades.csv": "id,style\nT1,european\n", out / "summary.json": "{}", out / "exposures" / "a.csv": "x"}
    for path, text in mine.items():
        path.write_text(text)
    with pytest.raises(rundir.RunDirectoryError, match="holds no earlier run"):
        cva.run(cfg, progress=False, overwrite=True)
    (out / rundir.MANIFEST).write_text('{"not": "a run"}')
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no earlier run" in err[0] and "--overwrite" in err[0]
    assert all(p.read_text() == text for p, text in mine.items())
    assert (out / rundir.MANIFEST).read_text() == '{"not": "a run"}'


def test_a_directory_left_by_a_failed_start_is_not_the_users(tmp_path):
    """A start that failed before its run.json (a full disk) leaves .lock and an empty chunks/: a run goes ahead
    there, with or without --overwrite."""
    cfg = _config(tmp_path, "left")
    (tmp_path / "left" / rundir.CHUNKS).mkdir(parents=True)
    (tmp_path / "left" / rundir.LOCK).write_text("")
    assert np.isfinite(cva.run(cfg, progress=False).cva)


def test_a_chunk_of_another_run_is_refused_on_resume(tmp_path, monkeypatch):
    a, b = _config(tmp_path, "a"), _config(tmp_path, "b", seed=12)
    original = _interrupt_at(monkeypatch, nested, "chunk_values", 3)
    with pytest.raises(KeyboardInterrupt):
        cva.run(a, chunk=60, progress=False)
    monkeypatch.setattr(nested, "chunk_values", original)
    _interrupt_at(monkeypatch, nested, "chunk_values", 3)
    with pytest.raises(KeyboardInterrupt):
        cva.run(b, chunk=60, progress=False)
    monkeypatch.setattr(nested, "chunk_values", original)
    chunk0 = rundir.chunk_path(tmp_path / "a", 0, 0)
    own = chunk0.read_bytes()
    chunk0.write_bytes(rundir.chunk_path(tmp_path / "b", 0, 0).read_bytes())        # another config's chunk
    with pytest.raises(rundir.ResumeError, match="level0_00000.npz is not a chunk of this run"):
        cva.run(a, resume=True, progress=False)
    chunk0.write_bytes(own)
    rundir.chunk_path(tmp_path / "a", 0, 1).write_bytes(own)                        # this run's, wrong index
    with pytest.raises(rundir.ResumeError, match="level0_00001.npz is not a chunk of this run"):
        cva.run(a, resume=True, progress=False)


@pytest.mark.parametrize("before", [None, "netting-set aggregate"])
def test_chunks_of_another_format_are_refused_on_resume(tmp_path, monkeypatch, before):
    """A run directory whose run.json does not say its chunks hold this aggregate (one written when the chunks held
    the value cube itself: no ``chunk_values``; or the aggregate with every netting set's gross values) is refused
    in one line, not read."""
    a = _config(tmp_path, "a")
    original = _interrupt_at(monkeypatch, nested, "chunk_values", 3)
    with pytest.raises(KeyboardInterrupt):
        cva.run(a, chunk=60, progress=False)
    monkeypatch.setattr(nested, "chunk_values", original)
    manifest = tmp_path / "a" / rundir.MANIFEST
    old = json.loads(manifest.read_text())
    assert old["chunk_values"] == rundir.CHUNK_VALUES
    if before is None:
        del old["chunk_values"]
    else:
        old["chunk_values"] = before
    manifest.write_text(json.dumps(old))
    with pytest.raises(rundir.ResumeError, match=re.escape(f"chunk_values was {before!r}, now "
                                                           f"{rundir.CHUNK_VALUES!r}")):
        cva.run(a, resume=True, progress=False)


@pytest.mark.parametrize("values", [np.arange(24, dtype=np.float32).reshape(2, 3, 4),
                                    np.asfortranarray(np.linspace(-1.0, 1.0, 12).reshape(3, 4)),
                                    np.arange(10.0)[::3], np.zeros((1, 0, 5)), np.array([np.nan, np.inf, -0.0])])
def test_a_chunk_file_is_numpys_npz_of_its_values(tmp_path, values):
    """A chunk file (written with its values in one write) is what numpy.load reads as numpy.savez's: the values
    bitwise, in their dtype and shape (strided and Fortran-ordered arrays too), and the stamped meta."""
    (tmp_path / rundir.CHUNKS).mkdir()
    rundir.save_chunk(tmp_path, 1, 0, values, {"l0": 5}, "hash")
    with np.load(rundir.chunk_path(tmp_path, 1, 0), allow_pickle=False) as z:
        assert sorted(z.files) == ["meta", "values"]
        got, meta = z["values"], json.loads(str(z["meta"]))
    assert got.dtype == values.dtype and got.shape == values.shape
    assert got.tobytes() == np.ascontiguousarray(values).tobytes()
    assert meta == {"config_hash": "hash", "level": 1, "index": 0, "l0": 5}
    [(again, _)] = rundir.load_chunks(tmp_path, "hash", 1)
    assert again.tobytes() == got.tobytes()


def test_a_chunk_files_arrays_are_its_own_members(tmp_path):
    """The arrays of a chunk (its statistics' samples) are members of the file beside the values and the JSON meta,
    read back bitwise under meta["arrays"]; names that are the chunk's own are refused."""
    (tmp_path / rundir.CHUNKS).mkdir()
    arrays = {"cond": np.array([1.5, np.pi, 1e300]), "cond_counts": np.array([2, 0, 1], dtype=np.int64),
              "design": np.arange(6.0).reshape(2, 3)}
    rundir.save_chunk(tmp_path, 0, 0, np.ones((1, 2, 3), dtype=np.float32), {"l0": 0}, "hash", arrays)
    with np.load(rundir.chunk_path(tmp_path, 0, 0), allow_pickle=False) as z:
        assert sorted(z.files) == ["cond", "cond_counts", "design", "meta", "values"]
    [(_, meta)] = rundir.load_chunks(tmp_path, "hash", 0)
    assert sorted(meta["arrays"]) == sorted(arrays)
    for name, a in arrays.items():
        assert meta["arrays"][name].dtype == a.dtype and meta["arrays"][name].tobytes() == a.tobytes()
    with pytest.raises(ValueError, match=r"^arrays: the names values and meta are the chunk's own, got \['meta'\]"):
        rundir.save_chunk(tmp_path, 0, 1, np.ones(2), {}, "hash", {"meta": np.ones(1)})


def test_a_failed_write_names_the_file_and_leaves_no_temporary(tmp_path, monkeypatch, capsys):
    cfg = _config(tmp_path, "disk")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))

    def full_disk(*args, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array_header_1_0", full_disk)      # (the file begun)
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    chunk0 = rundir.chunk_path(tmp_path / "disk", 0, 0)
    assert err[-1] == f"cva: cannot write {chunk0}: No space left on device"
    assert not list((tmp_path / "disk").rglob("*.tmp*"))


def test_summary_is_written_last_and_resume_finishes_a_cut_report(tmp_path, monkeypatch):
    cfg = _config(tmp_path, "cut")
    whole = cva.run(_config(tmp_path, "whole"), chunk=60, progress=False)
    assert json.loads((tmp_path / "whole" / "summary.json").read_text())["status"] == "complete"
    assert not (tmp_path / "whole" / rundir.CHUNKS).exists()                     # removed once complete
    written = []
    original = rundir.write_text

    def killed_at_the_report(p, text):
        written.append(p.name)
        if p.name == "report.html":
            raise KeyboardInterrupt                                              # a kill while the report is written
        original(p, text)

    monkeypatch.setattr(rundir, "write_text", killed_at_the_report)
    with pytest.raises(KeyboardInterrupt):
        cva.run(cfg, chunk=60, progress=False)
    monkeypatch.setattr(rundir, "write_text", original)
    assert "summary.json" not in written and not (tmp_path / "cut" / "summary.json").exists()
    assert rundir.read_summary_status(tmp_path / "cut") is None                 # detectably unfinished
    assert len(list((tmp_path / "cut" / rundir.CHUNKS).glob("level*_*.npz"))) == 4     # 240 paths, chunks of 60
    resumed = cva.run(cfg, resume=True, progress=False)
    np.testing.assert_array_equal(resumed.values, whole.values)
    assert resumed.solver_stats.equals(whole.solver_stats)
    with pytest.raises(rundir.ResumeError, match="the run is complete"):
        cva.run(cfg, resume=True, progress=False)


def test_an_interrupted_run_has_written_its_chunks_and_resumes_to_the_same_bits(tmp_path, monkeypatch):
    """The chunk files are written in the background while the next chunk is computed: an interrupt in the third
    chunk still leaves the first two written (the run waits for its writes on the way out), and the resumed run is
    bitwise the uninterrupted one."""
    whole = cva.run(_config(tmp_path, "whole"), chunk=60, progress=False)
    cfg = _config(tmp_path, "cut")
    original = _interrupt_at(monkeypatch, nested, "chunk_values", 3)
    with pytest.raises(KeyboardInterrupt):
        cva.run(cfg, chunk=60, progress=False)
    monkeypatch.setattr(nested, "chunk_values", original)
    chunks = sorted(p.name for p in (tmp_path / "cut" / rundir.CHUNKS).glob("level*_*.npz"))
    assert chunks == ["level0_00000.npz", "level0_00001.npz"]
    assert not list((tmp_path / "cut").rglob("*.tmp*"))
    resumed = cva.run(cfg, resume=True, progress=False)
    np.testing.assert_array_equal(resumed.values, whole.values)
    assert resumed.cva == whole.cva and resumed.stderr == whole.stderr


def test_keep_chunks(tmp_path):
    cva.run(_config(tmp_path, "keep"), chunk=100, progress=False, keep_chunks=True)
    chunks = sorted((tmp_path / "keep" / rundir.CHUNKS).glob("level*_*.npz"))
    assert [c.name for c in chunks] == ["level0_00000.npz", "level0_00001.npz", "level0_00002.npz"]


def test_summary_json_never_holds_a_non_finite_number(tmp_path, monkeypatch):
    """A result that overflows is an error naming it, never NaN / Infinity in summary.json."""
    cfg = _config(tmp_path, "inf")
    monkeypatch.setattr(measures, "cva_contributions", lambda P, *a: np.full(P.shape[0], np.inf))
    with pytest.raises(ValueError, match=r"results are not finite \(cva = (inf|nan), .*\): an input overflows"), \
            np.errstate(invalid="ignore"):
        cva.run(cfg, progress=False)
    assert not (tmp_path / "inf" / "summary.json").exists()


def test_condition_sample_does_not_depend_on_the_chunking(tmp_path):
    """The first nested.COND_SAMPLE outer paths give the condition sample, whatever the chunk size."""
    cfg = _config(tmp_path, "one", outer=2 * nested.COND_SAMPLE)
    one = cva.run(cfg, chunk=2 * nested.COND_SAMPLE, progress=False)
    cfg["output"]["dir"] = str(tmp_path / "many")
    many = cva.run(cfg, chunk=37, progress=False)
    assert one.solver_stats["cond_samples"].max() > 0
    assert one.solver_stats.equals(many.solver_stats)


@pytest.mark.parametrize("name, limit_mb", [("quickstart", 5), ("american_put", 20)])
def test_run_directory_size(name, limit_mb, tmp_path):
    """The shipped configs' run directories stay small: their size does not grow with the outer paths past
    the condition sample (the chunks are removed), so a run at 512 outer paths bounds the full one."""
    cfg = yaml.safe_load(open(f"configs/{name}.yaml"))
    cfg["run"]["backend"] = "cpu"
    cfg["simulation"]["outer_paths"] = 2 * nested.COND_SAMPLE
    cfg["simulation"]["inner_paths"] = 64
    cfg["output"] = {"dir": str(tmp_path / name)}
    cva.run(cfg, progress=False)
    size = sum(p.stat().st_size for p in (tmp_path / name).rglob("*") if p.is_file())
    assert size < limit_mb * 2**20, size
    assert set(p.name for p in (tmp_path / name).iterdir()) == set(report.OUTPUTS) | {rundir.MANIFEST, rundir.LOCK}
