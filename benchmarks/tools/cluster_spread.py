"""The run-to-run spread of a cluster run's chunks (GPUs): bench_desk's desk at 8192 outer paths as one task per
GPU of a ``LocalCUDACluster`` (the chunks a run submits, without its report), repeated. Per run: the seconds from
submission until every chunk's values are on the client, and per task its own seconds and its stages (device
time; a stage of many small kernels grows when the worker's host falls behind). Then the same with the workers
changed, one thing at a time: every thread of a worker allowed on every core (dask-cuda pins a worker to its GPU's
cores), the garbage collector of the workers off during the runs, each worker on cores of its own. With
``--nvml-off`` the workers do not poll their GPUs through NVML (``distributed.diagnostics.nvml``).

Usage::

    python benchmarks/tools/cluster_spread.py [--outer 8192] [--gpus 2] [--runs 8] [--nvml-off]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_desk import desk  # noqa: E402

from cva.engine import cluster as cl  # noqa: E402
from cva.engine.nested import COND_SAMPLE  # noqa: E402
from cva.engine.plan import build_plan, level_specs  # noqa: E402
from cva.io.config import load_config  # noqa: E402
from cva.market.model import BlackScholes  # noqa: E402
from cva.xva.aggregation import Aggregation  # noqa: E402

HOST_STAGES = ("inner_paths", "closed_form", "solve", "exercise", "statistics", "aggregation")


def _affinity():
    return sorted(os.sched_getaffinity(0))


def _widen():
    """Every thread of this process allowed on every core (threads started later inherit it)."""
    cores = range(os.cpu_count())
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), cores)
    return len(os.sched_getaffinity(0))


def _pin(cores):
    """Every thread of this process on ``cores`` only."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), cores)
    cores = sorted(os.sched_getaffinity(0))
    return cores[0], cores[-1]


def _gc(enable):
    (gc.enable if enable else gc.disable)()
    return gc.isenabled()


def runs(client, cfg, aggregation, n, label):
    (M, splits), = level_specs(cfg)[:1]
    workers = cl.workers(client)
    Lc = cfg.simulation.outer_paths // workers
    walls, worst = [], []
    for r in range(n):
        ex = cl.Executor(client, cfg, cfg.run.backend)                # (new task keys)
        t0 = time.perf_counter()
        futures = {ex.submit(0, i, i * Lc, Lc, M, splits, COND_SAMPLE - i * Lc, aggregation): i
                   for i in range(workers)}
        rows = []
        for future, (values, _, timings, seconds, _) in ex.completed(list(futures)):
            rows.append((futures[future], seconds, time.perf_counter() - t0, timings))
            del values
        del futures
        wall = time.perf_counter() - t0
        walls.append(wall)
        worst.append(max(s for _, s, _, _ in rows))
        print(f"  {label} run {r + 1}: {wall:.3f} s; " + "; ".join(
            f"chunk {i} {s:.3f} s (in at {t:.3f}) " + " ".join(f"{k[:5]} {timings.get(k, 0):.3f}" for k in HOST_STAGES)
            for i, s, t, timings in sorted(rows)), flush=True)
    print(f"  {label}: wall median {statistics.median(walls):.3f} s (min {min(walls):.3f}, max {max(walls):.3f}); "
          f"slowest chunk median {statistics.median(worst):.3f} s (min {min(worst):.3f}, max {max(worst):.3f})",
          flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outer", type=int, default=8192)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--cpu", action="store_true", help="a LocalCluster of CPU workers (a check of this script)")
    ap.add_argument("--nvml-off", action="store_true", help="the workers without NVML's diagnostics")
    args = ap.parse_args(argv)
    if args.nvml_off:                                     # (the nanny hands the workers this process's config)
        import dask

        dask.config.set({"distributed.diagnostics.nvml": False})
    from dask.distributed import Client, LocalCluster

    backend = "cpu" if args.cpu else "gpu"
    cfg = load_config(desk(20, 40, 400, 10, 24, args.outer, 128, backend, "float32", False))
    plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)
    aggregation = Aggregation(cfg, plan, model)                            # (sent as its configuration)
    if args.cpu:
        cluster = LocalCluster(n_workers=args.gpus, threads_per_worker=1, dashboard_address=None)
    else:
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(CUDA_VISIBLE_DEVICES=list(range(args.gpus)), dashboard_address=None,
                                   **cl.LOCAL_CUDA_OPTIONS)
    with cluster, Client(cluster, **cl.LOCAL_CLIENT_OPTIONS) as client:
        print("workers' cores:", {a[-5:]: (len(c), c[:4], c[-2:]) for a, c in client.run(_affinity).items()})
        runs(client, cfg, aggregation, 2, "warm-up")
        runs(client, cfg, aggregation, args.runs, "as started")
        print("widened:", client.run(_widen))
        runs(client, cfg, aggregation, args.runs, "all cores")
        print("gc enabled:", client.run(_gc, False))
        runs(client, cfg, aggregation, args.runs, "all cores, no gc")
        client.run(_gc, True)
        addresses, n = sorted(client.scheduler_info()["workers"]), os.cpu_count()
        for k, a in enumerate(addresses):
            share = n // len(addresses)
            print("own cores:", client.run(_pin, range(k * share, (k + 1) * share), workers=[a]))
        runs(client, cfg, aggregation, args.runs, "own cores")


if __name__ == "__main__":
    main()
