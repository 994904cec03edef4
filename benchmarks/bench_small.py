"""Benchmark of linalg_gpu.small against numpy.linalg (CPU) on the same batches.

Usage:
    python benchmarks/bench_small.py [--batch 100000] [--sizes 8 16 32 64] [--dtypes float64 float32]
                                     [--repeat 3] [--json benchmarks/results/small_cpu.json]
    python benchmarks/bench_small.py --gpu [--json benchmarks/results/small_h100.json]

--gpu: batches of 2^20 systems (2^18 for n = 64) on the GPU, ours against cuSOLVER through CuPy
(cupy.linalg.solve: batched getrf/getrs; cupy.linalg.eigh: syevjBatched) in the same process on
the same inputs, timed with CUDA events: median of --repeat rounds, each round running ours, our
kernel alone and the competitor twice and timing the second call (so each timed call follows a
call of itself, and all three see the same drift of clocks). "ours" is the whole public call
(solve_small with its report, or eigh_small); LDL^T is also given as a fraction of the HBM
roofline (bytes of A, b and x over the measured device-to-device copy rate), for the call and for
its kernel alone.

On the CPU each row times one function on one batch of SPD systems (A = X X^T / n + I, the same
A and b for ours and the competitor), best of --repeat runs, and reports systems per second and the
ratio ours / numpy (> 1: ours is faster). The last rows run solve_small(method="auto") on the
paper's Fig. 2 Black-Scholes regression matrices in float32 and give the method mix.
The GPU columns come with the CUDA kernels (see the README's status).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from _results import write_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import linalg_gpu as lg  # noqa: E402


def spd_batch(rng, batch, n, dtype):
    X = rng.standard_normal((batch, n, n))
    A = X @ X.transpose(0, 2, 1) / n + np.eye(n)
    return A.astype(dtype), rng.standard_normal((batch, n)).astype(dtype)


def fig2_batch(rng, batch, dtype=np.float32, d=29, m=300, sigma=0.1, mu=0.1, t=0.1):
    """Regression matrices of Abbas-Turki-Graillat, Fig. 2: psi = (1, S^1..S^d), A = mean psi psi^T."""
    S = np.exp((mu - sigma**2 / 2) * t + sigma * np.sqrt(t) * rng.standard_normal((batch, m, d)))
    psi = np.concatenate([np.ones((batch, m, 1)), S], axis=-1).astype(dtype)
    y = rng.standard_normal((batch, m)).astype(dtype)
    return np.einsum("bmi,bmj->bij", psi, psi) / dtype(m), np.einsum("bmi,bm->bi", psi, y) / dtype(m)


def best_time(fn, repeat):
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def gpu_main(args):
    import cupy as cp

    from linalg_gpu._kernels import COMPILE_SECONDS
    from linalg_gpu.small import _gpu

    dev = cp.cuda.Device()
    name = cp.cuda.runtime.getDeviceProperties(dev.id)["name"].decode()

    def gpu_times(fns, repeat):
        """Median GPU seconds of each function in interleaved rounds: per round each function runs
        twice and its second call is timed, so that every timed call follows a call of itself (its
        steady state, as a repeated call sees it) and all functions see the same drift of clocks."""
        times = [[] for _ in fns]
        for _ in range(repeat):
            for fn, ts in zip(fns, times, strict=True):
                fn()
                start, end = cp.cuda.Event(), cp.cuda.Event()
                dev.synchronize()
                start.record()
                fn()
                end.record()
                end.synchronize()
                ts.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
        return [float(np.median(ts)) for ts in times]

    big = cp.empty(2**30, dtype=cp.uint8)                        # copy bandwidth: 1 GiB, read + write
    dst = cp.empty_like(big)
    (t_copy,) = gpu_times([lambda: cp.copyto(dst, big)], 20)
    bw = 2 * big.nbytes / t_copy
    big = dst = None
    print(f"GPU: {name}; device-to-device copy {bw / 1e12:.2f} TB/s (read + write)")
    header = (f"{'dtype':8} {'n':>3} {'function':22} {'batch':>8} {'ours ms':>9} {'cuSOLVER ms':>11} "
              f"{'ours Msys/s':>11} {'ratio':>6}  kernel alone; LDL^T roofline fraction (call/kernel)")
    print(header)
    print("-" * len(header))
    rows = []
    rng = np.random.default_rng(args.seed)
    for dname in args.dtypes:
        dtype = np.dtype(dname)
        for n in args.sizes:
            batch = 2**18 if n >= 64 else 2**20
            A, b = spd_batch(rng, 2**14, n, dtype)
            reps = batch // A.shape[0]
            Ag = cp.asarray(np.tile(A, (reps, 1, 1)))
            bg = cp.asarray(np.tile(b, (reps, 1)))
            ebatch = min(batch, 2**17)
            Ae = Ag[:ebatch]
            b3 = bg[..., None]
            cases = [
                ("ldlt_solve", batch, lambda: lg.solve_small(Ag, bg, method="ldlt", return_report=True),
                 lambda: _gpu.ldlt_stage(Ag, b3, True),
                 lambda: cp.linalg.solve(Ag, bg[..., None]), "cupy.linalg.solve"),
                ("solve_small(hh_pcr)", batch,
                 lambda: lg.solve_small(Ag, bg, method="householder_pcr", return_report=True),
                 lambda: _gpu.householder_pcr_stage(Ag, b3),
                 lambda: cp.linalg.solve(Ag, bg[..., None]), "cupy.linalg.solve"),
                ("eigh_small", ebatch, lambda: lg.eigh_small(Ae, assume_symmetric=True),
                 lambda: _gpu.eigh_small(Ae), lambda: cp.linalg.eigh(Ae), "cupy.linalg.eigh"),
            ]
            for fname, bsz, ours, kernel, ref, comp in cases:
                if args.only and fname not in args.only:
                    continue
                t_o, t_k, t_r = gpu_times((ours, kernel, ref), args.repeat)
                row = {"dtype": dname, "n": n, "function": fname, "batch": bsz, "ours_s": t_o, "kernel_s": t_k,
                       "competitor": comp, "competitor_s": t_r, "ours_systems_per_s": bsz / t_o,
                       "competitor_systems_per_s": bsz / t_r, "ratio_vs_competitor": t_r / t_o}
                roof = f"kernel {t_k * 1e3:.3f} ms"
                if fname == "ldlt_solve":
                    nbytes = bsz * (n * n + 2 * n) * dtype.itemsize
                    row["roofline_fraction"] = nbytes / t_o / bw
                    row["kernel_roofline_fraction"] = nbytes / t_k / bw
                    roof += f", roofline {row['roofline_fraction']:.2f}/{row['kernel_roofline_fraction']:.2f}"
                rows.append(row)
                print(f"{dname:8} {n:3d} {fname:22} {bsz:8d} {t_o * 1e3:9.3f} {t_r * 1e3:11.3f} "
                      f"{bsz / t_o / 1e6:11.2f} {t_r / t_o:6.2f}  {roof}")
            Ag = bg = Ae = None
            cp.get_default_memory_pool().free_all_blocks()
    A, b = fig2_batch(rng, 2**15)
    reps = 2**20 // A.shape[0]
    Ag, bg = cp.asarray(np.tile(A, (reps, 1, 1))), cp.asarray(np.tile(b, (reps, 1)))
    t_auto, t_ref = gpu_times((lambda: lg.solve_small(Ag, bg, return_report=True),
                               lambda: cp.linalg.solve(Ag, bg[..., None])), args.repeat)
    _, rep = lg.solve_small(Ag, bg, return_report=True)
    mix = rep.counts()
    print(f"\nFig. 2 matrices (d=29, n=30, M_k=300, float32), batch 2^20: auto {t_auto * 1e3:.2f} ms "
          f"({2**20 / t_auto / 1e6:.1f} M systems/s; cupy.linalg.solve {t_ref * 1e3:.2f} ms), "
          f"mix {mix}")
    print("first-call compile times [s]:", {k: round(v, 2) for k, v in COMPILE_SECONDS.items()})
    return {
        "benchmark": "small_gpu", "device": name, "repeat": args.repeat,
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "cupy": cp.__version__, "copy_bandwidth_bytes_per_s": bw, "rows": rows,
        "fig2_auto": {"batch": 2**20, "seconds": t_auto, "competitor": "cupy.linalg.solve",
                      "competitor_s": t_ref, "method_mix": mix},
        "compile_seconds": dict(COMPILE_SECONDS),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--eigh-batch", type=int, default=None, help="batch for the eigen rows (default batch/10)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"], choices=["float32", "float64"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--gpu", action="store_true", help="the GPU benchmark against cuSOLVER (CuPy)")
    ap.add_argument("--only", nargs="+", default=None, help="GPU rows: only these functions")
    args = ap.parse_args(argv)
    if args.gpu:
        result = gpu_main(args)
        write_results(args.json, result)
        return result
    eig_batch = args.eigh_batch or max(1, args.batch // 10)
    rng = np.random.default_rng(args.seed)
    rows = []
    header = f"{'dtype':8} {'n':>3} {'function':24} {'batch':>7} {'ours [s]':>9} {'numpy [s]':>9} " \
             f"{'ours Msys/s':>11} {'ratio':>6}"
    print(f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; numpy {np.__version__}")
    print(header)
    print("-" * len(header))
    for dname in args.dtypes:
        dtype = np.dtype(dname)
        for n in args.sizes:
            A, b = spd_batch(rng, args.batch, n, dtype)
            Ae = A[:eig_batch]
            cases = [
                ("ldlt_solve", args.batch, lambda: lg.ldlt_solve(A, b), lambda: np.linalg.solve(A, b[..., None])),
                ("solve_small(hh_pcr)", args.batch, lambda: lg.solve_small(A, b, method="householder_pcr"),
                 lambda: np.linalg.solve(A, b[..., None])),
                ("eigh_small", eig_batch, lambda: lg.eigh_small(Ae), lambda: np.linalg.eigh(Ae)),
            ]
            for name, bsz, ours, ref in cases:
                t_ours, t_ref = best_time(ours, args.repeat), best_time(ref, args.repeat)
                row = {"dtype": dname, "n": n, "function": name, "batch": bsz, "ours_s": t_ours,
                       "numpy_s": t_ref, "competitor": "numpy.linalg." + ("eigh" if "eigh" in name else "solve"),
                       "ours_systems_per_s": bsz / t_ours, "ratio_vs_numpy": t_ref / t_ours}
                rows.append(row)
                print(f"{dname:8} {n:3d} {name:24} {bsz:7d} {t_ours:9.3f} {t_ref:9.3f} "
                      f"{bsz / t_ours / 1e6:11.3f} {t_ref / t_ours:6.2f}")
    A, b = fig2_batch(rng, args.batch // 4 or 1)
    t_auto = best_time(lambda: lg.solve_small(A, b, return_report=True), args.repeat)
    _, rep = lg.solve_small(A, b, return_report=True)
    cond = np.linalg.cond(A[:2000].astype(np.float64))
    mix = rep.counts()
    print(f"\nFig. 2 matrices (d=29, n=30, M_k=300, float32), batch {A.shape[0]}: auto {t_auto:.3f} s, "
          f"method mix {mix}, max residual {np.nanmax(rep.residual):.2e}, "
          f"cond (float64, median of 2000) {np.median(cond):.2e}")
    result = {
        "benchmark": "small", "device": f"CPU {platform.processor() or platform.machine()} "
        f"({os.cpu_count()} cores)", "date": dt.datetime.now().isoformat(timespec="seconds"),
        "numpy": np.__version__, "rows": rows,
        "fig2_auto": {"batch": int(A.shape[0]), "seconds": t_auto, "method_mix": mix,
                      "max_residual": float(np.nanmax(rep.residual)), "median_cond": float(np.median(cond))},
    }
    write_results(args.json, result)
    return result


if __name__ == "__main__":
    main()
