"""Thin launchers of the CUDA kernels of linalg_gpu.small (cupy arrays in, cupy arrays out).

Each stage takes the batch-first arrays A (B, n, n) and b (B, n, r), contiguous and of one
float dtype, and returns the same tuple as the numpy stages of ``robust.py``:
x (B, n, r), cond (B,), n_discarded (B,), ok (B,), residual (B,) [, nonfinite (B,), asym (B,)].
Per-system flags stay on the device. Kernels: ``cuda/ldlt.cu``, ``cuda/householder_pcr.cu``,
``cuda/eigh_small.cu`` (numpy twins: ``ldlt.py``, ``householder.py`` + ``pcr.py``,
``tridiag_eigh.py``). LDL^T and Householder + PCR: W lanes per system with R = ceil(n / W) rows per
lane in registers (``_ldlt_lanes``, ``_hh_lanes``; LDL^T above ``LDLT_ROLLED_ABOVE``: a warp per
system, rolled loops); the eigen kernels: n threads per system, and for eigh_small with n <= 12 (float32;
float64: 10) one thread per system (``cuda/eigh_jacobi.cu``, twin ``jacobi_eigh.py``). Several systems per
block.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .._kernels import get_function
from ._common import division_tree

MAX_N = 64          # largest n the kernels are instantiated for (shared memory per system)
THREADS = 128       # threads per block: the eigen kernels for n <= 32 (whole warps of systems; n > 32: up
                    # to 256), the register-row Householder + PCR kernel with W < 32 and LDL^T for 32 < n <= 48
# Threads per block of the kernels with a warp per system and a whole copy of A in shared memory
# (float64 n = 64: 34 KB per system): LDL^T above LDLT_ROLLED_ABOVE and Householder + PCR with W = 32. Smaller
# blocks waste less shared memory per SM (four 34 KB systems per block leave one block, 4 warps, per SM;
# one or two per block, 6 warps). Measured on the H100 (kernel, 2^18 systems, 32 / 64 / 128 threads):
# LDL^T float64 n = 64 7.77 / 7.93 / 10.4 ms, n = 56 7.73 / 7.84 / 8.17, n = 49 5.78 / 5.94 / 6.50;
# float32 n = 64 3.79 / 3.82 / 3.99, n = 56 and 49 within 2 %. Householder + PCR float64 n = 64 36.9 /
# 33.0 / 42.3 ms, n = 56 21.2 / 20.4 / 20.1; float32 n = 64 10.6 / 10.4 / 10.3; n = 32 (float64), 40 and 48
# within 2 %.
ROLLED_THREADS = 32
HH_WARP_THREADS = 64


@lru_cache(maxsize=None)
def _max_shared(device_id):
    import cupy as cp

    return int(cp.cuda.Device(device_id).attributes["MaxSharedMemoryPerBlockOptin"])


_SHMEM_SET = {}      # id(kernel) -> (kernel, the dynamic shared memory it was allowed): attributes set once


def _prefer_shared(fn, shmem):
    """Ask for the largest shared-memory carveout: the kernels are limited by shared memory per SM.
    The attributes are set on a kernel's first launch (or when it needs more shared memory): each
    setting is a driver call on the path of every solve."""
    if _SHMEM_SET.get(id(fn), (None, -1))[1] >= shmem:
        return
    if shmem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = shmem
    fn.preferred_shared_memory_carveout = 100
    _SHMEM_SET[id(fn)] = (fn, shmem)


def _lanes(n):
    """Threads per system, as Group<N>::W in cuda/common.cuh: a warp holds 32 // lanes systems."""
    return (n if 32 % n == 0 else 32) if n <= 32 else n


@lru_cache(maxsize=None)
def _sm_limits(device_id):
    """Shared memory per SM, shared memory the driver reserves per block, registers per SM (read once per
    device, as _max_shared: Device.attributes queries every attribute, and the eigen launches ask each call)."""
    import cupy as cp

    at = cp.cuda.Device(device_id).attributes
    return (int(at["MaxSharedMemoryPerMultiprocessor"]), int(at.get("ReservedSharedMemoryPerBlock", 1024)),
            int(at["MaxRegistersPerMultiprocessor"]))


def _systems_per_block(n, per_system_bytes, regs, device_id, max_threads=256, lockstep=False):
    """Systems per block of the eigen kernels, from the systems resident per SM (shared memory, registers per
    SM sub-partition, 32 blocks and 64 warps per SM). n <= 32 (whole warps of systems, at most THREADS
    threads): the largest block that keeps at least 85 % of the most resident systems, because the warps of
    a block share the instruction cache (they start together and run the same steps). n > 32 (n threads
    per system, __syncthreads over the block, at most ``max_threads``: the kernel's __launch_bounds__): the
    most resident systems, then the fewest idle lanes, then the smallest block, or with ``lockstep`` (float32,
    whose register-row loops make the code large) the largest block of at most 128 threads. Measured on the
    H100 (kernel, 2^17 systems; systems per block: ms): float32 n = 32 4: 8.8, 2: 10.1 (12 and 14 resident);
    float64 n = 32 4: 31.3, 3: 23.0, 2: 22.5, 1: 24.4 (4, 6, 6, 7); float32 n = 48 5: 56.3, 3: 48.0, 2: 46.5,
    1: 61.9 (1: two warps for 48 threads). 2026-11-24, as many resident each way: eigh_small float32 n = 64
    1: 45.98, 2: 36.17, 3: 37.87 (Nsight Compute: the kernel waits on the instruction cache, and a block's
    systems run the same steps together), 2^16 systems n = 52 1: 16.38, 2: 12.98, n = 60 1: 21.40, 2: 17.51;
    eig_truncate_solve float32 n = 64 1: 24.45, 2: 23.67, float64 1: 73.20, 2: 75.15; eigh_small float64
    n = 64 1: 113.6, 3: 122.3, n = 56 1: 103.3, 3: 109.5 (W in shared memory then; with float64's register
    rows, 2026-11-24 05:44, both tie-breaks picked the same blocks at n = 33, 40, 48, 56 and 64)."""
    lanes = _lanes(n)
    step = 32 // lanes if n <= 32 else 1
    top = max(step, THREADS // lanes if n <= 32 else max_threads // n)
    sm_bytes, reserved, sm_regs = _sm_limits(device_id)
    limit = _max_shared(device_id)
    warp_regs = -(-regs * 32 // 256) * 256                       # allocated per warp, in units of 256
    per_smsp = sm_regs // 4 // warp_regs if warp_regs else 16   # warps per SM sub-partition (4 per SM)
    resident, busy = {}, {}
    for spb in range(step, top + 1, step):
        if spb * per_system_bytes > limit and spb > step:
            break
        warps = -(-spb * lanes // 32)
        blocks = min(32, 64 // warps, sm_bytes // (spb * per_system_bytes + reserved), 4 * per_smsp // warps)
        resident[spb] = blocks * spb
        busy[spb] = spb * lanes / (32 * warps)
    most = max(resident.values())
    if n <= 32:
        return max(spb for spb, k in resident.items() if k >= 0.85 * most)
    tied = [spb for spb, k in resident.items() if k == most]
    if lockstep:
        return min(tied, key=lambda spb: (-busy[spb], spb * n > 128, -spb if spb * n <= 128 else spb))
    return min(tied, key=lambda spb: (-busy[spb], spb))


_SPB = {}           # (id(kernel), n, bytes per system) -> _systems_per_block (a kernel is per device)
EIGH_BLOCK_ABOVE_32 = {4: 192, 8: 256}   # eigh_small.cu, eigh_block_threads: by itemsize, above n = 32


def _launch(fn, B, n, per_system_bytes, args_fn, max_threads=256, lockstep=False):
    """Launch an eigen kernel with _systems_per_block systems per block (chosen once per kernel)."""
    import cupy as cp

    key = (id(fn), n, per_system_bytes)
    spb = _SPB.get(key)
    if spb is None:                                              # (tens of microseconds of host time)
        spb = _SPB[key] = _systems_per_block(n, per_system_bytes, fn.num_regs, cp.cuda.Device().id, max_threads,
                                             lockstep)
    shmem = spb * per_system_bytes
    _prefer_shared(fn, shmem)
    grid = (B + spb - 1) // spb
    if grid:
        fn((grid,), (spb * _lanes(n),), args_fn(spb), shared_mem=shmem)


@lru_cache(maxsize=None)
def _tree_device(n, device_id):
    import cupy as cp

    leaves, levels = division_tree(n)
    flat = [len(leaves)] + [v for leaf in leaves for v in leaf]
    merges = [(s, n1, n2) for n1, n2, starts in levels for s in starts]
    flat += [len(merges)] + [v for m in merges for v in m]
    rounds = _merge_rounds(n, leaves, merges)
    flat += [len(rounds)] + [v for r in rounds for v in r]
    return cp.asarray(np.array(flat, dtype=np.int32))


def _merge_rounds(n, leaves, merges):
    """The rounds of cuda/tridiag_eigh.cuh: a merge runs one round after the later of its children
    (leaves: round -1). Per round: the largest merge size, then for each index the merge holding it,
    start | n1 << 8 | n2 << 16, or -1. ``merges`` (start, n1, n2) deepest first."""
    done = {(s, size): -1 for s, size in leaves}
    rounds = []
    for s, n1, n2 in merges:                                   # children come before their parent
        g = 1 + max(done[(s, n1)], done[(s + n1, n2)])
        done[(s, n1 + n2)] = g
        if g == len(rounds):
            rounds.append([0] + [-1] * n)
        rounds[g][0] = max(rounds[g][0], n1 + n2)
        rounds[g][1 + s:1 + s + n1 + n2] = [s | n1 << 8 | n2 << 16] * (n1 + n2)
    return rounds


def _outputs(b):
    import cupy as cp

    B = b.shape[0]
    return cp.empty_like(b), cp.empty(B, dtype=b.dtype), cp.empty(B, dtype=b.dtype)


def _ldlt_lanes(n, itemsize):
    """Lanes per system W of ldlt_solve in cuda/ldlt.cu (a power of two dividing 32, R = ceil(n / W) rows
    per lane), for n <= ``LDLT_ROLLED_ABOVE[itemsize]``.

    The rule, from a sweep of W on the H100 (2^20 systems, n = 8 ... 64, both dtypes): at most 4 rows
    per lane, and W doubled while a lane's rows (n (R + 1) / 2 entries) would take more than 96
    registers; at least 4 lanes for float32 and 2 for float64. It gave the best W measured at n = 8,
    16, 32, 64 (both dtypes) and 48 (float32); without the floor float32 n = 8 would get W = 2 (0.19
    against 0.17 ms). Exceptions measured since: ``_LDLT_LANES_MEASURED``.
    """
    if (n, itemsize) in _LDLT_LANES_MEASURED:
        return _LDLT_LANES_MEASURED[n, itemsize]
    w = 4 if itemsize == 4 else 2
    while w < 32 and (w * 4 < n or n * (-(-n // w) + 1) // 2 * itemsize // 4 > 96):
        w *= 2
    return w


# Where a later sweep (2026-11-23, cp.async loads) beat the rule: float64 n = 32 W = 8 6.12 ms against
# 6.42 ms for the rule's W = 16. A larger register budget in the rule would take that but also give
# float64 n = 40 W = 16 (23.9 ms against 16.5 ms for W = 32), so it is an exception, not a new rule.
_LDLT_LANES_MEASURED = {(32, 8): 8}


# n above which LDL^T runs ldlt_solve_rolled (cuda/ldlt.cu: rolled loops, the unrolled steps overflow the
# instruction cache), per itemsize; measured on the H100 (kernel, 2^18 systems), ldlt_solve (128 threads
# per block) against ldlt_solve_rolled (32): float32 n = 48 3.26 against 3.84 ms, n = 49 3.81 against
# 3.24; float64 n = 40 4.75 against 5.04, n = 41 4.91 against 4.69, n = 44 5.76 against 5.18, n = 47 6.06
# against 5.47, n = 48 7.24 against 6.67 (2026-11-23, 2026-11-23 08:48; on 2026-11-23 06:12, with 128 threads for
# both, n = 56 and 64 were 1.1-1.7x faster rolled).
LDLT_ROLLED_ABOVE = {4: 48, 8: 40}


def _rows_layout(n, w, itemsize):
    """Shared elements per system of the register-row kernels (cuda/ldlt.cu, cuda/householder_pcr.cu):
    RowsLayout::PA + RowsLayout::PC of cuda/common.cuh."""
    s, v, nb, col = n | 1, 16 // itemsize, 128 // itemsize, (n + 3) // 4 * 4
    return n * s + (w * s - n * s) % nb + 3 * col + (v - 3 * col % (2 * v)) % (2 * v)


def _launch_rows(fn, B, n, w, threads, args, itemsize, extra=0):
    """Launch a register-row kernel (RowsLayout, RowsSlot in cuda/common.cuh): w lanes per system,
    threads // w systems per block, their shared copies and vectors (+ ``extra`` elements per system,
    RowsSlot's XV, + 16 bytes of alignment)."""
    spb = threads // w
    shmem = spb * (_rows_layout(n, w, itemsize) + extra) * itemsize + 16
    _prefer_shared(fn, shmem)
    if B:
        fn(((B + spb - 1) // spb,), (threads,), args, shared_mem=shmem)


def ldlt_stage(A, b, screen=False, zero_ndisc=True):
    """LDL^T factor + solve + residual (+ input screening) in one pass over A: cuda/ldlt.cu,
    ``ldlt_solve`` with ``_ldlt_lanes`` lanes per system for n <= ``LDLT_ROLLED_ABOVE``, else
    ``ldlt_solve_rolled`` (a warp per system). Without ``zero_ndisc`` the discarded eigenvalues' counts are left
    unset (:func:`first_stage_flags` writes the zeros)."""
    import cupy as cp

    B, n, r = b.shape
    x, cond, resid = _outputs(b)
    asym = cp.empty(B, dtype=A.dtype)
    ok, nonfinite = cp.empty(B, dtype=bool), cp.empty(B, dtype=bool)
    args = (A, b, x, cond, resid, ok, asym, nonfinite, np.int64(B), np.int32(r))
    if n <= LDLT_ROLLED_ABOVE[A.dtype.itemsize]:
        # one warp per block for n <= 32, four above; measured: float64 n = 16 1.55 against 1.78 ms (four),
        # n = 64 24.1 against 29.0 ms (one)
        w = _ldlt_lanes(n, A.dtype.itemsize)
        fn = get_function("ldlt.cu", "ldlt_solve", A.dtype, n, w)
        _launch_rows(fn, B, n, w, 32 if n <= 32 else THREADS, args, A.dtype.itemsize)
    else:
        # one warp per system; RowsSlot<T, N, 32, 2 V>: 32 bytes more per system
        fn = get_function("ldlt.cu", "ldlt_solve_rolled", A.dtype, n)
        _launch_rows(fn, B, n, 32, ROLLED_THREADS, args, A.dtype.itemsize, extra=32 // A.dtype.itemsize)
    out = (x, cond, (cp.zeros if zero_ndisc else cp.empty)(B, dtype=np.int32), ok, resid)
    return out + ((nonfinite, asym) if screen else ())


def _flags(B, dtype):
    import cupy as cp

    return cp.empty(B, dtype=bool), cp.empty(B, dtype=dtype)


def _hh_lanes(n, itemsize):
    """Lanes per system W of householder_pcr_solve: the least power of two whose R = ceil(n / W) rows per
    lane (in registers) are at most 4 up to n = 16, 3 up to n = 24, and above that 2 in float32 and, up to
    n = 32, 1 in float64 (above 32: W = 32, R = 2). The register cap goes with it (hh_min_blocks in
    cuda/householder_pcr.cu: 255 registers where a lane's rows take 448 bytes or more, else 128).

    From a sweep of W and the cap on the H100 (2^20 SPD systems, kernel ms, 2026-11-24 08:46; the best W, then in
    parentheses the former rule's where it differed, or the runner-up): float64 n = 8 W = 2 0.40; n = 12 W = 4 1.27
    (W = 8 1.90); n = 13 W = 4 1.75 (W = 8 2.14); n = 16 W = 4 2.24 (W = 8 2.57); n = 18 W = 8 4.36 (W = 32 9.40);
    n = 20 W = 8 5.72 (W = 32 10.95); n = 24 W = 8 9.95 (W = 32 14.13); n = 28 W = 32 16.97 (W = 16 18.30); n = 32
    W = 32 18.32 (W = 16 19.83); float32 n = 8 W = 2 0.22; n = 12 W = 4 0.66; n = 16 W = 4 1.00; n = 20 W = 8 2.64
    (W = 16 4.12); n = 24 W = 8 3.87 (W = 16 6.03); n = 28 W = 16 7.61 (W = 8 8.67); n = 32 W = 16 7.16 (W = 8
    10.25); 2^18 systems: n = 48 W = 32 7.95 (W = 16 9.13), float64 n = 48 W = 32 15.71 (W = 16 39.5). The former
    rule (at most 256 bytes of rows per lane, R <= 4) was swept before the register-row reduction and the cp.async
    loads.
    """
    rmax = 4 if n <= 16 else 3 if n <= 24 else (1 if itemsize == 8 and n <= 32 else 2)
    w = 1
    while w < 32 and -(-n // w) > rmax:
        w *= 2
    return w


def _hh_layout(n):
    """(WL, VL) of HHLayout in cuda/householder.cuh: the padded N x S matrix and the vector stride."""
    return (n * (n | 1) + 3) // 4 * 4, (n + 3) // 4 * 4


def householder_pcr_stage(A, b, zero_ndisc=True):
    """Householder + Q^T b + PCR (the Fig. 9 eliminations in stride form) + Q z + residual + screening:
    cuda/householder_pcr.cu, with ``_hh_lanes`` lanes per system (R rows per lane in registers;
    ``THREADS`` per block, ``HH_WARP_THREADS`` for a warp per system). Without ``zero_ndisc`` the counts of
    discarded eigenvalues are left unset (the bookkeeping kernels after it write the zeros)."""
    import cupy as cp

    B, n, r = b.shape
    x, cond, resid = _outputs(b)
    ok = cp.empty(B, dtype=bool)
    nonfinite, asym = _flags(B, A.dtype)
    w = _hh_lanes(n, A.dtype.itemsize)
    fn = get_function("householder_pcr.cu", "householder_pcr_solve", A.dtype, n, w)
    _launch_rows(fn, B, n, w, THREADS if w < 32 else HH_WARP_THREADS,
                 (A, b, x, cond, resid, ok, nonfinite, asym, np.int64(B), np.int32(r)), A.dtype.itemsize)
    return x, cond, (cp.zeros if zero_ndisc else cp.empty)(B, dtype=np.int32), ok, resid, nonfinite, asym


def _eig_bytes(n, itemsize, matrices=3):
    """Shared bytes per system of the eigen kernels (EigLayout): ``matrices`` matrix slots (N x S, or
    N x VL for the divide and conquer's V) and 20 vectors (eig_truncate_solve), or 2 and 14, and the
    integer arrays."""
    wl, vl = _hh_layout(n)
    return (matrices * max(wl, n * vl) + (20 if matrices == 3 else 14) * vl) * itemsize + 4 * n * 4


def _eigh_matrices(n, itemsize):
    """The matrices of eigh_small's layout (eigh_small.cu, eigh_mats): 3 for float32 16 < n <= 32, else 2."""
    return 3 if itemsize == 4 and 16 < n <= 32 else 2


def eig_truncate_stage(A, b, cond_max, finite_ok=True):
    """Householder + divide and conquer + truncated solve + residual + screening: cuda/eigh_small.cu. Its ok is x
    finite; without ``finite_ok`` None (:func:`merge_later_stages` checks x itself)."""
    import cupy as cp

    B, n, r = b.shape
    x, cond, resid = _outputs(b)
    ndisc = cp.empty(B, dtype=np.int32)
    nonfinite, asym = _flags(B, A.dtype)
    tree = _tree_device(n, cp.cuda.Device().id)
    fn = get_function("eigh_small.cu", "eig_truncate_solve", A.dtype, n)
    _launch(fn, B, n, _eig_bytes(n, A.dtype.itemsize),
            lambda spb: (A, b, x, cond, resid, ndisc, nonfinite, asym, tree, A.dtype.type(cond_max),
                         np.int64(B), np.int32(r), np.int32(spb)), lockstep=A.dtype.itemsize == 4)
    return x, cond, ndisc, cp.isfinite(x).all(axis=(1, 2)) if finite_ok else None, resid, nonfinite, asym


# eigh_small on the GPU: the thread-per-system Jacobi kernel (cuda/eigh_jacobi.cu) for n <= EIGH_JACOBI_MAX_N
# (by itemsize), Householder + divide and conquer (cuda/eigh_small.cu) above. Measured on the H100 (2^17 random
# symmetric systems, kernel ms, Jacobi against divide and conquer, one process): float32 n = 4 0.041 / 0.101,
# n = 8 0.182 / 0.404; float64 n = 4 0.074 / 0.174, n = 8 0.443 / 0.841 (2026-11-23 09:39); float32 n = 9 0.29 /
# 1.90, n = 12 1.03 / 2.44; float64 n = 9 1.15 / 3.70, n = 10 1.64 / 3.68, n = 11 4.44 / 4.37 (2026-11-24 08:46; the
# kernel's registers spill from float32 n = 11 and float64 n = 9 on).
EIGH_JACOBI_MAX_N = {4: 12, 8: 10}


def _jacobi_threads(n, itemsize):
    """Threads (systems) per block of eigh_jacobi: jacobi_threads<T, N>() in cuda/eigh_jacobi.cu."""
    return 256 if itemsize == 4 and n <= 8 else 128


def eigh_small(A):
    """w (B, n) ascending, eigenvectors (B, n, n), nonfinite (B,), asym (B,): cuda/eigh_jacobi.cu for
    n <= ``EIGH_JACOBI_MAX_N[itemsize]`` (numpy twin: ``jacobi_eigh.eigh_jacobi``), else cuda/eigh_small.cu."""
    import cupy as cp

    B, n, _ = A.shape
    w = cp.empty((B, n), dtype=A.dtype)
    V = cp.empty_like(A)
    nonfinite, asym = _flags(B, A.dtype)
    if n <= EIGH_JACOBI_MAX_N[A.dtype.itemsize]:
        fn = get_function("eigh_jacobi.cu", "eigh_jacobi", A.dtype, n)
        threads = _jacobi_threads(n, A.dtype.itemsize)
        shmem = threads * (n * n + 1 + n) * A.dtype.itemsize
        _prefer_shared(fn, shmem)
        if B:
            fn(((B + threads - 1) // threads,), (threads,), (A, w, V, nonfinite, asym, np.int64(B)),
               shared_mem=shmem)
        return w, V, nonfinite, asym
    tree = _tree_device(n, cp.cuda.Device().id)
    fn = get_function("eigh_small.cu", "eigh_small", A.dtype, n)
    _launch(fn, B, n, _eig_bytes(n, A.dtype.itemsize, _eigh_matrices(n, A.dtype.itemsize)),
            lambda spb: (A, w, V, nonfinite, asym, tree, np.int64(B), np.int32(spb)),
            EIGH_BLOCK_ABOVE_32[A.dtype.itemsize], lockstep=A.dtype.itemsize == 4)
    return w, V, nonfinite, asym


def first_stage_flags(out, nonfinite, asym, start_codes, rtol, asym_max, ldlt, first, ndisc=None, read=True):
    """cuda/solve_flags.cu: breakdown, redo and the four "any" flags (non-finite input, asymmetric
    input, failed, redo) of solve_small's first stage, its outputs ``out`` = (x, code, residual, cond,
    ok) finished in place (``code`` written whole: ``first``, the stage's code, or 3; ``ndisc``, where given, set
    to 0); numpy twin: ``robust.first_stage_flags``. Without ``read`` the flags are neither formed nor read
    (None): the host goes on without waiting for the solve."""
    import cupy as cp

    x, code, residual, cond, ok = out
    B = ok.size
    breakdown, redo = cp.empty(B, dtype=bool), cp.empty(B, dtype=bool)
    anys = cp.zeros(1, dtype=np.uint32) if read else None
    use = start_codes is not None
    codes = cp.asarray(start_codes) if use else redo          # int8 (B,) from SolverMemory; not read without
    fn = get_function("solve_flags.cu", "first_stage_flags", residual.dtype)
    if B:
        fn((min((B + 255) // 256, 1024),), (256,),
           (x, np.int32(x.size // B), code, np.int8(first), np.uint64(0) if ndisc is None else ndisc, residual,
            cond, ok, nonfinite, asym, codes, np.int32(use), residual.dtype.type(rtol),
            residual.dtype.type(asym_max), np.int32(ldlt), breakdown, redo, np.uint64(0) if anys is None else anys,
            np.int64(B)))
    if not read:
        return breakdown, redo, None
    bits = int(anys.get()[0])
    return breakdown, redo, tuple(bool(bits & f) for f in (1, 2, 4, 8))


def scatter_stage(out, sel, rows, stage_out, code):
    """cuda/solve_flags.cu: the results of a later stage of solve_small at ``rows`` (indices into its outputs)
    into ``out`` = (x, code, residual, cond, n_discarded, ok) at the systems ``sel`` (indices, on the device or
    the host), in one launch; numpy twin: ``robust.scatter_stage``."""
    import cupy as cp

    x, codes, resid, cond, ndisc, ok = out
    xs, cs, nds, oks, rs = stage_out
    count = len(sel)
    if not count:
        return
    nr = x.size // x.shape[0]                                                    # n r entries per system
    idx = cp.concatenate([cp.asarray(sel), cp.asarray(rows)]).astype(np.int64, copy=False)
    fn = get_function("solve_flags.cu", "scatter_stage", x.dtype)
    fn((min((count * nr + 255) // 256, 1024),), (256,),
       (idx, np.int64(count), np.int32(nr), xs, cs, nds, oks, rs, np.int8(code), x, codes, resid, cond, ndisc, ok))


def merge_later_stages(out, middle, last, pending, rtol, start_codes, next_codes=False):
    """cuda/solve_flags.cu: the results of solve_small's later stages run on the whole batch, ``middle`` (Householder
    + PCR, or None where it did not run) and ``last`` (the eigen-solve; its ok may be None: x finite), as
    (x, cond, n_discarded, ok, residual), into ``out`` = (x, code, residual, cond, n_discarded, ok) at the systems
    ``pending`` (not changed), in one launch; with ``next_codes`` also returns every system's start code for next
    time (a per-system SolverMemory's record, :func:`next_start_codes`), else None. numpy twin:
    ``robust.merge_later_stages``."""
    import cupy as cp

    x, codes, resid, cond, ndisc, ok = out
    B = ok.size
    nxt = cp.empty(B, dtype=np.int8) if next_codes else None
    xm, cm, _, okm, rm = middle if middle is not None else (np.uint64(0),) * 5
    xl, cl, ndl, _, rl = last
    use = start_codes is not None
    fn = get_function("solve_flags.cu", "merge_later_stages", x.dtype)
    if B:
        fn((min((B + 255) // 256, 1024),), (256,),
           (np.int32(x.size // B), xm, cm, okm, rm, xl, cl, ndl, rl, x.dtype.type(rtol),
            cp.asarray(start_codes) if use else pending, np.int32(use), pending, x, codes, resid, cond, ndisc, ok,
            np.uint64(0) if nxt is None else nxt, np.int64(B)))
    return nxt


def next_start_codes(code, ndisc, start):
    """cuda/solve_flags.cu: a per-system SolverMemory's start codes for next time (int8, one launch); numpy twin:
    ``robust.next_start_codes``."""
    import cupy as cp

    B = code.size
    out = cp.empty(B, dtype=np.int8)
    fn = get_function("solve_flags.cu", "next_start_codes", ndisc.dtype)
    if B:
        fn((min((B + 255) // 256, 1024),), (256,), (code, ndisc, code if start is None else cp.asarray(start),
                                                    np.int32(start is not None), out, np.int64(B)))
    return out


def screening_flags(nonfinite, asym, asym_max):
    """cuda/solve_flags.cu: (some system has NaN/Inf input, some finite system has max|A - A^T| / max|A| >
    asym_max) from a kernel's per-system screening, in one launch and a 4-byte read; numpy twin:
    ``_common.screening_flags``."""
    import cupy as cp

    B = nonfinite.size
    anys = cp.zeros(1, dtype=np.uint32)
    fn = get_function("solve_flags.cu", "screening_flags", asym.dtype)
    if B:
        fn((min((B + 255) // 256, 1024),), (256,), (nonfinite, asym, asym.dtype.type(asym_max), anys, np.int64(B)))
    bits = int(anys.get()[0])
    return bool(bits & 1), bool(bits & 2)


def run_stage(stage, A, b, screen, cond_max, lean=False):
    """The stage named ``stage`` of the robust strategy on the GPU (see the module docstring).

    Every kernel screens its input (NaN/Inf, asymmetry) while it stages A in shared memory;
    the flags are returned for the first stage only. With ``lean`` what solve_small's bookkeeping kernels complete
    is left to them: LDL^T's and Householder + PCR's counts of discarded eigenvalues (zeros) are not written, and
    the eigen-solve's ok (x finite) is not formed (None) when ``screen`` is off (a later stage's)."""
    if stage == "ldlt":
        return ldlt_stage(A, b, screen, zero_ndisc=not lean)
    out = (householder_pcr_stage(A, b, zero_ndisc=not lean) if stage == "householder_pcr" else
           eig_truncate_stage(A, b, cond_max, finite_ok=not (lean and not screen)))
    return out if screen else out[:5]
