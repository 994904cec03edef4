"""Where a desk run's time goes after its engine (the measures, allocations, t = 0 prices, report and files): the
host's Python by function (cProfile, cumulative) for bench_desk's desk, the functions outside the engine's chunks.

Usage::

    python benchmarks/tools/profile_after_engine.py [--outer 8192] [--inner 128] [--backend gpu] [--top 45]
                                                    [--sensitivities]
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

from bench_desk import desk  # noqa: E402

import cva  # noqa: E402

AFTER = r"cva/(io|xva)/|cva/runner|cva/engine/(pricing|estimators)|nested.py:.*levels|matplotlib/figure.py.*savefig"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outer", type=int, default=8192)
    ap.add_argument("--inner", type=int, default=128)
    ap.add_argument("--backend", default="gpu")
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--sensitivities", action="store_true")
    args = ap.parse_args(argv)
    cfg = desk(20, 40, 400, 10, 24, args.outer, args.inner, args.backend, "float32", args.sensitivities)
    with tempfile.TemporaryDirectory() as tmp:
        cva.run({**cfg, "simulation": {**cfg["simulation"], "outer_paths": 256, "inner_paths": 16}}, out=tmp,
                progress=False, confirm=True, overwrite=True)                   # compile and warm up
        pr = cProfile.Profile()
        t0 = time.perf_counter()
        pr.enable()
        res = cva.run(cfg, out=tmp, progress=False, confirm=True, overwrite=True)
        pr.disable()
        total = time.perf_counter() - t0
    s = res.summary
    print(f"total {total:.2f} s under the profiler, engine {s['elapsed_seconds']:.2f} s, after it "
          f"{total - s['elapsed_seconds']:.2f} s, t = 0 pricing {s['pricing_seconds']:.2f} s")
    pstats.Stats(pr).sort_stats("cumulative").print_stats(AFTER, args.top)


if __name__ == "__main__":
    main()
