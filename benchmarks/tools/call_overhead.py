"""Where the GPU time of a solve_small call goes beyond its kernel (bench_small's inputs, H100).

Usage: python benchmarks/tools/call_overhead.py [breakdown|statements|idle] [method:dtype:n ...]
       (default: all three modes on householder_pcr:float64:16 and ldlt:float64:64)

breakdown   the call, its stage alone and cupy.linalg.solve interleaved (one of each per round, CUDA
            events, median of 15), and inside the call events at the stage's entry and exit:
            pre (call entry -> stage entry), mid (the stage), post (stage exit -> call return).
statements  host time of each top-level statement of solve_small (instrumented copy, GPU idle at
            the call's entry).
idle        the stage timed after a host busy-wait of d microseconds inside the timed interval
            (time - d: does idle time before a kernel cost more than itself?), 20 stages / calls
            back to back, and the call right after: a call, cuSOLVER, cuSOLVER and the memory pool's
            free blocks released, a 1 GiB copy, 5 ms of host sleep. Methods: ldlt, householder_pcr
            (solve_small) and eigh (eigh_small, 2^17 systems; idle only).
"""

import ast
import inspect
import sys
import textwrap
import time
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_small import spd_batch  # noqa: E402

import linalg_gpu as lg  # noqa: E402
from linalg_gpu.small import _gpu, robust  # noqa: E402

REPEAT = 15


def inputs(rng, dtype, n, method):
    batch = 2**17 if method == "eigh" else 2**18 if n >= 64 else 2**20
    A, b = spd_batch(rng, 2**14, n, dtype)
    reps = batch // A.shape[0]
    return cp.asarray(np.tile(A, (reps, 1, 1))), cp.asarray(np.tile(b, (reps, 1)))


def events_ms(fn):
    """(GPU ms between events around fn, host ms, start event, end event), the GPU idle before."""
    cp.cuda.Device().synchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    h0 = time.perf_counter()
    s.record()
    fn()
    e.record()
    h1 = time.perf_counter()
    e.synchronize()
    return cp.cuda.get_elapsed_time(s, e), (h1 - h0) * 1e3, s, e


def stage_and_call(Ag, bg, method):
    """The stage of ``method`` alone (cuda kernel + its allocations), the public call and cuSOLVER's."""
    b3 = bg[..., None]
    if method == "eigh":
        return (lambda: _gpu.eigh_small(Ag), lambda: lg.eigh_small(Ag, assume_symmetric=True),
                lambda: cp.linalg.eigh(Ag))
    if method == "ldlt":
        def stage():
            return _gpu.ldlt_stage(Ag, b3, True)
    else:
        def stage():
            return _gpu.householder_pcr_stage(Ag, b3)

    def call():
        return lg.solve_small(Ag, bg, method=method, return_report=True)
    return stage, call, lambda: cp.linalg.solve(Ag, b3)


def breakdown(Ag, bg, method, label):
    stage, call, ref = stage_and_call(Ag, bg, method)
    for f in (call, stage, ref):
        f()
    marks, run_stage = {"in": cp.cuda.Event(), "out": cp.cuda.Event()}, _gpu.run_stage

    def marked(*args):                       # (events made here would put their creation in pre and post)
        marks["in"].record()
        out = run_stage(*args)
        marks["out"].record()
        return out

    res = {k: [] for k in ("call", "stage", "ref", "pre", "mid", "post", "host call", "host stage")}
    _gpu.run_stage = marked
    try:
        for _ in range(REPEAT):
            t, h, s, e = events_ms(call)
            res["call"].append(t)
            res["host call"].append(h)
            res["pre"].append(cp.cuda.get_elapsed_time(s, marks["in"]))
            res["mid"].append(cp.cuda.get_elapsed_time(marks["in"], marks["out"]))
            res["post"].append(cp.cuda.get_elapsed_time(marks["out"], e))
            t, h, *_ = events_ms(stage)
            res["stage"].append(t)
            res["host stage"].append(h)
            res["ref"].append(events_ms(ref)[0])
    finally:
        _gpu.run_stage = run_stage
    med = {k: float(np.median(v)) for k, v in res.items()}
    print(f"{label}: " + " ".join(f"{k}={v:.3f}" for k, v in med.items()) + " ms; ratio against "
          f"cupy.linalg.solve: call {med['ref'] / med['call']:.2f}, stage {med['ref'] / med['stage']:.2f}")


def statements(Ag, bg, method, label):
    src = textwrap.dedent(inspect.getsource(robust.solve_small))
    tree = ast.parse(src)
    body = []
    for st in tree.body[0].body:
        body += [st, ast.parse(f"_lap({st.lineno})").body[0]]
    tree.body[0].body = body
    ast.fix_missing_locations(tree)
    laps, clock = {}, [0.0]

    def _lap(line):
        now = time.perf_counter()
        laps.setdefault(line, []).append((now - clock[0]) * 1e6)
        clock[0] = now

    ns = dict(robust.__dict__, _lap=_lap)
    exec(compile(tree, "solve_small (timed)", "exec"), ns)
    for _ in range(25):
        cp.cuda.Device().synchronize()
        clock[0] = time.perf_counter()
        ns["solve_small"](Ag, bg, method=method, return_report=True)
    lines, total = src.splitlines(), 0.0
    print(f"{label}: host time per statement (median of 22, us; those over 3 us)")
    for line, v in laps.items():
        m = float(np.median(v[3:]))
        total += m
        if m > 3:
            print(f"  {m:8.1f}  {lines[line - 1].strip()[:100]}")
    print(f"  {total:8.1f}  total")


def idle(Ag, bg, method, label):
    stage, call, ref = stage_and_call(Ag, bg, method)
    stage(), call()

    def spin(us):
        end = time.perf_counter() + us * 1e-6
        while time.perf_counter() < end:
            pass

    res = {}
    for _ in range(REPEAT):
        for d in (0, 50, 100, 200, 400, 1000):
            for kind, fn in (("stage", stage), ("call", call)):
                res.setdefault((kind, d), []).append(events_ms(lambda: (spin(d), fn()))[0] * 1e3 - d)  # noqa: B023
    print(f"{label}: time - busy-wait (us)")
    for (kind, d), v in res.items():
        print(f"  {kind:6s} after {d:5d} us: {np.median(v):9.1f}")
    def twenty(fn):                          # each output dropped at once, as a caller's loop would
        for _ in range(20):
            fn()

    for kind, fn in (("stages", stage), ("calls", call)):
        t = events_ms(lambda: twenty(fn))[0]  # noqa: B023
        print(f"  20 {kind} back to back: {t * 1e3 / 20:.1f} us each")
    # the call right after: a call, cuSOLVER (whose workspace goes back to the memory pool), cuSOLVER and the
    # pool's free blocks released, a 1 GiB copy (L2 and HBM traffic, no cuSOLVER), 5 ms of host sleep
    pool = cp.get_default_memory_pool()
    big = cp.empty(2**30, dtype=cp.uint8)
    dst = cp.empty_like(big)
    befores = {"a call": call, "cuSOLVER": ref, "cuSOLVER + free_all_blocks": lambda: (ref(), pool.free_all_blocks()),
               "a 1 GiB copy": lambda: cp.copyto(dst, big), "5 ms of sleep": lambda: time.sleep(5e-3)}
    after = {k: [] for k in befores}
    for _ in range(REPEAT):
        for what, before in befores.items():
            before()
            cp.cuda.Device().synchronize()
            after[what].append(events_ms(call)[0] * 1e3)
    big = dst = None
    print("  the call after " + ", after ".join(f"{k}: {np.median(v):.1f} us" for k, v in after.items())
          + f" (memory pool {pool.total_bytes() / 2**30:.2f} GiB, {pool.used_bytes() / 2**30:.2f} in use)")


def main(argv):
    modes = [a for a in argv if a in ("breakdown", "statements", "idle")] or ["breakdown", "statements", "idle"]
    cases = [a for a in argv if ":" in a] or ["householder_pcr:float64:16", "ldlt:float64:64"]
    rng = np.random.default_rng(2026)
    for case in cases:
        method, dtype, n = case.split(":")
        Ag, bg = inputs(rng, np.dtype(dtype), int(n), method)
        for mode in modes:
            if method == "eigh" and mode != "idle":
                continue
            globals()[mode](Ag, bg, method, f"{dtype} n = {n} {method}")
        Ag = bg = None
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main(sys.argv[1:])
