"""Whether two processes, each driving its own GPU, slow each other's host: the rate of small kernel launches (CuPy,
asynchronous; and each followed by a synchronization), of a few CuPy operations, and of a pure Python loop, in one
process alone and in two at once, and with the two pinned to the two hardware threads of one core or to two
cores; with the CPU seconds of the first process's busy threads during the last run (from /proc). A cluster
run's chunks of many small kernels took up to twice as long with two workers side by side
(``cluster_spread.py``); this separates the host's share (CPU, driver) from the rest.

Usage::

    python benchmarks/tools/launch_contention.py [--launches 20000] [--repeat 3] [--kinds "cupy ops"]
                                                 [--pairs 0,1 0,16]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path

KINDS = ("launch", "launch+sync", "cupy ops", "python")


def _siblings(cpu):
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    if not path.exists():
        return [cpu]
    out = []
    for part in path.read_text().strip().split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def _worker(gpu, kind, n, cores, barrier, queue):
    if cores is not None:
        os.sched_setaffinity(0, cores)
    import cupy as cp

    cp.cuda.Device(gpu).use()
    x = cp.zeros(1024, dtype=cp.float32)
    inc = cp.ElementwiseKernel("float32 a", "float32 b", "b = a + 1", "launch_contention_inc")

    def run(m):
        if kind == "launch":
            for _ in range(m):
                inc(x, x)
        elif kind == "launch+sync":
            for _ in range(m):
                inc(x, x)
                cp.cuda.get_current_stream().synchronize()
        elif kind == "cupy ops":
            for _ in range(m // 4):
                y = cp.where(x > 0, x, 0)
                x[:8] = y.sum()
        else:
            s = 0
            for i in range(m * 20):
                s += i
        cp.cuda.Device().synchronize()

    run(min(n, 1000))                                                       # compiled, warm
    before = _thread_cpu()
    barrier.wait()
    t0 = time.perf_counter()
    run(n)
    seconds = time.perf_counter() - t0
    after = _thread_cpu()
    busy = {f"{name}[{tid}]": after[(tid, name)] - before.get((tid, name), 0.0) for tid, name in after}
    queue.put((gpu, (seconds, {k: v for k, v in busy.items() if v > 0.05 * seconds})))


def _thread_cpu():
    """CPU seconds of each thread of this process by (id, name) (/proc; none where there is no /proc)."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []:
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[(tid, name)] = (int(fields[11]) + int(fields[12])) / tick                    # utime + stime
    return out


def measure(kind, gpus, n, cores=None):
    """Seconds of each process (one per GPU in ``gpus``, started together)."""
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(len(gpus)), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(g, kind, n, None if cores is None else [cores[i]], barrier, queue))
             for i, g in enumerate(gpus)]
    for p in procs:
        p.start()
    out = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    return [out[g][0] for g in gpus], [out[g][1] for g in gpus]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--pairs", nargs="*", default=[], help="more core pairs for the two processes, as A,B")
    args = ap.parse_args(argv)
    sib = _siblings(0)
    other = next(c for c in sorted(os.sched_getaffinity(0)) if c not in sib)
    print(f"cpus {os.cpu_count()}; cpu 0's hardware threads {sib}; a core apart: cpu {other}")
    modes = [("GPU 0 alone", [0], None), ("GPU 1 alone", [1], None), ("both, unpinned", [0, 1], None),
             ("both, two cores", [0, 1], [0, other])]
    if len(sib) > 1:
        modes.append(("both, one core's two threads", [0, 1], [sib[0], sib[1]]))
    for pair in args.pairs:
        a, b = (int(c) for c in pair.split(","))
        modes += [(f"GPU 0 alone on cpu {a}", [0], [a]), (f"both, cpus {a} and {b}", [0, 1], [a, b])]
    for kind in args.kinds:
        for name, gpus, cores in modes:
            runs = [measure(kind, gpus, args.launches, cores) for _ in range(args.repeat)]
            per = [1e6 * max(t) / args.launches for t, _ in runs]
            threads = "; ".join(f"{k} {v:.2f} s" for k, v in runs[-1][1][0].items())
            print(f"{kind:12s} {name:30s} us per launch: median {statistics.median(per):6.2f} "
                  f"(runs {', '.join(f'{p:.2f}' for p in per)}); busy threads of the first: {threads}", flush=True)


if __name__ == "__main__":
    main()
