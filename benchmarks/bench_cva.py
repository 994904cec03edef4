"""The nested CVA end to end, stage by stage: the issue's configuration on the GPU, scaled down on the CPU.

Usage::

    python benchmarks/bench_cva.py [--outer 16384] [--inner 1024] [--cpu-outer 128] [--cpu-inner 128]
                                   [--json benchmarks/results/cva_h100.json]

d = 29 independent assets (S0 = 1, sigma = 0.1, rate 0.1, the paper's Fig. 2 market), linear
basis (n = 30), 10 exposure dates, one Bermudan basket put exercisable on those dates, regressions
on all inner paths (as the paper's A_{k,l}, not only the in-the-money ones); M_0 outer
and M_k inner paths, float32 and float64. Reported: end-to-end seconds, seconds per stage, inner
asset-steps per second, regression systems solved per second, the solver's method mix, the CVA
and its standard error. The floor of the issue (2.2e10 inner normals, 2.8e11 multiply-adds of
regression assembly, 5.9e5 solves of n = 30, about 0.3 s) is computed from the counts here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from _results import write_results

import cva
from linalg_gpu._backend import cupy_available


def config(outer, inner, dtype, backend, out, estimator="extrapolated"):
    return {"run": {"name": "bench_cva", "seed": 1, "backend": backend, "dtype": dtype},
            "market": {"spot": 1.0, "assets": 29, "vol": 0.1, "rate": 0.1, "correlation": 0.0},
            "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 1.0,
                           "maturity": 1.0, "exercise_dates": 10}],
            "counterparty": {"recovery": 0.4, "hazard_rate": 0.02},
            "simulation": {"dates": 10, "outer_paths": outer, "inner_paths": inner, "basis": "linear",
                           "itm_only": False, "estimator": estimator},
            "regression": {"method": "auto", "cond_max": 1e5}, "output": {"dir": out}}


def counts(outer, inner, dates=10, d=29, p=30):
    """Inner normals (asset-steps), regression multiply-adds and solves of the configuration."""
    steps = sum(dates - g - 1 for g in range(dates))                  # inner steps summed over start dates
    regressions = sum(max(dates - g - 2, 0) for g in range(dates))    # N - k - 1 per start date
    return {"inner_asset_steps": outer * inner * steps * d, "solves": outer * regressions,
            "assembly_madds": outer * regressions * inner * p * p}


def one(outer, inner, dtype, backend, estimator="extrapolated"):
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = cva.run(config(outer, inner, dtype, backend, tmp, estimator), progress=False)
        total = time.perf_counter() - t0
    c = counts(outer, inner)
    s = res.summary
    return {"backend": backend, "estimator": estimator, "dtype": dtype, "outer": outer, "inner": inner,
            "outer_paths_all_levels": s["outer_paths"], "seconds": total, "bias_estimate": s["bias_estimate"],
            "engine_seconds": s["elapsed_seconds"], "report_seconds": total - s["elapsed_seconds"],
            "stage_seconds": s["runtime_seconds"], "chunk": s["chunk"], "device": s["device"], **c,
            "inner_asset_steps_per_s": c["inner_asset_steps"] / total, "systems": s["solver"]["systems"],
            "systems_per_s": s["solver"]["systems"] / total, "method_mix": s["solver"]["method_mix"],
            "cva": res.cva, "stderr": res.stderr}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outer", type=int, default=16384)
    ap.add_argument("--inner", type=int, default=1024)
    ap.add_argument("--cpu-outer", type=int, default=128)
    ap.add_argument("--cpu-inner", type=int, default=128)
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--estimators", nargs="+", default=["extrapolated", "plain"],
                    help="on the GPU (the CPU runs the first)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    result = {"benchmark": "cva", "date": dt.datetime.now().isoformat(timespec="seconds"),
              "cpu": platform.processor() or platform.machine(), "rows": []}
    runs = [("cpu", args.cpu_outer, args.cpu_inner)]
    if cupy_available():
        import cupy as cp

        result["device"] = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
        result["cupy"] = cp.__version__
        import linalg_gpu as lg
        from linalg_gpu._kernels import COMPILE_SECONDS

        for dtype in args.dtypes:                                      # compile every kernel outside the timing
            one(256, 64, dtype, "gpu")
            A = cp.asarray(np.eye(30) + 0.01, dtype=dtype)[None].repeat(64, 0)
            for method in ("ldlt", "householder_pcr", "eig_truncate"):
                lg.solve_small(A, A[:, 0], method=method, return_report=True)
        result["compile_seconds"] = dict(COMPILE_SECONDS)
        compiled_before = set(COMPILE_SECONDS)
        runs.insert(0, ("gpu", args.outer, args.inner))
    print(f"{'backend':7} {'dtype':8} {'outer':>6} {'inner':>6} {'total s':>8} {'engine s':>8} {'Gstep/s':>8} "
          f"{'Msys/s':>7}  stages [s]")
    for backend, outer, inner in runs:
        for dtype in args.dtypes:
            for estimator in args.estimators if backend == "gpu" else args.estimators[:1]:
                # On the GPU the first full-size run also JIT-compiles CuPy's own elementwise and reduction
                # kernels for the new sizes (kept in CuPy's disk cache, ~/.cupy, for later processes): it is
                # reported, and the second run is the steady state.
                for attempt in ("first", "second") if backend == "gpu" else ("first",):
                    row = one(outer, inner, dtype, backend, estimator)
                    row["run"] = attempt
                    result["rows"].append(row)
                    stages = ", ".join(f"{k} {v:.3f}" for k, v in row["stage_seconds"].items() if v > 0)
                    print(f"{backend:7} {dtype:8} {outer:6d} {inner:6d} {row['seconds']:8.3f} "
                          f"{row['engine_seconds']:8.3f} {row['inner_asset_steps_per_s'] / 1e9:8.3f} "
                          f"{row['systems_per_s'] / 1e6:7.3f}  ({estimator}, {attempt}) {stages}")
                    print(f"        CVA {row['cva']:.6g} +- {row['stderr']:.2g}, bias estimate "
                          f"{row['bias_estimate']:.2g}; mix {row['method_mix']}; chunk {row['chunk']}")
    if cupy_available():
        result["compiled_during_timing"] = sorted(set(COMPILE_SECONDS) - compiled_before)
        print("kernels compiled during the timed runs:", result["compiled_during_timing"] or "none")
    by = {(r["backend"], r["dtype"]): r for r in result["rows"]                  # the default's last (steady) run
          if r["estimator"] == args.estimators[0]}
    for dtype in args.dtypes:
        if ("gpu", dtype) in by:
            g, c = by[("gpu", dtype)], by[("cpu", dtype)]
            ratio = g["inner_asset_steps_per_s"] / c["inner_asset_steps_per_s"]
            result[f"gpu_over_cpu_rate_{dtype}"] = ratio
            print(f"{dtype}: GPU inner asset-steps/s over the CPU's: {ratio:.1f}x")
    write_results(args.json, result)
    return result


if __name__ == "__main__":
    main()
