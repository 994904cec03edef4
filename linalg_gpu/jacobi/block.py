"""The inner Jacobi of the blocked GPU paths: eigenvectors of a batch of small symmetric matrices.

``block_eigh(G, tol, max_sweeps)`` runs cyclic two-sided Jacobi (chess-tournament ordering,
papers 003 section 2.3 and 004, eqs. 8-10) on each K x K matrix of ``G`` (K = 2w, the Gram matrix
of a block-column pair or a diagonal block of a symmetric matrix) and returns V (batch, K, K):
the accumulated rotations after one Newton-Schulz step V (3 I - V^T V) / 2, columns sorted by the
final diagonal descending; the identity where no pair needed a rotation. The rotations' rounding
drifts the column norms coherently (by 70-95 eps at K = 64 after an inner solve to convergence,
measured), and the outer iteration multiplies hundreds of these V; the step leaves 3-4 eps.

A pair (p, q) rotates only if |g_pq| > tol sqrt(|g_pp g_qq|) (relative orthogonality); sweeps
stop when none rotated. numpy arrays run here (vectorized over the batch and the pairs of a step), CuPy
arrays in ``cuda/jacobi_block.cu`` (one thread block per matrix, G and V in shared memory); the
two compute the same function.
"""

from __future__ import annotations

import numpy as np

from .._backend import get_array_module
from .orderings import round_robin

SIZES = (32, 64)                   # K = 2w with the kernel's shared memory within an H100's 227 KB
THREADS = {32: 512, 64: 1024}      # per matrix: one per 2 x 2 block of G at K = 64
_CONFIGURED = set()                # kernels whose shared-memory limit is raised


def block_eigh(G, tol, max_sweeps=30, out=None):
    """V of the batch ``G`` (batch, K, K), into ``out`` (C-contiguous) if given; see the module
    docstring. ``G`` may be a strided view whose rows are contiguous (the diagonal blocks of a matrix)."""
    xp = get_array_module(G)
    if G.ndim != 3 or G.shape[1] != G.shape[2]:
        raise ValueError(f"G must have shape (batch, K, K), got {G.shape}")
    if out is not None and (out.shape != G.shape or out.dtype != G.dtype or not out.flags.c_contiguous):
        raise ValueError(f"out must be a C-contiguous {G.dtype} array of shape {G.shape}")
    if xp is not np:
        return _block_eigh_gpu(G, tol, max_sweeps, out)
    V = _block_eigh_np(G, tol, max_sweeps)
    if out is None:
        return V
    out[...] = V
    return out


def _block_eigh_np(G, tol, max_sweeps):
    b, K, _ = G.shape
    dt = G.dtype.type
    a = (G + G.transpose(0, 2, 1)) / 2                                  # (b, K, K) symmetric part
    tol = dt(tol)
    v = np.broadcast_to(np.eye(K, dtype=G.dtype), (b, K, K)).copy()
    rows = np.arange(b)[:, None]                                        # (b, 1)
    any_rot = np.zeros(b, dtype=bool)
    for _ in range(max_sweeps):
        rotated = np.zeros(b, dtype=bool)
        for step in round_robin(K):
            p, q = step[:, 0], step[:, 1]                               # (H,)
            gpp, gqq, gpq = a[:, p, p], a[:, q, q], a[:, p, q]          # (b, H)
            rot = np.abs(gpq) > tol * np.sqrt(np.abs(gpp)) * np.sqrt(np.abs(gqq))
            with np.errstate(divide="ignore", invalid="ignore"):
                theta = np.where(rot, (gqq - gpp) / (2 * np.where(rot, gpq, 1)), 0)
            t = np.where(rot, np.copysign(1, theta) / (np.abs(theta) + np.hypot(theta, 1)), 0).astype(G.dtype)
            c = (1 / np.sqrt(1 + t * t)).astype(G.dtype)
            s = t * c
            rotated |= rot.any(axis=1)
            cr, sr = c[:, :, None], s[:, :, None]                       # (b, H, 1)
            x, y = a[:, p, :], a[:, q, :]                               # rows: J^T G
            a[:, p, :], a[:, q, :] = cr * x - sr * y, sr * x + cr * y
            cc, sc = c[:, None, :], s[:, None, :]                       # (b, 1, H)
            x, y = a[:, :, p], a[:, :, q]                               # columns: (J^T G) J
            a[:, :, p], a[:, :, q] = x * cc - y * sc, x * sc + y * cc
            tg = t * gpq                                                # the pivot blocks, accurately
            a[rows, p, p] = np.where(rot, gpp - tg, a[rows, p, p])
            a[rows, q, q] = np.where(rot, gqq + tg, a[rows, q, q])
            a[rows, p, q] = np.where(rot, 0, a[rows, p, q])
            a[rows, q, p] = np.where(rot, 0, a[rows, q, p])
            x, y = v[:, :, p], v[:, :, q]                               # V J
            v[:, :, p], v[:, :, q] = x * cc - y * sc, x * sc + y * cc
        any_rot |= rotated
        if not rotated.any():
            break
    v = v @ (1.5 * np.eye(K, dtype=G.dtype) - 0.5 * (v.transpose(0, 2, 1) @ v))   # one Newton-Schulz step
    diag = np.diagonal(a, axis1=1, axis2=2)
    order = np.argsort(-diag, axis=1, kind="stable")                    # descending, ties by index
    out = np.take_along_axis(v, order[:, None, :], axis=2)
    out[~any_rot] = np.eye(K, dtype=G.dtype)
    return out


def _block_eigh_gpu(G, tol, max_sweeps, V):
    import cupy as cp

    from .._kernels import get_function

    b, K, _ = G.shape
    if K not in SIZES:
        raise ValueError(f"the block_eigh kernel takes K in {SIZES}, got K = {K}")
    item = G.dtype.itemsize
    if G.strides[2] != item or G.strides[1] % item or G.strides[0] % item:
        G = cp.ascontiguousarray(G)
    V = cp.empty((b, K, K), dtype=G.dtype) if V is None else V
    if b == 0:
        return V
    nt = THREADS[K]
    fn = get_function("jacobi_block.cu", "block_eigh", G.dtype, K, nt)
    shared = (2 * K * (K + 1) + 2 * K) * item
    if fn not in _CONFIGURED:                                           # a driver call: once per kernel
        fn.max_dynamic_shared_size_bytes = shared
        _CONFIGURED.add(fn)
    dt = G.dtype.type
    fn((b,), (nt,), (G, np.int64(G.strides[0] // item), np.int32(G.strides[1] // item), V,
                         dt(tol), np.int32(max_sweeps)), shared_mem=shared)
    return V
