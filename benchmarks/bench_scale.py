"""Scale-out on dask.distributed: the paper-scale nested CVA at 8x the outer paths (131072 outer x 1024 inner,
d = 29, float32) in one process, and as tasks on a ``dask_cuda.LocalCUDACluster`` of 1, 2, ... GPUs of one host.

Usage::

    python benchmarks/bench_scale.py [--outer 131072] [--inner 1024] [--gpus 1 2] [--desk-outer 8192 32768]
                                     [--repeat 3] [--json benchmarks/results/scale_h200x2.json]

Reported per row: engine seconds (the run's elapsed, without the report; the chunk files are written in the
background and the last ones finish during the measures, outside it), the run's seconds, the speedup over one
worker, the chunk size and count, the bytes a task sends back, the sum of the tasks' own seconds (the work) and
the client's share (engine seconds less work / workers). Each row is the run of median engine seconds among
``--repeat`` timed runs (``engine_seconds_runs`` lists them all; a run of a few seconds moves by a tenth of a
second from one to the next), and the speedups are ratios of these medians. Each case's timed runs follow an
untimed run of its case at 16384 outer paths or its size if smaller (one chunk of the one-worker run), so that
the memory pool has grown and the kernels that only large arrays use are compiled: after a warm-up of 64 paths,
the first large run on a fresh machine spent about 6 s more in its statistics stage than the second (not in a second
process: the compiled kernels are cached on disk). Every row's per-path values and CVA must be bitwise the
one-process run's (checked here). On the cluster the chunks are a multiple of the workers in number; the cluster and its
client are started with ``cva.engine.cluster.LOCAL_CUDA_OPTIONS`` and ``LOCAL_CLIENT_OPTIONS``, as ``run.cluster:
local-cuda`` starts them.
``--desk-outer N ...`` adds bench_desk's desk at N outer paths, one case per N;
``--outer 0`` leaves out the paper-scale case; ``--desk-sensitivities`` runs the desk cases with the four sensitivity
families (bench_desk's ``--sensitivities``; warmed up at 1024 outer paths, the kernels then compiled and cached).
For sizing a larger cluster it also measures, on a cluster of
the most GPUs asked for, the scheduler's cost per task (1000 empty tasks) and the client's cost per byte of a
task's result (received from a worker, then written as a chunk file).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
from _results import write_results
from bench_cva import config as paper_config
from bench_desk import desk

import cva
from cva.engine.cluster import LOCAL_CLIENT_OPTIONS, LOCAL_CUDA_OPTIONS
from cva.io import rundir


def _chunk_bytes(out, level):
    """The bytes of a level's first chunk of values (the largest; what one task sends back), from its file's
    header."""
    with zipfile.ZipFile(rundir.chunk_path(Path(out), level, 0)) as z, z.open("values.npy") as f:
        major, _ = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
    return int(np.prod(shape)) * np.dtype(dtype).itemsize


def timed(cfg, cluster=None):
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = cva.run(cfg, out=tmp, progress=False, cluster=cluster, confirm=True, keep_chunks=True)
        total = time.perf_counter() - t0
        nbytes = _chunk_bytes(tmp, len(res.levels) - 1)
    s = res.summary
    return res, {"seconds": total, "engine_seconds": s["elapsed_seconds"], "chunk": s["chunk"],
                 "chunks": -(-s["outer_paths"] // s["chunk"]), "work_seconds": sum(lv.seconds for lv in res.levels),
                 "stage_seconds": s["runtime_seconds"], "device": s["device"], "cva": res.cva, "stderr": res.stderr,
                 "task_result_bytes": nbytes, "outer_paths": s["outer_paths"]}


def median_of(cfg, repeat, cluster=None, ref=None):
    """The run of median engine seconds among ``repeat`` timed runs (the lower middle of an even count; its row
    lists every run's engine seconds and says, under "bitwise", whether every run's CVA, standard error and
    per-path values were ``ref``'s, or the first run's)."""
    runs = [timed(cfg, cluster) for _ in range(repeat)]
    ref = ref or runs[0][0]
    same = all(res.cva == ref.cva and res.stderr == ref.stderr and all(
        np.array_equal(a.sets, b.sets) for a, b in zip(res.levels, ref.levels, strict=True)) for res, _ in runs)
    res, row = sorted(runs, key=lambda r: r[1]["engine_seconds"])[(repeat - 1) // 2]
    row.update(engine_seconds_runs=[r["engine_seconds"] for _, r in runs], bitwise=same)
    return res, row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outer", type=int, default=131072)
    ap.add_argument("--inner", type=int, default=1024)
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--desk-outer", type=int, nargs="*", default=[])
    ap.add_argument("--desk-sensitivities", action="store_true",
                    help="the desk cases with the four sensitivity families (warmed up at 1024 outer paths)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per row (the row is the median's)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if any(n < 2 for n in args.desk_outer):
        ap.error(f"--desk-outer: outer paths must be >= 2, got {args.desk_outer}")
    if args.repeat < 1:
        ap.error(f"--repeat must be >= 1, got {args.repeat}")
    from dask.distributed import Client
    from dask_cuda import LocalCUDACluster

    result = {"benchmark": "scale", "date": dt.datetime.now().isoformat(timespec="seconds"),
              "cpu": platform.processor() or platform.machine(), "visible_gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "sizes": {"outer": args.outer, "inner": args.inner, "d": 29, "dtype": "float32"},
              "repeat": args.repeat, "rows": []}
    cases = [("paper-scale x8", paper_config(args.outer, args.inner, "float32", "gpu", None),
              paper_config(min(args.outer, 16384), args.inner, "float32", "gpu", None))] if args.outer else []
    sens = args.desk_sensitivities
    for n in args.desk_outer:                  # (the desk warms up on its config, at most one chunk's paths)
        cfg = desk(20, 40, 400, 10, 24, n, 128, "gpu", "float32", sens)
        cases.append((f"desk {n} outer" + (" with sensitivities" if sens else ""), cfg,
                      desk(20, 40, 400, 10, 24, min(n, 1024 if sens else 16384), 128, "gpu", "float32", sens)))
    for name, cfg, warm in cases:
        timed(warm)                                            # the case's kernels compiled, the pool grown
        ref, row = median_of(cfg, args.repeat)
        if not row.pop("bitwise"):
            raise SystemExit(f"{name}: the one-process runs differ from run to run")
        row.update(case=name, workers=0, mode="one process")
        result["rows"].append(row)
        one_process = row["engine_seconds"]
        print(f"{name}: one process {row['engine_seconds']:.2f} s engine", flush=True)
        _release_gpu_memory()                   # (the workers size their chunks by the GPUs' free memory)
        base = None
        for n in args.gpus:
            with LocalCUDACluster(CUDA_VISIBLE_DEVICES=list(range(n)), dashboard_address=None,
                                  **LOCAL_CUDA_OPTIONS) as cluster, \
                    Client(cluster, **LOCAL_CLIENT_OPTIONS) as client:
                timed(warm, client)                                                            # workers compile
                res, row = median_of(cfg, args.repeat, client, ref)
            base = base or row["engine_seconds"]
            same = row.pop("bitwise")
            row.update(case=name, workers=n, mode="LocalCUDACluster", speedup_over_one_worker=base /
                       row["engine_seconds"], speedup_over_one_process=one_process /
                       row["engine_seconds"], bitwise_equal=bool(same),
                       client_share_seconds=row["engine_seconds"] - row["work_seconds"] / n)
            result["rows"].append(row)
            print(f"{name}: {n} GPU worker(s) {row['engine_seconds']:.2f} s engine, speedup "
                  f"{row['speedup_over_one_worker']:.2f}x, bitwise {row['bitwise_equal']}", flush=True)
            write_results(args.json, result)
    if result["rows"]:
        with LocalCUDACluster(CUDA_VISIBLE_DEVICES=list(range(max(args.gpus))), dashboard_address=None,
                              **LOCAL_CUDA_OPTIONS) as cluster, \
                Client(cluster, **LOCAL_CLIENT_OPTIONS) as client:
            result["cluster_costs"] = cluster_costs(client, min(2**30, max(r["task_result_bytes"] for r in
                                                                           result["rows"] if r["workers"])))
    write_results(args.json, result)
    return result


def _release_gpu_memory():
    """This process's CuPy pools handed back to the driver, as a run on a cluster leaves the GPUs to its workers
    (its client needs none): the pools kept after the one-process run held memory on the first GPU, so the workers
    there saw less free memory and every worker got smaller chunks (paper-scale: 10 chunks of 13108 outer paths
    where one process took 8 of 16384)."""
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def _noop(i):
    return i


def _payload(nbytes):
    return np.ones(nbytes // 8)


def cluster_costs(client, nbytes, tasks=1000):
    """The scheduler's seconds per task (``tasks`` empty ones, submitted and gathered at once) and the client's
    seconds for a task result of ``nbytes``: received from a worker (directly, as a local cluster's client does,
    and through the scheduler, Dask's default for a remote one), checked finite and written as a chunk file (the
    client's work per chunk in :meth:`cva.engine.nested.Levels._distributed`)."""
    from dask.distributed import wait

    from cva.io import rundir

    client.gather(client.map(_noop, range(10), pure=False))                          # connections warm
    t0 = time.perf_counter()
    client.gather(client.map(_noop, range(tasks), pure=False))
    per_task = (time.perf_counter() - t0) / tasks
    out = {"tasks": tasks, "seconds_per_task": per_task, "result_bytes": nbytes}
    for rep in range(2):                                                     # the second: pool, page cache warm
        for how, direct in (("receive_via_scheduler_seconds", False), ("receive_seconds", True)):
            future = client.submit(_payload, nbytes, pure=False)
            wait(future)                                                             # computed on the worker
            t0 = time.perf_counter()
            values = client.gather(future, direct=direct)
            out[how] = time.perf_counter() - t0
        t0 = time.perf_counter()
        np.isfinite(values).all()
        out["check_seconds"] = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            rundir.chunk_path(Path(tmp), 0, rep).parent.mkdir()
            t0 = time.perf_counter()
            rundir.save_chunk(Path(tmp), 0, rep, values, {"l0": 0}, "bench")
            out["save_seconds"] = time.perf_counter() - t0
        del future, values
    return out


if __name__ == "__main__":
    main()
