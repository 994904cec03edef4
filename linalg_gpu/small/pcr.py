"""Parallel cyclic reduction for symmetric tridiagonal systems of any size (Abbas-Turki-Graillat, section 4).

Each step replaces every equation e_p by e_p - (c_{p-1}/d_{p-1}) e_{p-1} - (c_p/d_{p+1}) e_{p+1}
(eq. 10, with v'_i = v_i - ... ) which couples it to the equations two places away, and then
*permutes* the equations of every independent block so that its even positions come first and
its odd ones after (Fig. 9). Couplings across block boundaries are zero, so every block is again
a symmetric tridiagonal system with neighbours one place apart, of any size: no zero padding.
After ceil(log2 n) steps every block has one equation and z_p = v_p / d_p.
No pivoting: PCR is stable for diagonally dominant and positive definite T; elsewhere a zero
pivot shows up as a non-finite solution, which the robust strategy detects.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .._backend import as_array, boolean_flags, check_dtype
from . import _common as C

__all__ = ["pcr_solve", "pcr_schedule"]


@lru_cache(maxsize=None)
def pcr_schedule(n):
    """The permutations of Fig. 9 for size n: a tuple of (perm, link) per step.

    ``perm[q]`` is the position before the step of the equation placed at q after it;
    ``link[q]`` tells whether positions q and q+1 are coupled afterwards (same block, two
    places apart before). The composition of the perms maps final to original positions.
    """
    blocks = [(0, n)]
    steps = []
    while any(size > 1 for _, size in blocks):
        perm, new_blocks = [], []
        for start, size in blocks:
            evens = list(range(start, start + size, 2))
            odds = list(range(start + 1, start + size, 2))
            for part in (evens, odds):
                if part:
                    new_blocks.append((len(perm), len(part)))
                    perm.extend(part)
        perm = np.array(perm, dtype=np.intp)
        link = np.zeros(max(n - 1, 0), dtype=bool)
        for start, size in new_blocks:
            link[start:start + size - 1] = True
        steps.append((perm, link))
        blocks = new_blocks
    return tuple(steps)


def _pcr_bl(d, e, v):
    """PCR on a batch-last block: d (n, c), e (n-1, c), v (n, r, c) -> z (n, r, c), pivots (n, c)."""
    n = d.shape[0]
    d, cpl, v = d.copy(), e.copy(), v.copy()
    pos = np.arange(n)                                                 # original index at each position
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for perm, link in pcr_schedule(n):
            zero = np.zeros_like(d[:1])
            cl = np.concatenate([zero, cpl])                           # (n, c) coupling to p-1
            cr = np.concatenate([cpl, zero])                           # (n, c) coupling to p+1
            dl = np.concatenate([np.ones_like(zero), d[:-1]])          # (n, c)
            dr = np.concatenate([d[1:], np.ones_like(zero)])           # (n, c)
            a = cl / dl                                                # (n, c)
            g = cr / dr                                                # (n, c)
            vl = np.concatenate([np.zeros_like(v[:1]), v[:-1]])        # (n, r, c)
            vr = np.concatenate([v[1:], np.zeros_like(v[:1])])         # (n, r, c)
            v = v - a[:, None] * vl - g[:, None] * vr                  # eq. (10)
            d = d - a * cl - g * cr
            c2 = -g[:-2] * cpl[1:]                                     # (n-2, c) coupling p <-> p+2
            # Fig. 9 permutation: gather each block's evens, then its odds.
            v, d, pos = v[perm], d[perm], pos[perm]
            newc = np.zeros_like(cpl)
            q = np.flatnonzero(link)
            newc[q] = c2[perm[q]]
            cpl = newc
        z = v / d[:, None]
    out = np.empty_like(z)
    out[pos] = z
    piv = np.empty_like(d)
    piv[pos] = d
    return out, piv


@boolean_flags("check_finite")
def pcr_solve(d, e, y, *, check_finite=True):
    """Solve T z = y for a batch of symmetric tridiagonal T = tridiag(e, d, e) by PCR (Fig. 9).

    Parameters
    ----------
    d : (..., n) array_like, float32 or float64
        Diagonals.
    e : (..., n-1) array_like
        Off-diagonals.
    y : (..., n) or (..., n, k) array_like
        Right-hand sides.
    check_finite : bool, default True
        Raise ``ValueError`` naming the first system with a NaN or Inf in the input; with False
        such input ends in the ``LinAlgError`` below.

    Returns
    -------
    z : (..., n) or (..., n, k)

    Raises
    ------
    numpy.linalg.LinAlgError
        If the solution of some system is not finite (a pivot vanished, or NaN/Inf input with
        ``check_finite=False``); the message names the first such system.

    Examples
    --------
    >>> import numpy as np, linalg_gpu as lg
    >>> d = np.full(7, 4.0); e = np.ones(6); y = np.arange(7.0)
    >>> z = lg.pcr_solve(d, e, y)
    >>> T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    >>> bool(np.allclose(T @ z, y))
    True
    """
    d, e, batch, n, _ = C.check_tridiagonal(d, e, "pcr_solve")
    y = as_array(y, "y")
    check_dtype(y, "y")
    C.require_numpy(y, "pcr_solve")
    vec = y.shape == batch + (n,)
    if not vec and (y.ndim != d.ndim + 1 or y.shape[:-1] != batch + (n,)):
        raise ValueError(f"y must have shape {batch + (n,)} or {batch + (n, 'k')}; got {y.shape}")
    dt = C.common_dtype(("d", d), ("e", e), ("y", y))
    if check_finite:
        C.check_finite_batch([d, e, y], batch, ["d", "e", "y"], hint=None)
    yf = C.flatten_batch((y[..., None] if vec else y).astype(dt, copy=False), 2)
    z, _ = C.map_chunks(_pcr_bl, (C.flatten_batch(d.astype(dt, copy=False), 1),
                                  C.flatten_batch(e.astype(dt, copy=False), 1), yf), n)
    bad = ~np.isfinite(z).all(axis=(1, 2))
    if bad.any():
        finite = (np.isfinite(C.flatten_batch(d, 1)).all(1) & np.isfinite(C.flatten_batch(e, 1)).all(1)
                  & np.isfinite(yf).all(axis=(1, 2)))
        why = ("its input holds NaN or Inf" if not finite[bad].any()
               else "T is singular or PCR without pivoting broke down")
        raise np.linalg.LinAlgError(
            f"pcr_solve: no finite solution in {int(bad.sum())} system(s), the first at batch index "
            f"{C.first_index(bad, batch)}; {why}"
        )
    z = z.reshape(batch + z.shape[1:])
    return z[..., 0] if vec else z
