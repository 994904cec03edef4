"""Outer chunks on a GPU cluster (``dask_cuda.LocalCUDACluster``, one worker per GPU) reached at its scheduler's
address by ``cva run --cluster tcp://...`` in a process that sees no GPU (a login node's client): the workers
resolve the backend and price the trades at t = 0, and the run directory is bitwise the one-process GPU run's; a
GPU worker killed mid-run changes nothing."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import yaml

cp = pytest.importorskip("cupy")
distributed = pytest.importorskip("distributed")
dask_cuda = pytest.importorskip("dask_cuda")

import cva  # noqa: E402
from cva.engine.cluster import LOCAL_CUDA_OPTIONS  # noqa: E402
from cva.io import rundir  # noqa: E402
from cva.io.config import load_config  # noqa: E402


@pytest.fixture(scope="module")
def gpu_client():
    cluster = dask_cuda.LocalCUDACluster(CUDA_VISIBLE_DEVICES=[0], dashboard_address=None, **LOCAL_CUDA_OPTIONS)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def _desk(tmp_path, name, outer=128):
    cfg = load_config("configs/desk.yaml").to_dict()
    cfg["run"]["backend"] = "auto"
    cfg["simulation"].update(outer_paths=outer, inner_paths=32, dates=4, pricing_paths=2000)
    return {**cfg, "output": {"dir": str(tmp_path / name)}}


def _values(out_dir, level=0):
    """A run directory's chunk files (kept): their values joined along the outer paths."""
    summary = json.loads((out_dir / "summary.json").read_text())
    chunks = rundir.load_chunks(out_dir, summary["config_hash"], level)
    assert chunks
    return np.concatenate([v for v, _ in chunks], axis=1), summary


def _same_summary(a, b):
    for key in ("cva", "stderr", "ci_low", "ci_high", "dva", "dva_stderr", "counterparties", "trades", "sensitivities",
                "outer_paths", "chunk", "solver"):
        assert a[key] == b[key], key


def test_a_client_without_a_gpu_runs_a_desk_on_gpu_workers_bitwise(tmp_path, gpu_client):
    one = cva.run(_desk(tmp_path, "one"), backend="gpu", chunk=32, keep_chunks=True, progress=False)
    path = tmp_path / "desk.yaml"
    path.write_text(yaml.safe_dump(_desk(tmp_path, "two")))
    address = gpu_client.scheduler.address
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    probe = subprocess.run([sys.executable, "-c", "from linalg_gpu._backend import cupy_available; "
                            "print(cupy_available())"], env=env, capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "False"                                   # the client's process sees no GPU
    done = subprocess.run([sys.executable, "-m", "cva", "run", str(path), "--cluster", address, "--chunk", "32",
                           "--keep-chunks"], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    a, sa = _values(tmp_path / "one")
    b, sb = _values(tmp_path / "two")
    np.testing.assert_array_equal(a, b)
    _same_summary(sa, sb)
    assert sb["backend"] == "gpu" and sb["device"].endswith("on 1 workers") and "gpu" in sb["device"]
    assert one.cva == sb["cva"]
    assert all(row["value_t0"] is not None for row in sb["trades"])          # priced on the worker


def test_a_gpu_worker_killed_mid_run_changes_nothing(tmp_path, gpu_client):
    one = cva.run(_desk(tmp_path, "one", outer=256), backend="gpu", chunk=32, progress=False)
    pids = gpu_client.run(os.getpid)
    killed = []

    def log(line):
        if "cluster task" in line and not killed:                  # the first chunk is back: kill the worker
            os.kill(next(iter(pids.values())), signal.SIGKILL)
            killed.append(line)

    two = cva.run(_desk(tmp_path, "two", outer=256), backend="gpu", chunk=32, progress=False, log=log,
                  cluster=gpu_client)
    assert killed
    assert two.cva == one.cva and two.stderr == one.stderr
    for x, y in zip(one.levels, two.levels, strict=True):
        np.testing.assert_array_equal(x.sets, y.sets)
    assert two.summary["trades"] == one.summary["trades"]
    gpu_client.wait_for_workers(1, timeout=120)                             # the nanny restarted it
