"""Longstaff-Schwartz stage by stage, on the GPU and the CPU in one run.

Usage::

    python benchmarks/bench_lsm.py [--paths 1048576] [--cpu-paths 131072] [--json benchmarks/results/lsm_h100.json]

Two cases (the issue's): Andersen & Broadie's 5-asset max call (9 dates, quadratic basis,
n = 21) and the Longstaff-Schwartz Bermudan put (1 asset, 50 dates, Laguerre basis, n = 4).
Stages: keyed Philox normals (:func:`cva.market.rng.normals`), exact log-normal paths, regression
assembly (basis and the batched normal equations), solves (:func:`linalg_gpu.solve_small`),
exercise update. The regressions run in the config default's dtype (``regression.dtype: auto``:
float64 for the Laguerre basis, :func:`cva.engine.basis.regression_dtype`). On the GPU our Philox is
compared with CuPy's own generators on the same number of normals, and its output rate with the
device-to-device copy bandwidth. The CPU runs the same code on numpy with ``--cpu-paths`` paths;
per-path rates make the two comparable.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import time
from pathlib import Path

import numpy as np
from _results import write_results

from cva.engine import basis
from cva.engine.lsm import longstaff_schwartz
from cva.instruments.products import Contract
from cva.market import rng
from cva.market.model import BlackScholes
from linalg_gpu._backend import cupy_available

CASES = {
    "max_call_5": dict(model=dict(spot=[100.0] * 5, vol=0.2, dividend=0.1, rate=0.05, correlation=0.0),
                       contract=dict(style="bermudan", payoff="call", underlying="max", strike=100.0, maturity=3.0,
                                     n_exercise=9), basis="quadratic"),
    "bermudan_put": dict(model=dict(spot=[36.0], vol=0.2, dividend=0.0, rate=0.06, correlation=0.0),
                         contract=dict(style="bermudan", payoff="put", underlying="asset", asset=0, strike=40.0,
                                       maturity=1.0, n_exercise=50), basis="laguerre"),
}


def _sync(xp):
    if xp is not np:
        xp.cuda.Device().synchronize()


def run_case(name, xp, dtype, paths, seed=7):
    spec = CASES[name]
    model = BlackScholes(**spec["model"])
    c = Contract(**spec["contract"])
    times = c.exercise_times()
    grid = np.concatenate([[0.0], times])
    stages = {}
    _sync(xp)
    t0 = time.perf_counter()
    z = rng.normals(seed, "price", (0, 1), (0, paths), 0, (0, len(times)), model.d, dtype=dtype, xp=xp)
    _sync(xp)
    t1 = time.perf_counter()
    S = model.paths(model.spot, grid, z)
    _sync(xp)
    t2 = time.perf_counter()
    stages["normals"], stages["paths"] = t1 - t0, t2 - t1
    z = None

    def psi(X, h):
        return basis.evaluate(spec["basis"], X, model.spot, order_statistics=c.symmetric_in_assets)

    lsm_t = {}
    rdt = basis.regression_dtype("auto", dtype, spec["basis"])                   # the config's default
    res = longstaff_schwartz(S, times, c.payoff_value, psi, model.rate, solver={"method": "auto"}, timings=lsm_t,
                             regression_dtype=rdt)
    _sync(xp)
    stages.update(lsm_t)
    total = time.perf_counter() - t0
    value = float(res.value[0])
    se = float(res.stderr[0])
    counts = {}
    for rep in res.reports:
        for k, v in rep.counts().items():
            counts[k] = counts.get(k, 0) + v
    n_normals = paths * len(times) * model.d
    return {"case": name, "dtype": np.dtype(dtype).name, "regression_dtype": rdt.name, "paths": paths,
            "dates": len(times), "d": model.d,
            "p": basis.basis_size(spec["basis"], model.d), "normals": n_normals, "stage_seconds": stages,
            "total_seconds": total, "paths_per_second": paths / total, "normals_per_second": n_normals / stages[
                "normals"], "price": value, "stderr": se, "solver_mix": counts}


def gpu_generators(cp, count, dtype, repeat=5):
    """Seconds per ``count`` normals: ours against CuPy's legacy (cuRAND XORWOW) and Philox generators."""
    from cupyx.profiler import benchmark

    def t(fn):
        return float(np.median(benchmark(fn, n_repeat=repeat, n_warmup=1).gpu_times[0]))

    paths = count // (9 * 5)
    out = {"ours_philox": t(lambda: rng.normals(7, "price", (0, 1), (0, paths), 0, (0, 9), 5, dtype=dtype, xp=cp))}
    n = paths * 45
    out["cupy.random.standard_normal"] = t(lambda: cp.random.standard_normal(n, dtype=dtype))
    try:
        gen = cp.random.Generator(cp.random.Philox4x3210(7))
        out["cupy Generator(Philox4x3210)"] = t(lambda: gen.standard_normal(n, dtype=dtype))
    except Exception as exc:                                       # pragma: no cover - version dependent
        out["cupy Generator(Philox4x3210)"] = f"unavailable: {exc}"
    return n, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--paths", type=int, default=2**20, help="paths on the GPU")
    ap.add_argument("--cpu-paths", type=int, default=2**17, help="paths on the CPU")
    ap.add_argument("--repeat", type=int, default=3, help="GPU repeats (the median is kept)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    result = {"benchmark": "lsm", "date": dt.datetime.now().isoformat(timespec="seconds"),
              "cpu": platform.processor() or platform.machine(), "rows": []}
    backends = [("cpu", np, args.cpu_paths)]
    if cupy_available():
        import cupy as cp

        name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
        result.update(device=name, cupy=cp.__version__)
        big = cp.empty(2**30, dtype=cp.uint8)
        dst = cp.empty_like(big)
        from cupyx.profiler import benchmark

        t_copy = float(np.median(benchmark(lambda: cp.copyto(dst, big), n_repeat=20, n_warmup=2).gpu_times[0]))
        bw = 2 * big.nbytes / t_copy
        big = dst = None
        result["copy_bandwidth_bytes_per_s"] = bw
        backends.insert(0, ("gpu", cp, args.paths))
        print(f"GPU: {name}; copy {bw / 1e12:.2f} TB/s")
    print(f"{'backend':7} {'case':13} {'dtype':8} {'regr':8} {'paths':>8} {'total s':>8} {'normals':>8} {'paths':>8} "
          f"{'assembly':>8} {'solve':>8} {'exercise':>8} {'price':>9} {'stderr':>7}")
    for bname, xp, paths in backends:
        for case in CASES:
            for dtype in (np.float32, np.float64):
                runs = [run_case(case, xp, dtype, paths) for _ in range(args.repeat if xp is not np else 1)]
                row = sorted(runs, key=lambda r: r["total_seconds"])[len(runs) // 2]
                row["backend"] = bname
                s = row["stage_seconds"]
                print(f"{bname:7} {case:13} {row['dtype']:8} {row['regression_dtype']:8} {paths:8d} "
                      f"{row['total_seconds']:8.3f} "
                      f"{s['normals']:8.3f} {s['paths']:8.3f} {s.get('assembly', 0):8.3f} {s.get('solve', 0):8.3f} "
                      f"{s.get('exercise', 0):8.3f} {row['price']:9.4f} {row['stderr']:7.4f}")
                result["rows"].append(row)
    if cupy_available():
        gens = []
        for dtype in (np.float32, np.float64):
            n, times = gpu_generators(cp, 2**20 * 45, dtype)
            ours = times["ours_philox"]
            entry = {"dtype": np.dtype(dtype).name, "normals": n, "seconds": times,
                     "ours_normals_per_s": n / ours,
                     "ours_fraction_of_copy_bandwidth": n * np.dtype(dtype).itemsize / ours / bw}
            for k, v in times.items():
                if k != "ours_philox" and isinstance(v, float):
                    entry[f"ratio_vs {k}"] = v / ours               # > 1: ours faster
            gens.append(entry)
            print(f"normals {np.dtype(dtype).name}: " + ", ".join(
                f"{k} {n / v / 1e9:.1f} G/s" if isinstance(v, float) else f"{k} {v}" for k, v in times.items())
                + f"; ours at {entry['ours_fraction_of_copy_bandwidth']:.2f} of the copy bandwidth (write only)")
        result["generators"] = gens
        from linalg_gpu._kernels import COMPILE_SECONDS

        result["compile_seconds"] = dict(COMPILE_SECONDS)
    write_results(args.json, result)
    return result


if __name__ == "__main__":
    main()
