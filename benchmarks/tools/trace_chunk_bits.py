"""Which operation first makes the GPU's values depend on the chunk size: the outputs of the engine's batched
operations recorded for a chunk of 2B outer paths and for one of B, and compared on their first rows in call
order (those of the first of the two contracts stacked in a call). Usage: python benchmarks/tools/trace_chunk_bits.py"""

import sys

import cupy as cp
import numpy as np

sys.path.insert(0, "benchmarks/tools")
from probe_chunk_bits import two_bermudans_config  # noqa: E402

import linalg_gpu as lg  # noqa: E402
from cva.engine import lsm, nested  # noqa: E402
from cva.engine.plan import build_plan  # noqa: E402
from cva.io.config import load_config  # noqa: E402
from cva.market.model import BlackScholes  # noqa: E402
from linalg_gpu import strided  # noqa: E402

record = []


def traced(mod, name):
    fn = getattr(mod, name)

    def wrapper(*args, **kw):
        out = fn(*args, **kw)
        flat = [x for o in (out if isinstance(out, tuple) else (out,)) for x in (o if isinstance(o, list) else [o])]
        for i, o in enumerate(flat):
            if isinstance(o, cp.ndarray):
                record.append((f"{name}[{i}] {tuple(o.shape)}", cp.asnumpy(o)))
        return out
    setattr(mod, name, wrapper)


for mod, name in [(lsm, "_gram_normal_equations"), (lsm, "_affine_fitted"), (strided, "concat_gram"),
                  (strided, "matmul"), (lg, "solve_small")]:
    traced(mod, name)

cfg = load_config(two_bermudans_config())                # two contracts stacked in one LSM call
plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)
runs = []
for n in (4096, 2048):
    record.clear()
    v = nested.chunk_values(cfg, plan, model, cp, 0, n, nested.DateStats(len(plan.grid)), None, splits=1)
    runs.append((v, list(record)))
(vb, rb), (vs, rs) = runs
print("value cube bitwise:", np.array_equal(vb[:, :2048], vs), "calls", len(rb), len(rs))
shown = 0
for (nb, ab), (ns, as_) in zip(rb, rs, strict=False):
    if ab.ndim == 0 or as_.ndim == 0:
        continue
    # the first contract's first paths (or parts) in both; a solve holds every depth's systems, those of the whole
    # sets (the first third: two contracts' B sets, then their 2 B halves) first
    h = as_.shape[0] // (6 if nb.startswith("solve_small") else 2)
    a, b = ab[:h], as_[:h]
    if a.shape == b.shape and not np.array_equal(a, b, equal_nan=True):
        print("DIFFER", nb, ns, int((a != b).sum()), "of", a.size)
        shown += 1
        if shown >= 8:
            break
print("done")
