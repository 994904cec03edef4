"""Where the time of a blocked Jacobi step goes, on the GPU (a tool for tuning, not a benchmark).

Usage::

    python benchmarks/tools/profile_jacobi.py [--n 1024 4096] [--inner 1 2 4 30]

For each n: the inner kernel (``block.block_eigh``) on the Gram matrices of one step, first on
random blocks (an early sweep) and then on nearly orthogonal ones (a late sweep), the gather and
the batched products of one step, and whole ``jacobi_svd`` (float64) / ``jacobi_eigh`` (float32)
calls with the inner sweeps capped at each value of ``--inner`` (time and outer sweeps).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def event_time(cp, fn, repeat=5):
    fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / repeat / 1e3


def main(argv=None):
    import cupy as cp

    from linalg_gpu.jacobi import block, blocked
    from linalg_gpu.jacobi.block import block_eigh

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--inner", type=int, nargs="+", default=[1, 2, 4, 30])
    ap.add_argument("--threads", type=int, nargs="+", default=[1024], help="threads per 64 x 64 inner matrix")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    w = blocked.BLOCK
    K = 2 * w
    for n in args.n:
        k = n // K
        for dt in (np.float64, np.float32):
            eps = float(np.finfo(dt).eps)
            X = cp.asarray(rng.standard_normal((k, K, n)).astype(dt))
            G = X @ X.transpose(0, 2, 1)
            Q, _ = cp.linalg.qr(cp.asarray(rng.standard_normal((n, n)).astype(dt)))
            Xo = (Q.T[:n].reshape(-1, K, n)[:k] * cp.asarray(np.logspace(0, -1, K, dtype=dt))[:, None]
                  + 1e-4 * X / np.sqrt(n))
            Go = Xo @ Xo.transpose(0, 2, 1)
            for nt in args.threads:
                block.THREADS[K] = nt
                t_rand = event_time(cp, lambda: block_eigh(G, np.sqrt(n) * eps, 30))
                t_orth = event_time(cp, lambda: block_eigh(Go, np.sqrt(n) * eps, 30))
                t_one = event_time(cp, lambda: block_eigh(G, np.sqrt(n) * eps, 1))
                print(f"n={n} {np.dtype(dt).name} (k={k} pairs of {K}), {nt} threads: inner kernel random "
                      f"{t_rand * 1e6:.0f} us, nearly orthogonal {t_orth * 1e6:.0f} us, one inner sweep "
                      f"{t_one * 1e6:.0f} us")
            block.THREADS[K] = args.threads[0]
            Xall = cp.asarray(rng.standard_normal((n, n)).astype(dt))
            idx = cp.asarray(rng.permutation(n // w))
            t_gather = event_time(cp, lambda: Xall.reshape(n // w, w, n)[idx])
            t_gram = event_time(cp, lambda: X @ X.transpose(0, 2, 1))
            Wt = G.transpose(0, 2, 1)
            t_upd = event_time(cp, lambda: Wt @ X)
            print(f"n={n} {np.dtype(dt).name}: gather {t_gather * 1e6:.0f} us, Gram {t_gram * 1e6:.0f} us, "
                  f"update {t_upd * 1e6:.0f} us")
        A = cp.asarray(rng.standard_normal((n, n)))
        S = cp.asarray(rng.standard_normal((n, n)).astype(np.float32))
        S = (S + S.T) / 2
        default = dict(blocked.INNER_SWEEPS)
        for inner in args.inner:
            blocked.INNER_SWEEPS.update(svd=inner, eigh=inner)
            for name, fn in (("jacobi_svd f64", lambda: blocked.jacobi_svd(A, return_info=True)),
                             ("jacobi_eigh f32", lambda: blocked.jacobi_eigh(S, return_info=True))):
                fn()
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                out = fn()
                cp.cuda.Device().synchronize()
                t = time.perf_counter() - t0
                info = out[-1]
                sweeps = info["sweeps"] if isinstance(info, dict) else info.sweeps
                print(f"  n={n} inner sweeps <= {inner}: {name} {t:.3f} s, {sweeps} outer sweeps")
        blocked.INNER_SWEEPS.update(default)


if __name__ == "__main__":
    main()
