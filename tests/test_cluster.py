"""Outer chunks as dask.distributed tasks on a LocalCluster of two worker processes: bitwise the single-process run
(the quickstart and a desk), a worker killed mid-run changes nothing, a client interrupted mid-run resumes to the
same bits, an unreachable scheduler is one line."""

import os
import signal

import numpy as np
import pytest
import yaml

import cva
from cva.cli import main
from cva.engine import cluster, nested
from cva.engine.cluster import ClusterError
from cva.io import rundir
from cva.io.config import ConfigError, load_config

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def _quickstart(tmp_path, name, outer=256):
    cfg = yaml.safe_load(open("configs/quickstart.yaml"))
    cfg["run"]["backend"] = "cpu"
    cfg["simulation"].update(outer_paths=outer, inner_paths=32, pricing_paths=1000)
    cfg["output"] = {"dir": str(tmp_path / name)}
    return cfg


def _same(a, b):
    assert a.cva == b.cva and a.stderr == b.stderr and a.ci == b.ci
    for x, y in zip(a.levels, b.levels, strict=True):
        np.testing.assert_array_equal(x.sets, y.sets)
    assert a.exposures.equals(b.exposures)
    assert a.solver_stats.drop(columns=[]).equals(b.solver_stats)


def test_quickstart_on_two_workers_is_bitwise_one_process(tmp_path, client):
    one = cva.run(_quickstart(tmp_path, "one"), chunk=40, progress=False)
    two = cva.run(_quickstart(tmp_path, "two"), chunk=40, progress=False, cluster=client)
    _same(one, two)
    other = cva.run(_quickstart(tmp_path, "three"), chunk=97, progress=False, cluster=client)   # any chunking
    _same(one, other)


def test_a_desk_with_sensitivities_on_two_workers_is_bitwise_one_process(tmp_path, client):
    cfg = load_config("configs/desk.yaml").to_dict()
    cfg["run"]["backend"] = "cpu"
    cfg["simulation"].update(outer_paths=64, inner_paths=16, dates=4, pricing_paths=1000)
    cfg["sensitivities"] = {"rate": 0.0001, "hazard": 0.0001}                  # the bumped runs are tasks too
    one = cva.run({**cfg, "output": {"dir": str(tmp_path / "one")}}, chunk=32, progress=False)
    two = cva.run({**cfg, "output": {"dir": str(tmp_path / "two")}}, chunk=32, progress=False, cluster=client)
    assert one.cva == two.cva and one.stderr == two.stderr
    assert one.summary["counterparties"] == two.summary["counterparties"]
    assert one.summary["sensitivities"] == two.summary["sensitivities"]
    assert one.summary["trades"] == two.summary["trades"]


def test_a_worker_killed_mid_run_changes_nothing(tmp_path, client):
    one = cva.run(_quickstart(tmp_path, "one"), chunk=16, progress=False)
    pids = client.run(os.getpid)
    killed = []

    def log(line):
        if "cluster task" in line and not killed:                  # the first chunk is back: kill a worker
            address, pid = sorted(pids.items())[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(address)

    two = cva.run(_quickstart(tmp_path, "two"), chunk=16, progress=False, log=log, cluster=client)
    assert killed
    _same(one, two)
    client.wait_for_workers(2, timeout=60)                           # the nanny restarted it


def test_resume_after_an_interrupted_client(tmp_path, client):
    full = cva.run(_quickstart(tmp_path, "full"), chunk=16, progress=False)
    seen = []

    def log(line):
        if "cluster task" in line:
            seen.append(line)
            if len(seen) == 3:
                raise KeyboardInterrupt

    cfg = _quickstart(tmp_path, "part")
    with pytest.raises(KeyboardInterrupt):
        cva.run(cfg, chunk=16, progress=False, log=log, cluster=client)
    resumed = cva.run(cfg, resume=True, progress=False, cluster=client)
    _same(full, resumed)


def test_a_failed_chunk_write_on_the_client_is_raised(tmp_path, client, monkeypatch):
    """The client writes chunk files in threads while results arrive: a failed write still stops the run with
    the file's error (a full disk), not a chunk silently missing from the run directory, and at the latest when
    the next result arrives after the writes queued (the other tasks cancelled, not all computed first)."""
    def full(out_dir, level, index, *args):
        raise OSError(28, "No space left on device", str(rundir.chunk_path(out_dir, level, index)))

    monkeypatch.setattr(rundir, "save_chunk", full)
    received = []

    def log(line):
        if "cluster task" in line:
            received.append(line)

    with pytest.raises(OSError, match="No space left on device"):
        cva.run(_quickstart(tmp_path, "full", outer=128), chunk=16, progress=False, log=log, cluster=client)
    assert len(received) <= nested.SAVE_THREADS           # stopped by the next result, not after all 8 chunks


def test_a_local_cluster_started_by_the_run_gathers_directly_and_bitwise(tmp_path, monkeypatch):
    """``cluster="local:2"`` starts its own cluster, whose client takes each result straight from its worker (not
    through the scheduler: half the transfers), with the same bits as one process."""
    seen = []
    original = distributed.Client._gather

    async def recorded(self, futures, *args, **kwargs):
        seen.append(self.direct_to_workers)
        return await original(self, futures, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "_gather", recorded)
    one = cva.run(_quickstart(tmp_path, "one", outer=64), chunk=16, progress=False)
    two = cva.run(_quickstart(tmp_path, "two", outer=64), chunk=16, progress=False, cluster="local:2")
    _same(one, two)
    assert len(seen) >= 4 and all(d is True for d in seen)                     # the 4 chunks, each directly


def test_a_gpu_runs_chunks_fit_the_workers_least_free_gpu_memory(tmp_path, client, monkeypatch):
    """On a cluster a GPU run's chunk is sized by the workers' GPUs (the least free memory among them), not by the
    client's; workers that cannot tell (no GPU, no CuPy) are one line naming the backend."""
    from cva.engine.plan import GPU_MEMORY_FRACTION, build_plan, bytes_per_outer_path, chunk_size

    def without_cupy():                                     # a CPU worker (as in CI, wherever the test runs)
        raise ModuleNotFoundError("No module named 'cupy'")

    monkeypatch.setattr(cluster, "_free_device_bytes", without_cupy)
    with pytest.raises(ClusterError, match=r"^backend gpu: the cluster's workers cannot give their free GPU memory "
                                           r"\(No module named 'cupy'\)"):
        cluster.Executor(client, load_config(_quickstart(tmp_path, "x")), "gpu").free_device_bytes()
    free = {w: (i + 3) * 2**30 for i, w in enumerate(sorted(client.scheduler_info()["workers"]))}

    def fake(dask_worker):                                  # (client.run passes the worker it runs on)
        return free[dask_worker.address]

    monkeypatch.setattr(cluster, "_free_device_bytes", fake)
    cfg = load_config(_quickstart(tmp_path, "x", outer=1 << 20))
    assert cluster.Executor(client, cfg, "gpu").free_device_bytes() == 3 * 2**30
    plan = build_plan(cfg)
    per_path = bytes_per_outer_path(plan, cfg.d, 4)
    device = object()                                  # not numpy: a GPU run, whose own memory is not asked for
    fits = int(GPU_MEMORY_FRACTION * 3 * 2**30 // per_path)                # the paths 3 GiB hold
    N = cfg.simulation.outer_paths
    for workers in (1, 2, 5, 7):                                  # (12 chunks fit: 15 and 14 for 5 and 7 workers)
        fewest = -(-N // fits)                                         # the fewest chunks 3 GiB allow
        n = chunk_size(plan, cfg.d, 4, device, workers, 3 * 2**30)
        assert n <= fits and -(-N // n) == -(-fewest // workers) * workers          # as many for each worker
    assert chunk_size(plan, cfg.d, 4, device, 2, 6 * 2**30) > 1.9 * chunk_size(plan, cfg.d, 4, device, 2, 3 * 2**30)
    assert chunk_size(plan, cfg.d, 4, device, 2, 2**50) == 1 << 19                      # a worker's share
    assert chunk_size(plan, cfg.d, 4, device, 3, 2**50) == -(-N // 3)
    assert chunk_size(plan, cfg.d, 4, device, None, 2**50) == N                         # one process: one chunk


def _small_desk(tmp_path, name, backend):
    cfg = load_config("configs/desk.yaml").to_dict()
    cfg["run"]["backend"] = backend
    cfg["simulation"].update(outer_paths=64, inner_paths=16, dates=4, pricing_paths=1000)
    return {**cfg, "output": {"dir": str(tmp_path / name)}}


def test_a_gpu_cluster_is_driven_by_a_client_without_a_gpu(tmp_path, monkeypatch):
    """The workers resolve the backend, each on its own machine, and price the trades at t = 0: a client without a
    GPU (a login node) runs a desk on a cluster of GPU workers, stood in for here by workers whose backend gpu (and
    auto) computes with numpy; the result is bitwise the CPU run's in one process, the client never resolved a
    backend, and workers that disagree, or cannot run the backend, are one line naming it."""
    def stand_in_gpu():                                        # on a worker: "gpu" and "auto" computed by numpy
        import cva.backend
        import cva.engine.pricing

        real = cva.backend.resolve_backend

        def resolve(name="auto"):
            return (np, "gpu (stand-in)") if name in ("gpu", "auto") else real(name)

        cva.backend.resolve_backend = cva.engine.pricing.resolve_backend = resolve

    def no_gpu_here(name="auto"):
        raise AssertionError(f"the client resolved backend {name!r}")

    def without_gpu():                                         # on a worker: no GPU, wherever the test runs
        import cva.backend

        cva.backend.cupy_available = lambda: False

    one = cva.run(_small_desk(tmp_path, "one", "cpu"), chunk=32, progress=False)
    monkeypatch.setattr(cva.runner, "resolve_backend", no_gpu_here)
    monkeypatch.setattr(cluster, "_free_device_bytes", lambda: 64 * 2**30)          # (asked of the workers)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            distributed.Client(lc) as c:
        c.run(without_gpu)
        with pytest.raises(ClusterError, match=r"^backend gpu: a worker of the cluster cannot run it \(backend 'gpu' "
                                               r"asked for, but CuPy finds no CUDA device"):
            cva.run(_small_desk(tmp_path, "none", "gpu"), chunk=32, progress=False, cluster=c)
        first = sorted(c.scheduler_info()["workers"])[0]
        c.run(stand_in_gpu, workers=[first])
        with pytest.raises(ClusterError, match=r"^backend auto: the cluster's workers disagree \(cpu \(numpy\) "
                                               r".*, gpu \(stand-in\)\): give every worker a GPU"):
            cva.run(_small_desk(tmp_path, "mixed", "auto"), chunk=32, progress=False, cluster=c)
        c.run(stand_in_gpu)
        for backend in ("gpu", "auto"):
            two = cva.run(_small_desk(tmp_path, backend, backend), chunk=32, progress=False, cluster=c)
            assert two.cva == one.cva and two.stderr == one.stderr
            assert two.summary["counterparties"] == one.summary["counterparties"]
            assert two.summary["trades"] == one.summary["trades"]                   # the t = 0 prices among them
            assert two.summary["backend"] == "gpu" and two.summary["device"] == "gpu (stand-in) on 2 workers"


def test_non_finite_values_are_found_where_they_are_computed(tmp_path, client):
    """A chunk's values are checked for NaN and Inf where they were computed (in the process, or on the worker
    before they travel: the client does not scan them), and either way the run stops with one error naming the
    level and the outer paths."""
    from cva.engine.plan import build_plan
    from cva.market.model import BlackScholes

    cfg = load_config(_quickstart(tmp_path, "x", outer=64))
    plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)

    def overflowing(V, revalue):                                   # every value non-finite (0 x inf: NaN)
        return V * np.inf

    for executor in (None, cluster.Executor(client, cfg, "cpu")):
        lv = nested.Levels(cfg, plan, model, np, None, {"config_hash": "x"}, 8, nested.DateStats(len(plan.grid)), {},
                           lambda line: None, None, False, executor=executor, aggregate=overflowing)
        with pytest.raises(ValueError, match=r"^the netting-set values are not finite \(level 0, outer paths 0..7\)"):
            lv.ensure(0, 8)                                  # one chunk (of two, either could come back first)
    values, _, _, _, finite = nested.timed_chunk(cfg, plan, model, np, 0, 4, 32, 2, 0, None)
    assert finite is True and np.isfinite(values).all()


def test_an_unreachable_scheduler_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cluster, "TIMEOUT", "2s")
    cfg = _quickstart(tmp_path, "x")
    with pytest.raises(ClusterError, match=r"cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        cva.run(cfg, cluster="tcp://127.0.0.1:9", progress=False)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**cfg, "run": {**cfg["run"], "cluster": "tcp://127.0.0.1:9"}}))
    assert main(["run", str(path), "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in err[0]


def test_the_command_line_leaves_a_clusters_backend_to_its_workers(tmp_path, capsys, monkeypatch):
    """On a machine without a GPU, ``cva run`` of a gpu config refuses at once (one line), but with ``run.cluster``
    it goes on to the cluster, whose workers resolve the backend (here the scheduler is unreachable: its one line);
    ``cva validate`` of such a config is ok and costs it on GPUs."""
    import cva.backend

    monkeypatch.setattr(cluster, "TIMEOUT", "2s")
    monkeypatch.setattr(cva.backend, "cupy_available", lambda: False)          # no GPU here, wherever the test runs
    cfg = _quickstart(tmp_path, "x")
    cfg["run"]["backend"] = "gpu"
    alone, on_cluster = tmp_path / "alone.yaml", tmp_path / "cluster.yaml"
    alone.write_text(yaml.safe_dump(cfg))
    on_cluster.write_text(yaml.safe_dump({**cfg, "run": {**cfg["run"], "cluster": "tcp://127.0.0.1:9"}}))
    assert main(["run", str(alone), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.backend: backend 'gpu' asked for, but CuPy finds no CUDA device" in err[0]
    assert main(["run", str(on_cluster), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in err[0]
    assert main(["validate", str(on_cluster)]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["locale", "local:0", "http://x", 3, "tcp://127.0.0.1:notaport", "tcp://h:8786:1",
                                   "tcp://h x:1", "tcp://h:0", "tcp://h:99999", "tcp://host:8786/"])
def test_run_cluster_is_checked(tmp_path, value):
    cfg = _quickstart(tmp_path, "x")
    cfg["run"]["cluster"] = value
    with pytest.raises(ConfigError, match=r"run.cluster: must be local, local:N, local-cuda or a scheduler address"):
        load_config(cfg)


@pytest.mark.parametrize("value", ["tcp://127.0.0.1:8786", "tcp://[::1]:8786", "tls://sched.example.org:8786",
                                   "ucx://10.0.0.2:13337", "tcp://scheduler", "inproc://10.0.0.2/1/2",
                                   "tcp://[fe80::1%eth0]:8786", "tcp://node-01_a:65535", "tcp://0.0.0.0:1"])
def test_scheduler_addresses_are_taken(tmp_path, value):
    cfg = _quickstart(tmp_path, "x")
    cfg["run"]["cluster"] = value
    assert load_config(cfg).run.cluster == value


def test_the_pinned_copy_of_a_numpy_array_is_the_array():
    from linalg_gpu._backend import to_pinned_host

    a = np.arange(12.0).reshape(3, 4)
    assert to_pinned_host(a) is a


def test_a_runs_aggregation_travels_as_its_configuration():
    """A chunk task carries the run's aggregation as the configuration (not the book's arrays and plan), and a
    worker builds it again once: the same aggregate of a cube, bit for bit; with sensitivities, the bumped desk."""
    import json
    import pickle

    from cva.engine.plan import build_plan
    from cva.market.model import BlackScholes
    from cva.xva.aggregation import Aggregation, aggregation_of

    desk = load_config("configs/desk.yaml").to_dict()
    assert desk.pop("sensitivities")
    cfg = load_config(desk)
    plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)
    config_json = json.dumps(cfg.to_dict(), sort_keys=True)
    here = Aggregation(cfg, plan, model)
    sent = pickle.dumps(here, protocol=5)
    assert len(sent) < len(config_json) + 1000 and len(pickle.dumps(here.book, protocol=5)) > 2 * len(sent)
    there = pickle.loads(sent)
    assert there is aggregation_of(config_json) and pickle.loads(sent) is there             # built once
    cube = np.random.default_rng(2).normal(scale=5.0, size=(3, 17, len(plan.contracts), len(plan.value_index)))
    np.testing.assert_array_equal(there(cube), here(cube))
    assert here.bumped is None and there.bumped is None
    bumped = load_config({**desk, "sensitivities": {"rate": 0.0001}})
    again = pickle.loads(pickle.dumps(Aggregation(bumped, build_plan(bumped), model), protocol=5))
    assert again.bumped is not None and again.book.width(7) == here.book.width(7)


def test_a_clusters_client_builds_its_book_while_the_workers_compute(tmp_path, client, monkeypatch):
    """A cluster's client builds its book (netting, credit, the CSAs' margin dates) once it has submitted the first
    chunks and before it waits for them, not before submitting them; once per run, with the same numbers as one
    process (whose first chunk builds it)."""
    from cva.xva import desk

    events = []
    submit, of_config, save_later = cluster.Executor.submit, desk.Book.of_config.__func__, nested.Levels._save_later

    def recorded_submit(self, *args, **kwargs):
        events.append("submit")
        return submit(self, *args, **kwargs)

    def recorded_book(cls, *args, **kwargs):
        events.append("book")
        return of_config(cls, *args, **kwargs)

    def recorded_result(self, *args):
        events.append("result")
        return save_later(self, *args)

    one = cva.run(_small_desk(tmp_path, "one", "cpu"), chunk=32, progress=False)
    monkeypatch.setattr(cluster.Executor, "submit", recorded_submit)
    monkeypatch.setattr(desk.Book, "of_config", classmethod(recorded_book))
    monkeypatch.setattr(nested.Levels, "_save_later", recorded_result)
    two = cva.run(_small_desk(tmp_path, "two", "cpu"), chunk=32, progress=False, cluster=client)
    assert events == ["submit", "submit", "book", "result", "result"]             # two chunks of 32 paths
    assert two.cva == one.cva and two.stderr == one.stderr
    assert two.summary["trades"] == one.summary["trades"]


@pytest.mark.parametrize("sim", [{"level_paths": [120, 60, 30]}, {"outer_paths": 300, "pilot_paths": 100}])
def test_mlmc_levels_are_submitted_at_once_and_bitwise_one_process(tmp_path, client, monkeypatch, sim):
    """The MLMC levels' chunks go to the cluster together (every level's missing chunks, then their results), so
    no worker waits for a level's last chunk while another level's could run; the levels, the CVA and the solver
    statistics are bitwise one process's, for a fixed level plan and for the allocation from pilot paths."""
    port = [{"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4}]

    def config(name):
        return {"run": {"name": "m", "seed": 21, "backend": "cpu"},
                "market": {"spot": [100.0, 95.0], "vol": [0.25, 0.3], "rate": 0.03, "correlation": 0.5},
                "portfolio": port, "counterparty": {"recovery": 0.4, "hazard_rate": 0.03},
                "simulation": {"dates": 4, "outer_paths": 300, "inner_paths": 32, "basis": "linear",
                               "estimator": "mlmc", **sim},
                "output": {"dir": str(tmp_path / name)}}

    one = cva.run(config("one"), chunk=40, progress=False)
    events = []
    submit, save_later = cluster.Executor.submit, nested.Levels._save_later

    def recorded_submit(self, li, *args, **kwargs):
        events.append(("submit", li))
        return submit(self, li, *args, **kwargs)

    def recorded_result(self, li, *args):
        events.append(("result", li))
        return save_later(self, li, *args)

    monkeypatch.setattr(cluster.Executor, "submit", recorded_submit)
    monkeypatch.setattr(nested.Levels, "_save_later", recorded_result)
    two = cva.run(config("two"), chunk=40, progress=False, cluster=client)
    _same(one, two)
    first = [what for what, _ in events].index("result")
    assert {li for what, li in events[:first]} == {0, 1, 2}              # every level submitted before a result
    assert sorted(li for what, li in events if what == "submit") == sorted(li for what, li in events
                                                                           if what == "result")
