"""Why the first full-size float32 run of bench_cva is slow in a fresh process (empty CuPy cache):
the same warm-up as bench_cva, then cProfile of the first full-size run. Usage (GPU):
CUPY_CACHE_DIR=$(mktemp -d) python benchmarks/tools/profile_first_run.py"""

import cProfile
import pstats
import sys
import tempfile

import cupy as cp
import numpy as np

sys.path.insert(0, "benchmarks")
from bench_cva import config  # noqa: E402

import cva  # noqa: E402
import linalg_gpu as lg  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    cva.run(config(256, 64, "float32", "gpu", tmp), progress=False)
A = cp.asarray(np.eye(30) + 0.01, dtype=np.float32)[None].repeat(64, 0)
for method in ("ldlt", "householder_pcr", "eig_truncate"):
    lg.solve_small(A, A[:, 0], method=method, return_report=True)
pr = cProfile.Profile()
with tempfile.TemporaryDirectory() as tmp:
    pr.enable()
    res = cva.run(config(16384, 1024, "float32", "gpu", tmp), progress=False)
    pr.disable()
print({k: round(v, 3) for k, v in res.summary["runtime_seconds"].items()})
st = pstats.Stats(pr)
st.sort_stats("tottime").print_stats(12)
st.sort_stats("cumulative").print_stats("robust|_gpu|cupy/_core|compile", 20)
