"""Where the time goes in bench_cva's paper-scale run (GPU), or with ``--desk`` in bench_desk's desk: the engine
and its stages at the default chunk and at others, the host's Python by function (cProfile), and every CUDA kernel
of the process (CuPy's, cuBLAS's, cuSOLVER's and ours) summed by name from PyTorch's CUPTI profiler (the device
image's python has torch). Kernel time well below the engine's means the host, not the GPU, sets the pace.

Usage::

    python benchmarks/tools/profile_cva.py [--outer 16384] [--inner 1024] [--estimator extrapolated] [--top 30]
                                           [--chunks 5462 8192] [--desk [--sensitivities]]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_cva import config  # noqa: E402
from bench_desk import desk  # noqa: E402

import cva  # noqa: E402


def run(outer, inner, estimator, dtype="float32", chunk=None, book=None):
    import cupy as cp

    cfg = None
    with tempfile.TemporaryDirectory() as tmp:
        if book is None:
            cfg = config(outer, inner, dtype, "gpu", tmp, estimator)
        else:                                  # bench_desk's desk (its default sizes), the outer paths of --outer
            cfg = desk(20, 40, 400, 10, 24, outer, inner, "gpu", dtype, book == "sensitivities")
            cfg["simulation"]["estimator"] = estimator
            cfg["output"] = {"dir": tmp}
        if chunk:
            cfg["simulation"]["chunk"] = chunk
        pool = cp.get_default_memory_pool()
        pool.free_all_blocks()
        t0 = time.perf_counter()
        res = cva.run(cfg, progress=False, confirm=True)
        wall = time.perf_counter() - t0
        res.summary["pool_gib"] = pool.total_bytes() / 2**30      # the pool keeps its blocks: about the peak
        return res, wall


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outer", type=int, default=16384)
    ap.add_argument("--inner", type=int, default=1024)
    ap.add_argument("--estimator", default="extrapolated")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--chunks", type=int, nargs="*", default=[], help="also time these chunk sizes")
    ap.add_argument("--desk", action="store_true", help="bench_desk's desk (20 counterparties, 400 trades)")
    ap.add_argument("--sensitivities", action="store_true", help="with --desk: its four sensitivity families")
    args = ap.parse_args(argv)
    from torch.profiler import ProfilerActivity, profile

    book = None if not args.desk else "sensitivities" if args.sensitivities else "base"
    run(256, 64, args.estimator, book=book)
    for chunk in [None, *args.chunks]:
        res, wall = run(args.outer, args.inner, args.estimator, chunk=chunk, book=book)
        s = res.summary
        print(f"engine {s['elapsed_seconds']:.3f} s, wall {wall:.3f} s, chunk {s['chunk']}, pool {s['pool_gib']:.2f} "
              f"GiB, CVA {res.cva:.8g}, stages " + ", ".join(f"{k} {v:.3f}" for k, v in s["runtime_seconds"].items()
                                                           if v > 0))
    pr = cProfile.Profile()
    pr.enable()
    run(args.outer, args.inner, args.estimator, book=book)
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(args.top)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        res, wall = run(args.outer, args.inner, args.estimator, book=book)
    kernels = [e for e in prof.key_averages() if e.device_type.name == "CUDA" or e.self_device_time_total > 0]
    total = sum(e.self_device_time_total for e in kernels) / 1e6
    print(f"profiled: engine {res.summary['elapsed_seconds']:.3f} s, kernels {total:.3f} s of device time")
    for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:args.top]:
        print(f"{e.self_device_time_total / 1e6:8.4f} s {e.count:7d}x  {e.key[:110]}")


if __name__ == "__main__":
    main()
