"""solve_small on the GPU with its later stages on the whole batch (``robust.WHOLE_BATCH_MAX_N``) against the
gathered failing systems: seconds per call of a per-system memory's batch as the nested CVA engine makes it (a
per-system memory, a report, no input checks), a few percent of the systems singular, so that they need the
eigen-solve, and 1 % near-singular, so that Householder + PCR is tried; each way the same bits.

Usage::

    python benchmarks/tools/measure_whole_batch.py [--batch 1048576] [--n 2 3 5 8] [--dtype float32]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import linalg_gpu as lg
from linalg_gpu.small import robust


def batch(rng, B, n, dtype):
    X = rng.standard_normal((B, n + 2, n))
    A = np.einsum("bki,bkj->bij", X, X) / (n + 2)
    A[: B // 25, :, -1] = A[: B // 25, -1, :] = 0                 # 4 %: singular (the eigen-solve)
    A[B // 25: B // 25 + B // 100] += 1e-7 * np.eye(n)
    A[B // 25: B // 25 + B // 100, -1, -1] = 1e-9                 # 1 %: near-singular
    return A.astype(dtype), rng.standard_normal((B, n)).astype(dtype)


def timed(A, b, reps):
    import cupy as cp

    mem = lg.SolverMemory(per_system=True)
    kw = {"return_report": True, "memory": mem, "key": "k", "check_finite": False, "assume_symmetric": True}
    x, _ = lg.solve_small(A, b, **kw)                             # the memory's start codes
    for _ in range(2):
        x, _ = lg.solve_small(A, b, **kw)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        x, rep = lg.solve_small(A, b, **kw)
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / reps, x.get(), rep.method_code.get()


def main(argv=None):
    import cupy as cp

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[4096, 1 << 20])
    ap.add_argument("--n", type=int, nargs="+", default=[2, 3, 5, 8])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(3)
    keep = robust.WHOLE_BATCH_MAX_N, robust.WHOLE_BATCH_MAX_SYSTEMS
    for B in args.batch:
        for n in args.n:
            A, b = (cp.asarray(a) for a in batch(rng, B, n, args.dtype))
            try:
                robust.WHOLE_BATCH_MAX_N = 0
                gathered, xg, cg = timed(A, b, args.reps)
                robust.WHOLE_BATCH_MAX_N, robust.WHOLE_BATCH_MAX_SYSTEMS = 64, B
                whole, xw, cw = timed(A, b, args.reps)
            finally:
                robust.WHOLE_BATCH_MAX_N, robust.WHOLE_BATCH_MAX_SYSTEMS = keep
            same = np.array_equal(xg, xw, equal_nan=True) and np.array_equal(cg, cw)
            print(f"B {B} n {n} {args.dtype}: gathered {gathered * 1e3:.3f} ms, whole batch {whole * 1e3:.3f} ms "
                  f"per call, methods {np.bincount(cw, minlength=4).tolist()}, same bits {same}", flush=True)


if __name__ == "__main__":
    main()
