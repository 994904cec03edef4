"""A desk end to end: counterparties, netting sets (half under a CSA), trades on several assets (half Bermudan or
American), bilateral CVA/DVA, the value cube and, optionally, the four sensitivity families.

Usage::

    python benchmarks/bench_desk.py [--counterparties 20] [--netting-sets 40] [--trades 400] [--assets 10]
                                    [--dates 24] [--outer 8192] [--inner 128]
                                    [--sensitivities [--skip-base] [--exercise-policy base|bumped]]
                                    [--backend gpu] [--json benchmarks/results/desk_h100.json]

The desk is drawn from a fixed seed (numpy's generator): spots 50-150, vols 0.15-0.4, equicorrelation 0.3;
maturities 0.5, 1, 1.5 or 2 years; Bermudans exercisable quarterly, a tenth of the options American (50 dates
a year, maturity 0.5); strikes within 20 % of the spot, long or short. Netting sets are dealt round-robin to the
counterparties; every other one has a CSA (threshold 0-10, MTA 0.5, MPR 10 calendar days). Reported: the run's
seconds (engine, and the measures and files after it), the engine's stages, the value cube's shape and bytes,
the CVA and DVA with their errors (each timed run after an untimed one of 256 outer paths with the run's inner
paths that compiles the kernels); with ``--sensitivities`` the same run with the four families (the bumped markets
exercising the inner paths when the base did, the default ``exercise_policy: base``; ``--exercise-policy bumped``
regresses them again).
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


def desk(counterparties, netting_sets, trades, assets, dates, outer, inner, backend, dtype, sensitivities, seed=5,
         exercise_policy="base"):
    rng = np.random.default_rng(seed)
    spot = rng.uniform(50, 150, assets).round(2)
    cps = [{"name": f"CP{i:02d}", "recovery": 0.4, "hazard_rate": round(float(rng.uniform(0.005, 0.05)), 4),
            "netting_sets": []} for i in range(counterparties)]
    for j in range(netting_sets):
        ns = {"name": f"NS{j:02d}", "portfolio": []}
        if j % 2:
            ns["csa"] = {"threshold": round(float(rng.uniform(0, 10)), 1), "minimum_transfer_amount": 0.5,
                         "margin_period_of_risk": "10d"}
        cps[j % counterparties]["netting_sets"].append(ns)
    sets = [ns for cp in cps for ns in cp["netting_sets"]]
    for t in range(trades):
        a = int(rng.integers(assets))
        style = "european" if t % 2 else ("american" if t % 20 == 0 else "bermudan")
        T = 0.5 if style == "american" else float(rng.choice([0.5, 1.0, 1.5, 2.0]))
        c = {"id": f"T{t:04d}", "style": style, "payoff": str(rng.choice(["call", "put"])),
             "underlying": {"asset": a}, "strike": round(float(spot[a] * rng.uniform(0.8, 1.2)), 2),
             "maturity": T, "quantity": float(rng.choice([-1, 1]) * rng.integers(1, 10))}
        if style == "bermudan":
            c["exercise_dates"] = int(4 * T)
        sets[t % netting_sets]["portfolio"].append(c)
    cfg = {"run": {"name": "bench_desk", "seed": 1, "backend": backend, "dtype": dtype},
           "market": {"spot": spot.tolist(), "vol": rng.uniform(0.15, 0.4, assets).round(3).tolist(), "rate": 0.03,
                      "correlation": 0.3},
           "own_credit": {"recovery": 0.4, "hazard_rate": 0.01}, "counterparties": cps,
           "simulation": {"dates": dates, "outer_paths": outer, "inner_paths": inner, "basis": "linear"}}
    if sensitivities:
        cfg["sensitivities"] = {"spot": 0.01, "vol": 0.01, "rate": 0.0001, "hazard": 0.0001,
                                "exercise_policy": exercise_policy}
    return cfg


def one(args, sensitivities):
    cfg = desk(args.counterparties, args.netting_sets, args.trades, args.assets, args.dates, args.outer, args.inner,
               args.backend, args.dtype, sensitivities, exercise_policy=args.exercise_policy)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = cva.run(cfg, out=tmp, progress=False, log=print, confirm=True)
        total = time.perf_counter() - t0
    s = res.summary
    return {"sensitivities": sensitivities, "exercise_policy": args.exercise_policy if sensitivities else None,
            "seconds": total, "engine_seconds": s["elapsed_seconds"],
            "after_engine_seconds": total - s["elapsed_seconds"], "pricing_seconds": s["pricing_seconds"],
            "stage_seconds": s["runtime_seconds"],
            "value_cube": s["value_cube"], "grid_dates": s["grid_dates"], "chunk": s["chunk"], "device": s["device"],
            "cva": s["cva"], "cva_stderr": s["stderr"], "dva": s["dva"], "dva_stderr": s["dva_stderr"],
            "regression_systems": s["solver"]["systems"], "greeks": s.get("sensitivities")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--counterparties", type=int, default=20)
    ap.add_argument("--netting-sets", type=int, default=40)
    ap.add_argument("--trades", type=int, default=400)
    ap.add_argument("--assets", type=int, default=10)
    ap.add_argument("--dates", type=int, default=24)
    ap.add_argument("--outer", type=int, default=8192)
    ap.add_argument("--inner", type=int, default=128)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--sensitivities", action="store_true", help="also the run with the four families")
    ap.add_argument("--skip-base", action="store_true", help="with --sensitivities: that run alone")
    ap.add_argument("--exercise-policy", default="base", choices=("base", "bumped"),
                    help="the bumped markets' inner exercise (sensitivities.exercise_policy)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    result = {"benchmark": "desk", "date": dt.datetime.now().isoformat(timespec="seconds"),
              "cpu": platform.processor() or platform.machine(),
              "sizes": {k: getattr(args, k) for k in ("counterparties", "netting_sets", "trades", "assets", "dates",
                                                       "outer", "inner", "dtype")}, "rows": []}
    runs = ((True,) if args.skip_base else (False, True)) if args.sensitivities else (False,)
    # the kernels compiled and the caches warm, not timed: with the run's inner paths, as CuPy compiles its
    # elementwise kernels per shape class (with 16 inner paths the timed run still compiled for 4.8 s on an H200)
    warm = argparse.Namespace(**{**vars(args), "outer": 256})
    for sens in runs:
        one(warm, sens)
    for sens in runs:
        row = one(args, sens)
        result["rows"].append(row)
        print(f"sensitivities {sens}: {row['seconds']:.1f} s ({row['engine_seconds']:.1f} s engine), cube "
              f"{row['value_cube']['shape']} {row['value_cube']['megabytes']:.0f} MB, CVA {row['cva']:.6g} +- "
              f"{row['cva_stderr']:.3g}", flush=True)
        write_results(args.json, result)
    return result


if __name__ == "__main__":
    main()
