"""Where a cluster run's time goes (GPUs): bench_desk's desk (or the paper-scale run with ``--paper``) on a
``LocalCUDACluster`` of 1 and 2 GPUs, as bench_scale runs it, with a timeline: when the client submitted each
task, when the worker started and ended it, when the client had its result, when the run's values were complete;
and, per chunk size, the host's Python by function (cProfile) of one task on a worker, while every worker runs one.

Usage::

    python benchmarks/tools/profile_cluster.py [--outer 8192] [--gpus 1 2] [--top 25] [--paper]
                                               [--no-worker-profiler]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_cva import config as paper_config  # noqa: E402
from bench_desk import desk  # noqa: E402

import cva  # noqa: E402
from cva.engine import cluster as cl  # noqa: E402


def _patch_worker(profile_top):
    """On a worker: its chunk tasks stamped (and, with ``profile_top``, profiled: the top functions by own time).
    Patched once (the worker keeps the task's function as first unpickled); its state is kept on the worker's module
    (a function of this script is unpickled afresh each time): ``_events``, a (l0, Lc, start, end, timings,
    profile) per task, wall clock."""
    import cProfile
    import io
    import pstats

    import cva.engine.cluster as mod

    mod._events, mod._profile_top = [], profile_top
    if hasattr(mod, "_unpatched_chunk_task"):
        return
    orig = mod._unpatched_chunk_task = mod.chunk_task

    def stamped(*args, **kwargs):
        t0 = time.time()
        profile_top = mod._profile_top
        if profile_top:
            pr = cProfile.Profile()
            pr.enable()
        out = orig(*args, **kwargs)
        text = ""
        if profile_top:
            pr.disable()
            buf = io.StringIO()
            pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(profile_top)
            pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(profile_top)
            text = buf.getvalue()
        mod._events.append((args[2], args[3], t0, time.time(), out[2], text))
        return out

    mod.chunk_task = stamped


def _events():
    import cva.engine.cluster as mod

    return list(mod._events)


def one_run(cfg, client, profile_top=0):
    client.run(_patch_worker, profile_top)
    stamps = []
    real_submit = cl.Executor.submit

    def submit(self, *args, **kwargs):
        stamps.append(("submit", args[2], time.time()))
        return real_submit(self, *args, **kwargs)

    def log(msg):
        stamps.append(("log", msg, time.time()))

    cl.Executor.submit = submit
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.time()
            res = cva.run(cfg, out=tmp, progress=True, log=log, cluster=client, confirm=True)
            t_end = time.time()
    finally:
        cl.Executor.submit = real_submit
    events = [e for per in client.run(_events).values() for e in per]
    s = res.summary
    print(f"  engine {s['elapsed_seconds']:.3f} s, run {t_end - t0:.3f} s, cva {res.cva!r}", flush=True)
    for kind, what, t in stamps:
        if kind == "submit" or "cluster task" in str(what) or "cva run" in str(what):
            print(f"  {t - t0:8.3f} client {kind} {str(what)[:110]}")
    for l0, Lc, a, b, timings, text in sorted(events):
        print(f"  {a - t0:8.3f} .. {b - t0:8.3f} worker task l0={l0} Lc={Lc} ({b - a:.3f} s) stages "
              + ", ".join(f"{k} {v:.3f}" for k, v in timings.items() if v > 0.0005))
        if text:
            print(text)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outer", type=int, default=8192)
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--paper", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="a LocalCluster of CPU workers (a check of this script)")
    ap.add_argument("--no-worker-profiler", action="store_true",
                    help="the workers without Dask's statistical profiler (distributed.worker.profile.enabled)")
    args = ap.parse_args(argv)
    if args.no_worker_profiler:                           # (the nanny hands the workers this process's config)
        import dask

        dask.config.set({"distributed.worker.profile.enabled": False})
    from dask.distributed import Client, LocalCluster
    if not args.cpu:
        from dask_cuda import LocalCUDACluster

    backend = "cpu" if args.cpu else "gpu"
    cfg = (paper_config(args.outer, 1024, "float32", backend, None) if args.paper
           else desk(20, 40, 400, 10, 24, args.outer, 128, backend, "float32", False))
    for n in args.gpus:
        cluster = (LocalCluster(n_workers=n, threads_per_worker=1, dashboard_address=None) if args.cpu else
                   LocalCUDACluster(CUDA_VISIBLE_DEVICES=list(range(n)), dashboard_address=None,
                                    **cl.LOCAL_CUDA_OPTIONS))
        with cluster, Client(cluster, **cl.LOCAL_CLIENT_OPTIONS) as client:
            print(f"{n} worker(s): warm-up", flush=True)
            one_run(cfg, client)
            for rep in range(2):
                print(f"{n} worker(s): timed run {rep + 1}", flush=True)
                one_run(cfg, client)
            print(f"{n} worker(s): profiled run", flush=True)
            one_run(cfg, client, args.top)


if __name__ == "__main__":
    main()
