"""Where one outer chunk's time goes (GPU): bench_desk's desk (or bench_cva's paper-scale run with ``--paper``),
one chunk of each size asked for, computed as a run's chunk is (:func:`cva.engine.nested.timed_chunk`, with the
run's aggregation): its wall time, the device time of every kernel (PyTorch's CUPTI profiler; the device image's
python has torch) and the host's Python by function (cProfile) for the smallest size. Wall time well above kernel
time means the host, not the GPU, sets the pace; a fit of wall time against outer paths gives a chunk's fixed cost.

Usage::

    python benchmarks/tools/profile_chunk.py [--sizes 256 1024 4096 8192] [--top 30] [--paper] [--callers REGEX]
                                             [--cond-sample 256] [--host-time]

With ``--host-time`` the device waits by blocking (``CU_CTX_SCHED_BLOCKING_SYNC``), so the host's CPU seconds
per chunk (its main thread's ``time.thread_time``) count only the host's own work: launching, allocating,
copying. A chunk whose host seconds come near its kernel seconds is paced by the host as soon as the host slows
(two workers side by side on one machine).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_cva import config as paper_config  # noqa: E402
from bench_desk import desk  # noqa: E402

from cva.backend import resolve_backend  # noqa: E402
from cva.engine.nested import timed_chunk  # noqa: E402
from cva.engine.plan import build_plan, level_specs  # noqa: E402
from cva.io.config import load_config  # noqa: E402
from cva.market.model import BlackScholes  # noqa: E402
from cva.xva.desk import Book  # noqa: E402


def setup(paper, n):
    cfg = load_config(paper_config(n, 1024, "float32", "gpu", None) if paper
                      else desk(20, 40, 400, 10, 24, n, 128, "gpu", "float32", False))
    xp, _ = resolve_backend("gpu")
    model = BlackScholes.from_market(cfg.market)
    plan = build_plan(cfg)
    book = Book.of_config(cfg, plan, model)
    return cfg, plan, model, xp, book


def chunk(ctx, n, cond_sample=0):
    cfg, plan, model, xp, book = ctx
    xp.cuda.Device().synchronize()
    t0, c0 = time.perf_counter(), time.thread_time()
    M, splits = level_specs(cfg)[-1]                                        # the run's finest level
    values, _, timings, _, _ = timed_chunk(cfg, plan, model, xp, 0, n, M, splits, cond_sample, book.aggregate)
    timings["host"] = time.thread_time() - c0
    return time.perf_counter() - t0, timings, values


def _blocking_sync():
    """The primary context of device 0 waits by blocking (CU_CTX_SCHED_BLOCKING_SYNC), set through the driver API
    before CuPy makes the context."""
    import ctypes

    cuda, dev = ctypes.CDLL("libcuda.so.1"), ctypes.c_int()
    if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0) or cuda.cuDevicePrimaryCtxSetFlags(dev, 4):
        raise SystemExit("--host-time: the device's waiting mode could not be set")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096, 8192])
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--paper", action="store_true")
    ap.add_argument("--callers", default=None, help="who calls the functions whose names match this regex")
    ap.add_argument("--cond-sample", type=int, default=0,
                    help="outer paths whose regressions' condition numbers and design matrices are sampled, as a "
                         "run's first chunk does (cva.engine.nested.COND_SAMPLE: 256); default 0, as the others")
    ap.add_argument("--kernels-all", action="store_true", help="the kernel table for every size, not the first only")
    ap.add_argument("--host-time", action="store_true",
                    help="the device waits by blocking, so that 'host' is the host's own CPU seconds per chunk")
    args = ap.parse_args(argv)
    if args.host_time:                                      # before the device's context is made
        _blocking_sync()
    from torch.profiler import ProfilerActivity, profile

    ctx = setup(args.paper, max(args.sizes))
    cond = args.cond_sample
    for n in args.sizes:                                          # warm-up: kernels compiled, the pool grown
        chunk(ctx, n, cond)
    walls = []
    for n in args.sizes:
        wall, timings, values = chunk(ctx, n, cond)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            chunk(ctx, n, cond)
        kernels = [e for e in prof.key_averages() if e.self_device_time_total > 0]
        total = sum(e.self_device_time_total for e in kernels) / 1e6
        launches = sum(e.count for e in kernels)
        walls.append(wall)
        print(f"outer {n}: wall {wall:.3f} s, kernels {total:.3f} s ({launches} launches), "
              f"result {values.nbytes / 1e6:.1f} MB, stages "
              + ", ".join(f"{k} {v:.3f}" for k, v in timings.items() if v > 0), flush=True)
        if n == args.sizes[0] or args.kernels_all:
            for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:args.top]:
                print(f"{e.self_device_time_total / 1e6:8.4f} s {e.count:7d}x  {e.key[:100]}")
    if len(args.sizes) > 1:
        slope, fixed = np.polyfit(args.sizes, walls, 1)
        print(f"fit: {fixed:.3f} s + {slope * 1e3:.4f} ms per outer path")
    pr = cProfile.Profile()
    pr.enable()
    chunk(ctx, args.sizes[0], cond)
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(args.top)
    pstats.Stats(pr).sort_stats("cumulative").print_stats(args.top)
    if args.callers:
        pstats.Stats(pr).sort_stats("tottime").print_callers(args.callers)
        pstats.Stats(pr).sort_stats("tottime").print_callees(args.callers)


if __name__ == "__main__":
    main()
