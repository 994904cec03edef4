"""Whether the GPU's values depend on the chunk size, and which operation makes them: the value cube of the
first outer paths from a chunk of 2B and of B, then each batched operation of the engine on the first B sets of a
batch against the same operation on those B sets alone. Usage: python benchmarks/tools/probe_chunk_bits.py"""

import sys

import cupy as cp
import numpy as np

sys.path.insert(0, "benchmarks")
from bench_cva import config as paper_config  # noqa: E402

import linalg_gpu as lg  # noqa: E402
from cva.engine import lsm, nested  # noqa: E402
from cva.engine.plan import build_plan  # noqa: E402
from cva.io.config import load_config  # noqa: E402
from cva.market.model import BlackScholes  # noqa: E402
from linalg_gpu import strided  # noqa: E402


def compare(name, a, b):
    a, b = cp.asnumpy(a), cp.asnumpy(b)
    diff = a != b
    rel = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-300))) if diff.any() else 0.0
    print(f"{name:48s} {'BITWISE' if not diff.any() else 'DIFFER'}  {int(diff.sum())}/{diff.size}  max rel {rel:.2e}",
          flush=True)


def two_bermudans_config():
    return {"run": {"name": "probe", "seed": 1, "backend": "gpu", "dtype": "float32"},
            "market": {"spot": [100.0, 90.0], "vol": [0.2, 0.3], "rate": 0.05, "correlation": 0.3},
            "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0,
                           "maturity": 1.0, "exercise_dates": 12},
                          {"style": "bermudan", "payoff": "call", "underlying": {"asset": 1}, "strike": 90.0,
                           "maturity": 1.0, "exercise_dates": 12}],
            "counterparty": {"recovery": 0.4, "hazard_rate": 0.02},
            "simulation": {"dates": 12, "outer_paths": 4096, "inner_paths": 128, "basis": "linear",
                           "estimator": "extrapolated"}}


def cube(raw, B, splits):
    cfg = load_config(raw)
    plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)
    out = []
    for n in (2 * B, B):
        stats = nested.DateStats(len(plan.grid))
        out.append(nested.chunk_values(cfg, plan, model, cp, 0, n, stats, {}, splits=splits)[:, :B])
    return out


def main():
    paper = paper_config(4096, 1024, "float32", "gpu", "/tmp/p")
    for name, raw, B, splits in [("paper-like (affine basis, d = 29)", paper, 1024, 1),
                                 ("two single-asset Bermudans (linear)", two_bermudans_config(), 2048, 1)]:
        a, b = cube(raw, B, splits)
        compare(f"value cube: {name}", a, b)

    rs = cp.random.default_rng(0)
    for B, M, p in [(1024, 1024, 30), (2048, 128, 4)]:
        X = rs.standard_normal((2 * B, M, p), dtype=cp.float32)
        V = rs.standard_normal((2 * B, M), dtype=cp.float32)
        A2, b2 = lsm._normal_equations(cp, X, V, None)
        A1, b1 = lsm._normal_equations(cp, X[:B].copy(), V[:B].copy(), None)
        compare(f"normal equations (cupy matmul) {B}x{M}x{p}: A", A2[:B], A1)
        compare(f"normal equations (cupy matmul) {B}x{M}x{p}: b", b2[:B], b1)
        G2 = strided.concat_gram(X)
        G1 = strided.concat_gram(X[:B])
        compare(f"strided.concat_gram {B}x{M}x{p}", G2[:B], G1)
        beta = rs.standard_normal((2 * B, p), dtype=cp.float32)
        compare(f"strided.matmul {B}x{M}x{p}", strided.matmul(X, beta[..., None])[:B],
                strided.matmul(X[:B], beta[:B, :, None]))
        compare(f"cupy X @ beta {B}x{M}x{p}", (X @ beta[..., None])[:B], X[:B] @ beta[:B, :, None])
        compare(f"V.mean(axis=1) {B}x{M}", V.mean(axis=1)[:B], V[:B].mean(axis=1))
        compare(f"V.std(axis=1) {B}x{M}", V.std(axis=1, ddof=1)[:B], V[:B].std(axis=1, ddof=1))
        compare(f"V.sum(axis=1) {B}x{M}", V.sum(axis=1)[:B], V[:B].sum(axis=1))
        Am = A2 + 5 * cp.eye(p, dtype=cp.float32)
        x2 = lg.solve_small(Am, b2, assume_symmetric=True)
        x1 = lg.solve_small(Am[:B].copy(), b2[:B].copy(), assume_symmetric=True)
        compare(f"solve_small {B}x{p}", x2[:B], x1)


if __name__ == "__main__":
    main()
