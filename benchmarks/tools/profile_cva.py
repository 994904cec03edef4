"""Where one chunk of the bench_cva configuration spends its time (GPU): cProfile of the chunk,
then the pieces of the inner-path generation timed alone. Usage: python benchmarks/tools/profile_cva.py [dtype]"""

import cProfile
import pstats
import sys
import time

import cupy as cp
import numpy as np

sys.path.insert(0, "benchmarks")
from bench_cva import config  # noqa: E402

import linalg_gpu as lg  # noqa: E402
from cva.engine import nested  # noqa: E402
from cva.engine.plan import build_plan  # noqa: E402
from cva.io.config import load_config  # noqa: E402
from cva.market import rng  # noqa: E402
from cva.market.model import BlackScholes  # noqa: E402

dtype = sys.argv[1] if len(sys.argv) > 1 else "float32"
Lc = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
cfg = load_config(config(16384, 1024, dtype, "gpu", "/tmp/x"))
plan = build_plan(cfg)
model = BlackScholes.from_market(cfg.market)


def chunk(i=0):
    stats, tim = nested.DateStats(len(plan.grid)), {}
    nested.chunk_values(cfg, plan, model, cp, i * Lc, Lc, stats, tim)
    return tim


for i in range(3):                                          # the first compiles
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    tim = chunk(i)
    print(f"chunk {i} of {Lc} outer paths: {time.perf_counter() - t:.3f} s; stages",
          {k: round(v, 3) for k, v in tim.items()})
pr = cProfile.Profile()
pr.enable()
chunk(3)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(25)


def timed(name, fn, rep=3):
    fn()
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(rep):
        out = fn()
    cp.cuda.Device().synchronize()
    print(f"{name:40s} {(time.perf_counter() - t) / rep * 1e3:9.2f} ms")
    return out


dt = np.dtype(dtype)
z = timed("normals (Lc, 1024, 9, 29)", lambda: rng.normals(1, "inner", (0, Lc), (0, 1024), 0, (1, 9), 29, dtype=dt,
                                                           xp=cp))
L = cp.asarray(np.eye(29) * 0.1, dtype=dt)
w = timed("z @ L.T", lambda: z @ L.T)
timed("w * a + b", lambda: w * dt.type(0.3) + dt.type(0.01))
timed("cumsum axis -2", lambda: cp.cumsum(w, axis=-2))
timed("exp", lambda: cp.exp(w))
timed("model.paths", lambda: model.paths(cp.ones((Lc, 1, 29), dtype=dt), plan.grid[:10] * 0 + np.arange(10) * 0.1, z))
X = cp.ones((Lc, 1024, 30), dtype=dt)
timed("X^T X batched", lambda: X.transpose(0, 2, 1) @ X)
A = X.transpose(0, 2, 1) @ X / 1024 + cp.eye(30, dtype=dt)
b = cp.ones((Lc, 30), dtype=dt)
timed("solve_small auto", lambda: lg.solve_small(A, b, return_report=True, assume_symmetric=True))
timed("solve_small ldlt", lambda: lg.solve_small(A, b, method="ldlt", return_report=True, assume_symmetric=True))
