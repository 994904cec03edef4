"""Blocked Jacobi: one-sided SVD and two-sided symmetric eigen (KLT), numpy or CuPy.

The public ``jacobi_svd`` / ``jacobi_eigh`` send CuPy arrays here; numpy arrays run the same
blocked algorithm (the CPU twin, tested in CI). The columns (and, two-sided, the rows) are cut
into blocks of w = ``BLOCK`` = 32; a step of the chess-tournament ordering over the blocks
(``orderings.round_robin``, Torun et al.) pairs them disjointly, and for all pairs of the step at
once (Novakovic-Singer GSVD section 2.3, the full-block variant; Novakovic-Singer HSVD's block-oriented Jacobi):

- one-sided SVD: the 2w x 2w Gram matrices G = [A_i A_j]^T [A_i A_j] by one batched matrix
  product, an inner two-sided Jacobi on each G to convergence (``block.block_eigh``, shared memory
  on the GPU) giving W with G = W diag W^T, then [A_i A_j] <- [A_i A_j] W and
  [V_i V_j] <- [V_i V_j] W by batched products (tensor cores for float64 on an H100);
- two-sided eigen: the 2w x 2w diagonal blocks, their inner Jacobi W, then the row update
  J^T A and the column update (J^T A) J of all pairs (Torun et al.'s row-then-column order, by
  blocks; the column update as a row update of the transpose, A being symmetric), and V J.

Layout: the matrix is kept with the blocks of a step's pairs adjacent, so that a pair is one
contiguous (2w, rows) slab: columns as rows (X = A^T for the one-sided case; the two-sided A is
symmetric), and before each step one gather moves the blocks from the previous step's layout to
this one's. The accumulated rotations are kept the same way (rows of V^T), so the final order is
undone by the closing sort alone.

The inner Jacobi uses relative rotations (Demmel & Veselic), so the Gram route keeps the columns'
relative orthogonality: the outer sweeps converge to |g_ij| <= tol sqrt(g_ii g_jj) as in the
pointwise algorithm. Sizes that are not a multiple of 2w are padded with a block diag(c I), c above
the spectrum, whose entries never rotate with the matrix's and are dropped at the end.
Sweeps stop when the largest relative off-diagonal |g_ij| / sqrt(g_ii g_jj) of the full Gram
matrix (one-sided) or |a_ij| / sqrt(|a_ii a_jj|) (two-sided) is at most ``tol``, or when it has
reached the rounding level (below sqrt(eps)) and a sweep no longer halves it. There is no
absolute floor: an entry is small only relative to its diagonal, which keeps the eigenvalues of
graded positive definite matrices to high relative accuracy (a floor of eps ||A||_F cost them
1e-5 to 2e-4 relative, measured at n = 100, 150).
"""

from __future__ import annotations

import numpy as np

from .._backend import get_array_module, to_host
from ._shared import JacobiInfo, _output_slots, _row_norms, frobenius, zero_threshold
from .block import SIZES, block_eigh
from .congruence import block_hyperbolic, block_hz
from .orderings import round_robin

BLOCK = 32
# The inner Jacobi's sweeps per outer step (Novakovic-Singer HSVD's block-oriented variant runs one, the
# full-block variant to convergence). Measured on an H100 (benchmarks/tools/profile_jacobi.py,
# n = 1024 and 4096): one or two inner sweeps take the fewest seconds; to convergence costs up
# to 2x for one outer sweep fewer.
INNER_SWEEPS = {"svd": 1, "eigh": 2}


def _pad(n, block=BLOCK):
    p = 2 * block
    return -(-n // p) * p - n


def _check_block(block):
    if 2 * block not in SIZES:
        raise ValueError(f"block must be one of {[k // 2 for k in SIZES]}, got {block!r}")


class _Layout:
    """The gathers of a sweep: ``elements(s, first)`` are the rows (and, two-sided, columns), in
    the previous step's layout, of the blocks of step s's pairs (pair t's two blocks at rows
    2tw..2tw+2w); the first step of the first sweep starts from the natural order, of later ones
    from the last step's."""

    def __init__(self, xp, nb, block):
        steps = [st.reshape(-1) for st in round_robin(nb)]                       # block ids by position
        prev = [np.arange(nb)] + steps[:-1]
        blocks = [np.argsort(p)[st] for p, st in zip(prev, steps, strict=True)]
        blocks.append(np.argsort(steps[-1])[steps[0]])                          # the wrap to a new sweep
        self.steps = len(steps)
        self._elements = [xp.asarray((b[:, None] * block + np.arange(block)).reshape(-1)) for b in blocks]

    def elements(self, s, first):
        return self._elements[self.steps if s == 0 and not first else s]


# gemm's alpha = 1 and beta = 0, by host address (an ndarray's .ctypes costs microseconds per call)
_SCALARS = {np.dtype(t): (np.ones(1, dtype=t), np.zeros(1, dtype=t))
            for t in (np.float32, np.float64, np.complex64, np.complex128)}
_ONE_ZERO = {dt: (one.ctypes.data, zero.ctypes.data) for dt, (one, zero) in _SCALARS.items()}


_GEMM = {np.dtype(np.float32): "sgemmStridedBatched", np.dtype(np.float64): "dgemmStridedBatched",
         np.dtype(np.complex64): "cgemmStridedBatched", np.dtype(np.complex128): "zgemmStridedBatched"}


def _adjoint(X):
    return X.transpose(0, 2, 1).conj() if X.dtype.kind == "c" else X.transpose(0, 2, 1)


def _bmm(xp, A, B, trans_a=False, trans_b=False, out=None):
    """op(A) @ op(B) for batches (b, ., .) of matrices with contiguous rows, into ``out``
    (C-contiguous) if given; op = the transpose (complex: the conjugate transpose). On the GPU one
    cuBLAS gemmStridedBatched call: cupy.matmul spends 40-55 us of Python per call (measured on the
    H100's host), which made the n = 1024 paths wait on the CPU."""
    if xp is np:
        return np.matmul(_adjoint(A) if trans_a else A, _adjoint(B) if trans_b else B, out=out)
    from cupy_backends.cuda.libs import cublas

    b, m, k = A.shape[0], A.shape[2 if trans_a else 1], A.shape[1 if trans_a else 2]
    n = B.shape[1 if trans_b else 2]
    C = xp.empty((b, m, n), dtype=A.dtype) if out is None else out
    handle = xp.cuda.device.get_cublas_handle()
    cublas.setStream(handle, xp.cuda.get_current_stream().ptr)
    gemm = getattr(cublas, _GEMM[A.dtype])
    op = (cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_C if A.dtype.kind == "c" else cublas.CUBLAS_OP_T)
    # column-major: C^T = op(B)^T op(A)^T, a row-major buffer being its transpose in column-major
    one, zero = _ONE_ZERO[A.dtype]
    item = A.itemsize
    gemm(handle, op[trans_b], op[trans_a], n, m, k, one,
         B.data.ptr, B.strides[1] // item, B.strides[0] // item, A.data.ptr, A.strides[1] // item,
         A.strides[0] // item, zero, C.data.ptr, n, m * n, b)
    return C


def _gather(xp, A, e, both=False, out=None):
    """A[e] (rows), or A[e][:, e] with ``both``, into ``out`` if given; on the GPU one launch of
    ``gather`` in ``cuda/jacobi_block.cu`` (CuPy's fancy indexing: 30-70 us of Python per call,
    measured)."""
    if xp is np:
        res = A[e[:, None], e] if both else A[e]
        if out is None:
            return res
        out[...] = res
        return out
    from .._kernels import get_function

    cols = A.shape[1]
    out = xp.empty((e.size, cols), dtype=A.dtype) if out is None else out
    get_function("jacobi_block.cu", "gather", A.dtype)(
        (min(-(-out.size // 256), 8192),), (256,), (A, e, out, np.int32(e.size), np.int32(cols), np.int32(both)))
    return out


def _relative_offdiag(xp, G):
    """max |g_ij| / sqrt(|g_ii g_jj|) over i != j (infinite where g_ij != 0 = g_ii g_jj)."""
    d = xp.sqrt(xp.abs(xp.diagonal(G)))
    scale = d[:, None] * d[None, :]
    absG = xp.abs(G)
    rel = xp.where(scale > 0, absG / xp.where(scale > 0, scale, 1), np.inf)
    off = xp.where(absG > 0, rel, 0)
    xp.fill_diagonal(off, 0)
    return float(off.max()) if off.size else 0.0


def _stopped(off, last, tol, eps):
    """Converged: at most ``tol``, or at the rounding floor and no longer halving (module docstring)."""
    return off <= tol or (off < np.sqrt(eps) and off > 0.5 * last)


def _sweep(layout, measure, step, tol, max_sweeps, eps):
    """Outer sweeps of ``step(s, e)`` over the layout's steps s until ``measure()`` (the relative
    off-diagonal) has stopped: (sweeps, converged, off)."""
    sweeps, off, last = 0, np.inf, np.inf
    while True:
        off, last = measure(), off
        if _stopped(off, last, tol, eps):
            return sweeps, True, off
        if sweeps == max_sweeps:
            return sweeps, False, off
        for s in range(layout.steps):
            step(s, layout.elements(s, sweeps == 0))
        sweeps += 1


def _one_sided(xp, W, tol, max_sweeps, block, want_v, sign=None):
    """Blocked one-sided Jacobi on the columns of W (rows x n): (columns, norms, V, sweeps, converged,
    off, extra). With ``sign`` (n,) of +-1 the hyperbolic variant (``congruence.block_hyperbolic``):
    the columns come in the final layout's order and extra = (their signs, the count of dependent
    hyperbolic pairs met); else sorted by norm, descending, and extra = None."""
    dt = W.dtype
    eps = float(np.finfo(dt).eps)
    rows, n = W.shape
    npad = _pad(n, block)
    N, R, K = n + npad, rows + npad, 2 * block
    nb, k = N // block, N // K
    c = 2.0 * float(xp.linalg.norm(W)) + 1.0
    # [X V^T]: the columns as rows, and the rows of V^T with them, so that one gather and one
    # product per step move both (each launch costs the host 17-29 us, the step's GPU time is
    # about 0.14 ms at n = 1024: measured on the H100, the host had been the bound).
    XV = xp.zeros((N, R + N if want_v else R), dtype=dt)
    XV[:n, :rows] = W.T
    XV[n:, rows:R] = xp.eye(npad, dtype=dt) * c
    if want_v:
        XV[:, R:] = xp.eye(N, dtype=dt)
    X = XV[:, :R]
    # every step works in the same buffers
    XVp, Gm, Wb = xp.empty_like(XV), xp.empty((k, K, K), dtype=dt), xp.empty((k, K, K), dtype=dt)
    pairs, updated = XVp.reshape(k, K, -1), XV.reshape(k, K, -1)                    # (k, 2w, .) views
    layout = _Layout(xp, nb, block)
    if sign is not None:
        # the inner Jacobi sorts within each sign, so a block's signs never change: the signs in
        # the layout of step s are those of the blocks in step s's order (the pad's are +1)
        sign_n = np.concatenate([np.asarray(sign, dtype=np.int8), np.ones(npad, dtype=np.int8)])
        signs = [xp.asarray(sign_n[(st.reshape(-1)[:, None] * block + np.arange(block)).reshape(-1)].reshape(k, K))
                 for st in round_robin(nb)]
        bad = xp.zeros(k, dtype=np.int64)

    def step(s, e):
        nonlocal bad
        _gather(xp, XV, e, out=XVp)
        _bmm(xp, pairs[:, :, :R], pairs[:, :, :R], trans_b=True, out=Gm)            # Gram matrices
        if sign is None:
            block_eigh(Gm, tol, INNER_SWEEPS["svd"], out=Wb)
        else:
            Wh, b = block_hyperbolic(Gm, signs[s], tol, INNER_SWEEPS["svd"])
            Wb[...] = Wh
            bad = bad + b
        _bmm(xp, Wb, pairs, trans_a=True, out=updated)                              # W^T [A_i A_j]^T, W^T V^T

    sweeps, converged, off = _sweep(layout, lambda: _relative_offdiag(xp, X @ X.T), step, tol, max_sweeps, eps)
    norms = xp.linalg.norm(X, axis=1)                                               # (N,) eq. 12
    real = xp.argsort(norms)[:n] if npad else xp.arange(N)                          # the pad has norm c
    extra = None
    if sign is None:
        real = real[xp.argsort(-norms[real])]
    else:
        real = xp.sort(real)
        final = signs[-1].reshape(-1) if sweeps else xp.asarray(sign_n)
        extra = (final[real], int(bad.sum()))
    cols = X[real][:, :rows].T
    return cols, norms[real], (XV[real][:, R:R + n].T if want_v else None), sweeps, converged, off, extra


def jacobi_svd(A, full_matrices=False, compute_uv=True, *, tol=None, max_sweeps=60, precondition=True,
               return_info=False, block=BLOCK):
    """The blocked twin of :func:`linalg_gpu.jacobi.svd.jacobi_svd` (see the module docstring).

    With ``precondition`` the Jacobi iteration runs on R^T of P_r A P_c = QR (Drmac & Veselic's
    preconditioner): the rows sorted by their largest entry, the columns by their norm, then
    Householder QR without pivoting (cuSOLVER's on the GPU). R^T's columns are closer to orthogonal
    (fewer sweeps), and the sorting stands in for the column pivoting of the pointwise path: on
    graded matrices D1 B D2 it keeps the singular values' high relative accuracy, which unsorted QR
    lost (1e-7 to 3e-4 relative, measured at n = 40 to 150). Then A = P_r^T Q V_w S U_w^T P_c^T.
    """
    cp = get_array_module(A)
    _check_block(block)
    dt = A.dtype
    m, n = A.shape
    if m < n:
        res = jacobi_svd(A.T, full_matrices, compute_uv, tol=tol, max_sweeps=max_sweeps, precondition=precondition,
                         return_info=return_info, block=block)
        if not compute_uv:
            return res
        U, s, Vh = res[:3]
        out = (Vh.T, s, U.T)
        return out + res[3:] if return_info else out
    eps = float(np.finfo(dt).eps)
    tol = float(np.sqrt(m) * eps) if tol is None else float(tol)
    if precondition:
        rows_by = cp.argsort(-cp.abs(A).max(axis=1))                                # row sorting
        cols_by = cp.argsort(-cp.linalg.norm(A, axis=0))                            # columns by norm
        Q, R = cp.linalg.qr(A[rows_by][:, cols_by])                                 # P_r A P_c = Q R
        W = cp.ascontiguousarray(R.T)
    else:
        Q, W = None, A
    cols, s, Vw, sweeps, converged, off, _ = _one_sided(cp, W, tol, max_sweeps, block, compute_uv)
    info = {"sweeps": sweeps, "converged": converged, "off_norm": off, "ordering": "round_robin (blocks)",
            "block": block, "precondition": bool(precondition)}
    if not converged and not return_info:
        raise np.linalg.LinAlgError(f"jacobi_svd did not converge in max_sweeps={max_sweeps} sweeps "
                                    f"(relative off-diagonal {off:.2e} > tol {tol:.2e})")
    if not compute_uv:
        return (s, info) if return_info else s
    rows = W.shape[0]
    nz = s > s[0] * max(m, n) * eps
    Uw = cp.zeros((rows, n), dtype=dt)
    Uw[:, nz] = cols[:, nz] / s[nz]                                                 # eq. 13
    if Q is None:                                                                   # A = Uw S Vw^T
        U = _complete(cp, Uw, nz, full_matrices and m > n, m if full_matrices else n, dt)
        V = Vw
    else:                                                                           # R^T = Uw S Vw^T
        V = _complete(cp, Uw, nz, False, n, dt)[cp.argsort(cols_by)]
        U = (Q @ Vw)[cp.argsort(rows_by)]
        if full_matrices and m > n:
            U = _complete(cp, U, cp.ones(n, dtype=bool), True, m, dt)
    out = (U, s, V.T)
    return out + (info,) if return_info else out


def _complete(cp, U, nz, full, cols, dt):
    """U with its columns outside ``nz`` (and, if ``full``, extra columns up to ``cols``) made an
    orthonormal completion of the columns in ``nz``."""
    m = U.shape[0]
    keep = U[:, nz]
    need = int((~nz).sum()) + (cols - U.shape[1] if full else 0)
    if need == 0:
        return U
    rng = cp.random.default_rng(0)
    X = rng.standard_normal((m, need)).astype(dt)
    for _ in range(2):                                                              # project out twice
        X -= keep @ (keep.conj().T @ X)
    Qx, _ = cp.linalg.qr(X)
    for _ in range(2):
        Qx -= keep @ (keep.conj().T @ Qx)
        Qx, _ = cp.linalg.qr(Qx)
    out = cp.zeros((m, cols if full else U.shape[1]), dtype=dt)
    idx = cp.flatnonzero(nz)
    out[:, idx] = keep
    rest = cp.flatnonzero(~nz)
    out[:, rest] = Qx[:, : rest.size]
    if full and cols > U.shape[1]:
        out[:, U.shape[1]:] = Qx[:, rest.size:]
    return out


def jacobi_eigh(A, *, tol=None, max_sweeps=60, assume_symmetric=False, return_info=False, block=BLOCK):
    """The blocked twin of :func:`linalg_gpu.jacobi.klt.jacobi_eigh` (see the module docstring)."""
    xp = get_array_module(A)
    _check_block(block)
    dt = A.dtype
    n = A.shape[0]
    eps = float(np.finfo(dt).eps)
    tol = float(n * eps) if tol is None else float(tol)
    npad = _pad(n, block)
    N, K = n + npad, 2 * block
    nb, k = N // block, N // K
    c = 2.0 * float(xp.linalg.norm(A)) + 1.0
    work = xp.zeros((N, N), dtype=dt)
    work[:n, :n] = A
    work[n:, n:] = xp.eye(npad, dtype=dt) * c
    Mt = xp.eye(N, dtype=dt)                                                        # V^T, rows with work's
    item = work.dtype.itemsize
    As, Y = xp.empty((N, N), dtype=dt), xp.empty((k, K, N), dtype=dt)               # the step's buffers
    Yt, Mp, Wb = xp.empty((N, N), dtype=dt), xp.empty((k, K, N), dtype=dt), xp.empty((k, K, K), dtype=dt)
    D = xp.lib.stride_tricks.as_strided(As, shape=(k, K, K), strides=(K * (N + 1) * item, N * item, item))
    work3, Mt3 = work.reshape(k, K, N), Mt.reshape(k, K, N)

    def measure():
        work[...] = (work + work.T) / 2             # the products' rounding leaves A slightly unsymmetric
        return _relative_offdiag(xp, work)

    def step(s, e):
        _gather(xp, work, e, both=True, out=As)                                     # pairs' blocks adjacent
        block_eigh(D, tol, INNER_SWEEPS["eigh"], out=Wb)                             # D: their diagonal blocks
        _bmm(xp, Wb, As.reshape(k, K, N), trans_a=True, out=Y)                       # row update J^T A
        Yt[...] = Y.reshape(N, N).T
        _bmm(xp, Wb, Yt.reshape(k, K, N), trans_a=True, out=work3)                   # J^T (J^T A)^T = J^T A J
        _gather(xp, Mt, e, out=Mp.reshape(N, N))
        _bmm(xp, Wb, Mp, trans_a=True, out=Mt3)

    layout = _Layout(xp, nb, block)
    sweeps, converged, off = _sweep(layout, measure, step, tol, max_sweeps, eps)
    info = JacobiInfo(sweeps=sweeps, converged=converged, rotations=sweeps * layout.steps * k,
                      off_norm=off, tol=tol)
    if not converged and not return_info:
        raise np.linalg.LinAlgError(f"jacobi_eigh did not converge in max_sweeps={max_sweeps} sweeps "
                                    f"(relative off-diagonal {off:.2e} > tol {tol:.2e})")
    w = xp.diagonal(work).copy()
    order = xp.argsort(w)[:n]                                                       # the pad (c) is largest
    out = (w[order], Mt[order][:, :n].T)
    return out + (info,) if return_info else out


def hyperbolic_svd(G, sign, *, compute_v=True, tol=None, max_sweeps=60, return_info=False, block=BLOCK):
    """The blocked twin of :func:`linalg_gpu.jacobi.hsvd.hyperbolic_svd` for a checked G (m >= n) and
    its signature ``sign`` (a numpy vector of +-1).

    Tall G is shortened first, G[r][:, c] = Q R (rows sorted by their largest entry, columns by norm,
    then Householder QR without pivoting: cuSOLVER's on the GPU), and the iteration runs on R with the
    signs permuted alike. The block pairs follow the chess tournament (``_Layout``), the inner Jacobi is
    ``congruence.block_hyperbolic`` on the pairs' Gram matrices (one sweep per step, as the SVD's), and
    the sweeps stop like the SVD's, on the relative off-diagonal of the columns' Gram matrix. Unlike the
    pointwise path there is no global sorting of the diagonal: each pair's block is sorted within its
    signs by the inner Jacobi.
    """
    xp = get_array_module(G)
    _check_block(block)
    dt = G.dtype
    m, n = G.shape
    eps = float(np.finfo(dt).eps)
    sign = np.asarray(sign).astype(np.int8)
    info = {"sweeps": 0, "converged": True, "off_norm": 0.0, "ordering": "round_robin (blocks)", "block": block}
    if n == 0:
        out = (xp.zeros((m, 0), dt), xp.zeros(0, dt)) + ((xp.zeros((0, 0), dt),) if compute_v else ())
        return out + (info,) if return_info else out
    if bool((xp.linalg.norm(G, axis=0) == 0).any()):
        raise np.linalg.LinAlgError("G is not of full column rank: it has a zero column")
    if m > n:
        rows_by = xp.argsort(-xp.abs(G).max(axis=1))
        cols_by = xp.argsort(-xp.linalg.norm(G, axis=0))
        Q, R = xp.linalg.qr(G[rows_by][:, cols_by])
        W, cols = R, (cols_by.get() if hasattr(cols_by, "get") else cols_by)
    else:
        Q, W, cols = None, G, np.arange(n)
    tol = float(np.sqrt(W.shape[0]) * eps) if tol is None else float(tol)
    sj = sign[cols]                                                                 # the signs of W's columns
    U_w, s, Z, sweeps, converged, off, (fsign, bad) = _one_sided(xp, W, tol, max_sweeps, block, compute_v, sj)
    if bad:
        raise np.linalg.LinAlgError("G is not of full column rank (numerically): a hyperbolic pair of columns "
                                    "became dependent during the iteration")
    info.update(sweeps=sweeps, converged=converged, off_norm=off)
    if not converged and not return_info:
        raise np.linalg.LinAlgError(f"hyperbolic_svd did not converge in max_sweeps={max_sweeps} sweeps "
                                    f"(relative off-diagonal {off:.2e} > tol {tol:.2e})")
    pick_x = xp.asarray(_output_slots(to_host(s), to_host(fsign), sign))
    sigma = s[pick_x]
    U = U_w[:, pick_x] / sigma                                                       # (rows, n) eq. 13
    if Q is not None:
        U = (Q @ U)[xp.argsort(rows_by)]
    out = (U, sigma)
    if compute_v:                                                                   # V = J Z J (module hsvd)
        Zg = xp.empty_like(Z)
        Zg[xp.asarray(cols)] = Z                                                    # rows by G's columns
        J = xp.asarray(sign.astype(dt))
        out += (J[:, None] * Zg[:, pick_x] * J[None, :],)
    return out + (info,) if return_info else out


def gsvd(F, G, return_x=False, *, tol=None, max_sweeps=60, return_info=False, block=BLOCK):
    """The blocked twin of :func:`linalg_gpu.jacobi.gsvd.gsvd` for checked F, G that it has scaled to max
    |entry| in [0.5, 1) and whose result it scales back (Novakovic-Singer GSVD section 2.3, the block-oriented variant:
    one inner sweep per step).

    Shortening (section 2): the columns sorted by the norms of G's, the rows of each matrix by their
    largest entry, then Householder QR without pivoting (cuSOLVER's): F[rF][:, c] = Q_F R_F,
    G[rG][:, c] = Q_G R_G; Z_0 scales G's columns to unit norm. Each step gathers the block pairs of
    [F^T G^T Z^T] (columns as rows), forms both Gram matrices by batched products, runs
    ``congruence.block_hz`` on them and updates the three by one batched product. Complex: the rows are
    the columns f_j unconjugated, so the products give conj(A), conj(B); their M is conj(Z), and the
    update Z^T X = M^H X. The sweeps stop when the relative off-diagonal of both Gram matrices has
    (``_stopped``, as the SVD's), F's taken over its nonzero columns (``zero_threshold``: the columns of a
    rank-deficient F that go to zero keep directions of rounding noise). Criterion C1 (section 2.5: a sweep
    without big transformations) is counted in ``info["big"]`` but stops nothing: a transformation that is
    the identity to one rounding (cos(phi) / t = cos(psi) / t = 1 to 2 eps) still moves the smaller column
    of a pair by sin(phi) times the ratio of the norms, which for alpha / beta of 4e4 against 7e-3 (F of
    condition 100, G with a singular value 1e-5, float32, n = 40) took F's relative off-diagonal from 5e-3
    to 1.7e-4 in a sweep without a big transformation, where C1 stopped (U orthogonal to 1.7e-4 only); the
    next sweep, also without one, reached 7.3e-7 (tol 7.5e-7).
    """
    xp = get_array_module(F, G)
    _check_block(block)
    dt = F.dtype
    n = F.shape[1]
    tol = float(np.finfo(dt).eps * np.sqrt(max(n, 1))) if tol is None else float(tol)
    if n == 0:
        e, rdt = xp.zeros((0, 0), dt), np.finfo(dt).dtype
        out = (xp.zeros((F.shape[0], 0), dt), xp.zeros((G.shape[0], 0), dt), e, xp.zeros(0, rdt), xp.zeros(0, rdt))
        out += (e,) if return_x else ()
        return out + ({"sweeps": 0, "converged": True, "big": 0, "tol": tol},) if return_info else out
    c = xp.argsort(-xp.linalg.norm(G, axis=0))
    rF, rG = xp.argsort(-xp.abs(F).max(axis=1)), xp.argsort(-xp.abs(G).max(axis=1))
    QF, RF = xp.linalg.qr(F[rF][:, c])
    QG, RG = xp.linalg.qr(G[rG][:, c])
    gn = _row_norms(RG.T)                                                           # Z_0 = diag(1 / ||g_j||)
    # column j numerically in the span of the columns before it: |r_jj| <= n eps ||g_j||
    if bool((xp.abs(xp.diagonal(RG)) <= n * np.finfo(dt).eps * gn).any()):
        raise np.linalg.LinAlgError("G is not of full column rank (numerically): the GSVD needs B = G^T G "
                                    "positive definite")
    npad = _pad(n, block)
    N, K = n + npad, 2 * block
    nb, k = N // block, N // K
    XFGZ = xp.zeros((N, n + N + N), dtype=dt)                                       # [F^T | G^T | Z^T] rows
    XFGZ[:n, :n] = RF.T / gn[:, None]
    XFGZ[:n, n:2 * n] = RG.T / gn[:, None]
    XFGZ[n:, 2 * n:n + N] = xp.eye(npad, dtype=dt)                                  # the pad: unit G columns
    XFGZ[:n, n + N:n + N + n] = xp.diag(1 / gn)
    XFGZ[n:, n + N + n:] = xp.eye(npad, dtype=dt)
    P = xp.empty_like(XFGZ)
    pairs, updated = P.reshape(k, K, -1), XFGZ.reshape(k, K, -1)
    Ag, Bg = xp.empty((k, K, K), dtype=dt), xp.empty((k, K, K), dtype=dt)
    state = {"big": None, "total": 0}                                               # big ones, this sweep / all

    def step(s, e):
        _gather(xp, XFGZ, e, out=P)
        _bmm(xp, pairs[:, :, :n], pairs[:, :, :n], trans_b=True, out=Ag)             # F's Gram blocks
        _bmm(xp, pairs[:, :, n:n + N], pairs[:, :, n:n + N], trans_b=True, out=Bg)   # G's
        Zb, b = block_hz(Ag, Bg, tol, 1)
        state["big"] += b
        _bmm(xp, Zb, pairs, trans_a=True, out=updated)

    fnorm = frobenius(RF)

    def measure():
        """The relative off-diagonal of both Gram matrices, F's over its nonzero columns (docstring);
        the big transformations of the last sweep are added to the count."""
        last, state["big"] = state["big"], xp.zeros(k, dtype=np.int64)
        if last is not None:
            state["total"] += int(last.sum())
        WF, WG = XFGZ[:, :n], XFGZ[:, n:n + N]
        nz = zero_threshold(_row_norms(WF), XFGZ[:, n + N:], fnorm, xp)
        WF = xp.where(nz[:, None], WF, 0)                                           # zero rows: off-diagonal 0
        return max(_relative_offdiag(xp, WF @ WF.conj().T), _relative_offdiag(xp, WG @ WG.conj().T))

    sweeps, converged, _ = _sweep(_Layout(xp, nb, block), measure, step, tol, max_sweeps, float(np.finfo(dt).eps))
    info = {"sweeps": sweeps, "converged": converged, "big": state["total"], "tol": tol,
            "ordering": "round_robin (blocks)", "block": block}
    if not converged and not return_info:
        raise np.linalg.LinAlgError(f"gsvd did not converge in max_sweeps={max_sweeps} sweeps; raise max_sweeps")
    if not bool(xp.isfinite(XFGZ).all()):
        raise np.linalg.LinAlgError("gsvd produced non-finite values: G is not of full column rank (numerically)")
    real = xp.flatnonzero(xp.abs(XFGZ[:, n + N + n:]).max(axis=1) == 0) if npad else xp.arange(N)
    WF, WG, WZ = XFGZ[real, :n], XFGZ[real, n:2 * n], XFGZ[real, n + N:n + N + n]
    sF, sG = _row_norms(WF), _row_norms(WG)                                        # Sigma_F, Sigma_G
    theta = 1 / xp.hypot(sF, sG)
    alpha, beta = sF * theta, sG * theta
    order = xp.argsort(-(alpha / beta))
    alpha, beta, sF, sG, theta = alpha[order], beta[order], sF[order], sG[order], theta[order]
    WF, WG, WZ = WF[order], WG[order], WZ[order]
    nz = zero_threshold(sF, WZ, fnorm, xp)
    alpha = xp.where(nz, alpha, 0)
    Us = xp.zeros((n, n), dtype=dt)
    Us[:, nz] = (WF[nz] / sF[nz, None]).T
    Us = _complete(xp, Us, nz, False, n, dt)                                          # alpha = 0: completed
    U = (QF @ Us)[xp.argsort(rF)]
    V = (QG @ (WG / sG[:, None]).T)[xp.argsort(rG)]
    Zs = WZ.T * theta
    Z = xp.empty_like(Zs)
    Z[c] = Zs
    out = (U, V, Z, alpha, beta)
    if return_x:
        out += (xp.linalg.solve(Z, xp.eye(n, dtype=dt)),)
    return out + (info,) if return_info else out
