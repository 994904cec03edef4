"""The KLT at work: a d = 100 market driven by its k = 10 leading factors against the full model, and the
Jacobi KLT of a 1024 correlation against cuSOLVER's syevd, in one process on one GPU.

Usage::

    python benchmarks/bench_klt.py [--backend gpu] [--json benchmarks/results/klt_h100.json]

1. **Factor reduction.** 100 assets in 10 sectors (correlation 0.3 through a market factor, 0.3 more inside a
   sector): a long European put and a short European call on the equally weighted basket (valued by the inner
   paths of all 100 assets) and a Bermudan put on one asset of each sector (regressed on its asset; a basket
   Bermudan's regression on 100 assets is above the GPU solver's 64 regressors); 12 exposure dates, float32,
   the default estimator. The full
   model (Cholesky, 100 normals per step) and ``market.factors: 10`` (10 normals per step) run on the same
   seed; engine seconds (summary.json's elapsed, best of ``--repeat`` after a warm-up run) and the CVA of each
   with its standard error. Their CVAs differ by the model change (the correlation B B^T) and by the noise
   (the paths differ: the normals are drawn per factor).
2. **The KLT of a 1024 correlation**, float32 (``linalg_gpu.jacobi.jacobi_eigh``, the blocked two-sided
   Jacobi of Torun et al.) on a sector correlation and on a random symmetric matrix, against
   ``cupy.linalg.eigh`` (syevd); the time of one step's kernels (event-timed) says what holds it back: per
   sweep, 31 sequential steps of 16 block pairs each, whose inner Jacobi runs in 16 thread blocks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
from pathlib import Path

import numpy as np
from _results import write_results
from bench_jacobi import timed
from tools.profile_jacobi import event_time

import cva


def sector_correlation(d=100, sectors=10, market=0.3, sector=0.3):
    C = np.full((d, d), market)
    s = np.arange(d) * sectors // d
    C[s[:, None] == s[None, :]] += sector
    np.fill_diagonal(C, 1.0)
    return C


def config(d, factors, outer, inner, backend, dtype, seed=3):
    g = np.random.default_rng(11)
    spot = np.round(g.uniform(80, 120, d), 2)
    vol = np.round(g.uniform(0.15, 0.35, d), 3)
    port = [{"id": "basket put", "style": "european", "payoff": "put", "underlying": "basket", "strike": 100.0,
             "maturity": 1.0, "quantity": 20.0},
            {"id": "basket call", "style": "european", "payoff": "call", "underlying": "basket", "strike": 105.0,
             "maturity": 1.0, "quantity": -10.0}]
    port += [{"id": f"put {i}", "style": "bermudan", "payoff": "put", "underlying": {"asset": i},
              "strike": float(spot[i]), "maturity": 1.0, "exercise_dates": 12} for i in range(0, d, max(d // 10, 1))]
    return {"run": {"name": "bench_klt", "seed": seed, "backend": backend, "dtype": dtype},
            "market": {"spot": spot.tolist(), "vol": vol.tolist(), "rate": 0.03,
                       "correlation": sector_correlation(d).tolist(), **({"factors": factors} if factors else {})},
            "portfolio": port, "counterparty": {"recovery": 0.4, "hazard_rate": 0.02},
            "simulation": {"dates": 12, "outer_paths": outer, "inner_paths": inner, "pricing_paths": 20_000}}


def best_run(cfg, repeat):
    """(best engine seconds, the last result) over ``repeat`` runs after one warm-up run."""
    times, res = [], None
    for i in range(repeat + 1):
        with tempfile.TemporaryDirectory() as tmp:
            res = cva.run(cfg, out=tmp, progress=False)
        if i:
            times.append(res.summary["elapsed_seconds"])
    return min(times), res


def bench_factors(args):
    rows = []
    for factors in (None, args.factors):
        cfg = config(args.d, factors, args.outer, args.inner, args.backend, args.dtype)
        t, res = best_run(cfg, args.repeat)
        s = res.summary
        row = {"factors": factors or args.d, "model": "full (Cholesky)" if factors is None else "KLT factors",
               "engine_seconds": t, "cva": s["cva"], "cva_stderr": s["stderr"], "device": s["device"],
               "explained_total": (s["factors"] or {}).get("explained_total", 1.0),
               "correlation_distance_frobenius": (s["factors"] or {}).get("correlation_distance_frobenius", 0.0),
               "runtime_seconds": s["runtime_seconds"]}
        rows.append(row)
        print(f"d = {args.d}, {row['model']} ({row['factors']} normals per step): {t:.3f} s engine, "
              f"CVA {row['cva']:.5f} +- {row['cva_stderr']:.5f}, explained {row['explained_total']:.4f}")
    full, red = rows
    diff = red["cva"] - full["cva"]
    se = float(np.hypot(red["cva_stderr"], full["cva_stderr"]))
    print(f"speed-up {full['engine_seconds'] / red['engine_seconds']:.2f}x; CVA change {diff:+.5f} +- {se:.5f} "
          f"({100 * diff / full['cva']:+.2f} %)")
    return {"d": args.d, "k": args.factors, "outer_paths": args.outer, "inner_paths": args.inner,
            "dtype": args.dtype, "runs": rows, "speedup": full["engine_seconds"] / red["engine_seconds"],
            "cva_change": diff, "cva_change_stderr": se, "cva_change_relative": diff / full["cva"]}


def bench_eigh(args):
    import cupy as cp

    from linalg_gpu.jacobi import blocked
    from linalg_gpu.jacobi.block import block_eigh

    n = args.n
    C = cp.asarray(sector_correlation(n, 16).astype(np.float32))
    X = np.random.default_rng(2).standard_normal((n, n))
    S = cp.asarray(((X + X.T) / 2).astype(np.float32))
    out = {"n": n, "dtype": "float32", "block": blocked.BLOCK, "cases": []}
    for name, A in (("sector correlation", C), ("random symmetric", S)):
        t, _, (w, V, info) = timed(cp, lambda: blocked.jacobi_eigh(A, return_info=True), args.repeat)
        t_ref, _, (w_ref, _) = timed(cp, lambda: cp.linalg.eigh(A), args.repeat)
        row = {"matrix": name, "ours_s": t, "sweeps": info.sweeps, "cupy.linalg.eigh (syevd)_s": t_ref,
               "ratio_syevd_over_ours": t_ref / t,
               "max_eigenvalue_difference_relative": float(cp.abs(w - w_ref).max() / cp.abs(w_ref).max())}
        out["cases"].append(row)
        print(f"KLT n = {n} ({name}): {t * 1e3:.1f} ms ({info.sweeps} sweeps), syevd {t_ref * 1e3:.1f} ms")
    # one step's kernels, event-timed: what a sweep of 31 steps is made of
    K = 2 * blocked.BLOCK
    k = n // K
    A = C
    N = n
    As = cp.empty((N, N), dtype=A.dtype)
    D = cp.lib.stride_tricks.as_strided(As, shape=(k, K, K), strides=(K * (N + 1) * 4, N * 4, 4))
    As[...] = A
    Wb = cp.empty((k, K, K), dtype=A.dtype)
    Y = cp.empty((k, K, N), dtype=A.dtype)
    e = cp.arange(N)
    parts = {"gather": event_time(cp, lambda: blocked._gather(cp, A, e, both=True, out=As), 20),
             "inner Jacobi (block_eigh, 2 sweeps)": event_time(cp, lambda: block_eigh(D, 1e-6, 2, out=Wb), 20),
             "batched product": event_time(cp, lambda: blocked._bmm(cp, Wb, As.reshape(k, K, N), trans_a=True,
                                                                  out=Y), 20)}
    out["step_kernels_s"] = parts
    out["steps_per_sweep"] = N // blocked.BLOCK - 1
    print("one step: " + ", ".join(f"{p} {t * 1e6:.0f} us" for p, t in parts.items()))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="gpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--factors", type=int, default=10)
    ap.add_argument("--outer", type=int, default=4096)
    ap.add_argument("--inner", type=int, default=256)
    ap.add_argument("--n", type=int, default=1024, help="the KLT's matrix size")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    result = {"benchmark": "klt", "date": dt.datetime.now().isoformat(timespec="seconds")}
    if args.backend == "gpu":
        result["klt"] = bench_eigh(args)
    result["factor_reduction"] = bench_factors(args)
    result["device"] = result["factor_reduction"]["runs"][0]["device"]
    write_results(args.json, result)
    return result


if __name__ == "__main__":
    main()
