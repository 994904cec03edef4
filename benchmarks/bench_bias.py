"""Time to a relative RMSE of 0.25 % against the exact CVA on a long Bermudan put: plain against the
bias-removing estimators, in one process on the same machine.

Usage::

    python benchmarks/bench_bias.py [--backend gpu] [--dtype float32] [--target 0.0025]
                                    [--json benchmarks/results/bias_h100.json]

The case: one asset (S0 = K = 100, sigma 0.2, r 0.05), a long Bermudan put with 10 exercise dates to
T = 1, 10 exposure dates, the Laguerre basis, a flat hazard 0.02, recovery 0.4. The exact CVA comes from
tests/bermudan_reference.py (the value function by quadrature of the backward induction, the exact
exercise rule on 2^19 outer paths of numpy's generator). For each estimator and inner count M a pilot
run gives the per-path variance v and, path by path against the reference on the engine's own outer
paths, the bias b; where |b| < 0.9 target the outer count N = v / (target^2 - b^2) reaches the target
RMSE and the run at N is timed (engine seconds: summary.json's elapsed, without the report) and its
error recorded. ``mlmc`` runs with ``target_rmse`` (its own allocation and levels). The runs use antithetic
outer paths (the default; the variance is per outer path, twice the pair means'), and the extrapolated
estimator is also timed without them (``--extrapolated-independent``), for comparison. With
``simulation.control_variate`` (``--control``: the European twin's control, :mod:`cva.xva.control`) the pilot's
variance is its ``variance_ratio`` times the per-path variance; the bias is the estimator's own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _results import write_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bermudan_reference import cva_contributions, reference_cva  # noqa: E402

import cva  # noqa: E402
from cva.engine.estimators import samples  # noqa: E402


def config(estimator, inner, outer, backend, dtype, seed=1, outer_antithetic=True, control=False, **sim):
    return {"run": {"name": "bench_bias", "seed": seed, "backend": backend, "dtype": dtype},
            "market": {"spot": 100.0, "vol": 0.2, "rate": 0.05},
            "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0,
                           "maturity": 1.0, "exercise_dates": 10}],
            "counterparty": {"recovery": 0.4, "hazard_rate": 0.02},
            "simulation": {"dates": 10, "outer_paths": outer, "inner_paths": inner, "basis": "laguerre",
                           "estimator": estimator, "outer_antithetic": outer_antithetic,
                           **({"control_variate": True} if control else {}), **sim}}


def run(cfg):
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = cva.run(cfg, out=tmp, progress=False)
        return res, time.perf_counter() - t0


def per_path(cfg, res):
    """The estimator's per-path values on its one level (plain: g(P); extrapolated: 2 g(P) - mean g(halves))."""
    (level,) = res.levels
    g = [cva_contributions(cfg, level.sets[j]) for j in range(3)]
    return g[0] if cfg["simulation"]["estimator"] == "plain" else 2 * g[0] - 0.5 * (g[1] + g[2])


def variance_and_bias(x, refp, paired):
    """The per-outer-path variance of x (with antithetic pairs: twice the pair means' variance) and the mean
    and standard error of x - refp, path by path against the reference on the same outer paths."""
    r = 2 if paired else 1
    d = samples(x - refp, paired)
    return r * float(samples(x, paired).var(ddof=1)), float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size))


def exact_cva(cfg, batches=4, paths=2**17):
    vals = [reference_cva(cfg, paths="numpy", outer_paths=paths, seed=100 + i) for i in range(batches)]
    return float(np.mean([v.cva for v in vals])), float(np.sqrt(np.sum([v.stderr ** 2 for v in vals])) / batches)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--target", type=float, default=0.0025, help="relative RMSE (default 0.0025)")
    ap.add_argument("--pilot", type=int, default=32768)
    ap.add_argument("--plain", type=int, nargs="*", default=[1024, 4096, 8192])
    ap.add_argument("--extrapolated", type=int, nargs="+", default=[512, 1024, 2048])
    ap.add_argument("--extrapolated-independent", type=int, nargs="*", default=[1024],
                    help="inner paths of extrapolated runs without antithetic outer paths (the comparison)")
    ap.add_argument("--control", type=int, nargs="*", default=[1024],
                    help="inner paths of extrapolated runs with the European twin's control variate")
    ap.add_argument("--mlmc", type=int, nargs="*", default=[256, 1024], help="starting inner_paths of mlmc runs")
    ap.add_argument("--mlmc-max-inner", type=int, default=4096)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    base = config("plain", 64, 2, "cpu", "float64")
    t0 = time.perf_counter()
    ref, ref_se = exact_cva(base)
    print(f"exact CVA {ref:.6f} +- {ref_se:.6f} (reference, {time.perf_counter() - t0:.1f} s on the CPU)")
    target = args.target * ref
    result = {"benchmark": "bias", "date": dt.datetime.now().isoformat(timespec="seconds"),
              "cpu": platform.processor() or platform.machine(), "backend": args.backend, "dtype": args.dtype,
              "case": "long ATM Bermudan put, 10 exercise dates, laguerre", "exact_cva": ref, "exact_stderr": ref_se,
              "target_relative_rmse": args.target, "rows": []}
    run(config("extrapolated", 64, 1024, args.backend, args.dtype))                   # compile outside the timing
    print(f"{'estimator':12} {'M':>5} {'pairs':>5} {'pilot bias %':>14} {'N':>8} {'engine s':>9} {'error %':>8} "
          f"{'pred. rmse %':>12}")
    cases = [("extrapolated", M, True, False) for M in args.extrapolated] + \
        [("extrapolated", M, False, False) for M in args.extrapolated_independent] + \
        [("extrapolated", M, True, True) for M in args.control] + [("plain", M, True, False) for M in args.plain]
    for estimator, M, anti, control in cases:
        cfg = config(estimator, M, args.pilot, args.backend, args.dtype, outer_antithetic=anti, control=control)
        res, _ = run(cfg)
        refp = reference_cva(cfg, paths="engine", outer_paths=args.pilot).contributions
        v, b, b_se = variance_and_bias(per_path(cfg, res), refp, anti)
        ratio = res.summary["control_variate"]["variance_ratio"] if control else 1.0
        row = {"estimator": estimator, "inner_paths": M, "outer_antithetic": anti, "control_variate": control,
               "pilot_outer": args.pilot, "pilot_engine_seconds": res.summary["elapsed_seconds"], "pilot_bias": b,
               "pilot_bias_stderr": b_se, "pilot_bias_estimate": res.summary["bias_estimate"],
               "per_path_variance": v * ratio, "variance_ratio": ratio, "device": res.summary["device"]}
        v *= ratio
        if abs(b) < 0.9 * target:
            N = int(math.ceil(v / (target ** 2 - b ** 2) / 1024) * 1024)
            res_n, total = run(config(estimator, M, N, args.backend, args.dtype, seed=2, outer_antithetic=anti,
                                      control=control))
            err = res_n.cva - ref
            row.update({"outer_paths": N, "engine_seconds": res_n.summary["elapsed_seconds"], "seconds": total,
                        "cva": res_n.cva, "stderr": res_n.stderr, "error": err, "ci": list(res_n.ci),
                        "predicted_rmse": math.sqrt(b ** 2 + v / N), "reached": True})
        else:
            why = f"bias {b:.3g} +- {b_se:.2g} is not below 0.9 of the target {target:.3g}"
            row.update({"reached": False, "why": why})
        result["rows"].append(row)
        tail = (f"{row['outer_paths']:8d} {row['engine_seconds']:9.3f} {100 * row['error'] / ref:+8.3f} "
                f"{100 * row['predicted_rmse'] / ref:12.3f}" if row["reached"] else "   not reachable")
        name = estimator + ("+cv" if control else "")
        print(f"{name:12} {M:5d} {str(anti):>5} {100 * b / ref:+8.3f} +- {100 * b_se / ref:.3f} {tail}",
              flush=True)
        write_results(args.json, result)                                   # kept if a later row times out
    for M in args.mlmc:
        cfg = config("mlmc", M, 4096, args.backend, args.dtype, seed=2, target_rmse=f"{100 * args.target}%",
                     max_inner_paths=args.mlmc_max_inner)
        res, total = run(cfg)
        s = res.summary
        row = {"estimator": "mlmc", "inner_paths": M, "finest_inner_paths": s["inner_paths"],
               "outer_paths": s["outer_paths"], "engine_seconds": s["elapsed_seconds"], "seconds": total,
               "cva": res.cva, "stderr": res.stderr, "error": res.cva - ref, "ci": list(res.ci),
               "remaining_bias": s["remaining_bias"], "levels": s["levels"], "device": s["device"]}
        result["rows"].append(row)
        print(f"{'mlmc':12} {M:5d} {'':>14} {s['outer_paths']:8d} {s['elapsed_seconds']:9.3f} "
              f"{100 * row['error'] / ref:+8.3f}   finest M {s['inner_paths']}", flush=True)
        write_results(args.json, result)
    write_results(args.json, result)
    return result


if __name__ == "__main__":
    main()
