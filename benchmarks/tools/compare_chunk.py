"""One outer chunk of bench_desk's desk (or, with ``--paper``, bench_cva's paper-scale run) timed under two or more
source trees of this repository, in alternating processes on the same GPU, and its values and solver statistics
checked against the first tree's (bitwise): what a change to the work per chunk gains, measured on one machine (a
chunk's time moves by a third from one lent machine to the next, so the trees are compared in one call, not against
an earlier run).

Usage::

    python benchmarks/tools/compare_chunk.py OLD_TREE NEW_TREE [MORE_TREES ...] [--sizes 256 4096] [--rounds 2]
                                             [--repeat 3] [--paper] [--processes 1]

Per tree and size: every timed run's wall seconds (a chunk computed as a run's is,
:func:`cva.engine.nested.timed_chunk` with the run's aggregation, set up by the tree's ``profile_chunk.setup``, after
a warm-up of each size in its process). With ``--processes 2`` two processes of each tree run side by side on the one
GPU, timed once both are warm: for chunks bound by the host (256 outer paths of the desk: 0.2 s of kernels) the
host's work as two cluster workers on one machine do it.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

WORKER = r'''
import json, os, pickle, sys, time
import numpy as np
tree, sizes, repeat, paper, out = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3]), \
    sys.argv[4] == "1", sys.argv[5]
barrier, processes = sys.argv[6], int(sys.argv[7])
sys.path[:0] = [tree, tree + "/benchmarks/tools"]
from profile_chunk import setup                     # the tree's own: its config, plan, model, backend and book
from cva.engine.nested import timed_chunk
from cva.engine.plan import level_specs
cfg, plan, model, xp, book = setup(paper, max(sizes))
M, splits = level_specs(cfg)[-1]
def chunk(L):
    xp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    values, stats = timed_chunk(cfg, plan, model, xp, 0, L, M, splits, 0, book.aggregate)[:2]
    return time.perf_counter() - t0, values, stats
for L in sizes:
    chunk(L)
open(os.path.join(barrier, os.path.basename(out)), "w").close()       # warm: wait for the others
while len(os.listdir(barrier)) < processes:
    time.sleep(0.01)
seconds = {}
for L in sizes:
    runs = [chunk(L) for _ in range(repeat)]
    seconds[L] = [t for t, _, _ in runs]
    np.save(f"{out}_{L}.npy", runs[-1][1])
    pickle.dump(runs[-1][2], open(f"{out}_{L}_stats.pkl", "wb"))      # (its samples are arrays)
json.dump(seconds, open(out + ".json", "w"))
'''


def _same(a, b) -> bool:
    """Two chunks' statistics (:meth:`DateStats.to_state`: dicts, lists, numbers and arrays) equal, arrays bitwise."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    return a == b or (a != a and b != b)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trees", nargs="+", type=Path, help="the source trees, the reference first")
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 4096])
    ap.add_argument("--rounds", type=int, default=2, help="processes per tree, alternating")
    ap.add_argument("--repeat", type=int, default=3, help="timed chunks per size and process")
    ap.add_argument("--paper", action="store_true")
    ap.add_argument("--processes", type=int, default=1,
                    help="processes of a tree side by side on the GPU, timed from when all are warm (the host's "
                         "work when two workers share a machine)")
    args = ap.parse_args(argv)
    if len(args.trees) < 2:
        ap.error("give at least two source trees")
    seconds = {str(t): {L: [] for L in args.sizes} for t in args.trees}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for i, tree in enumerate(args.trees):
                barrier = os.path.join(tmp, f"barrier_{i}_{r}")
                os.mkdir(barrier)
                outs = [os.path.join(tmp, f"{i}_{r}" + (f"_p{k}" if k else "")) for k in range(args.processes)]
                procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(tree.resolve()),
                                           ",".join(map(str, args.sizes)), str(args.repeat),
                                           "1" if args.paper else "0", out, barrier, str(args.processes)])
                         for out in outs]
                if any(p.wait() for p in procs):
                    raise SystemExit(f"a worker process of {tree} failed")
                for out in outs:
                    for L, ts in json.load(open(out + ".json")).items():
                        seconds[str(tree)][int(L)] += ts
        def stats(i, r, L):
            with open(os.path.join(tmp, f"{i}_{r}_{L}_stats.pkl"), "rb") as f:
                return pickle.load(f)

        same = {L: all(np.array_equal(np.load(os.path.join(tmp, f"0_{r}_{L}.npy")),
                                      np.load(os.path.join(tmp, f"{i}_{r}_{L}.npy")))
                       and _same(stats(0, r, L), stats(i, r, L))
                       for r in range(args.rounds) for i in range(1, len(args.trees)))
                for L in args.sizes}
    for L in args.sizes:
        row = "  ".join(f"{t}: median {np.median(seconds[str(t)][L]):.3f} s (" +
                        ", ".join(f"{s:.3f}" for s in seconds[str(t)][L]) + ")" for t in args.trees)
        print(f"outer {L}: {row}; bitwise the first tree's: {same[L]}", flush=True)
    return seconds, same


if __name__ == "__main__":
    main()
