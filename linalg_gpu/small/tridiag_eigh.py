"""Batched divide-and-conquer eigensolver for symmetric tridiagonal matrices (Abbas-Turki-Graillat, section 5).

Cuppen's method as in Algorithm 3 and Fig. 13:

1. *Divide* (eq. 15): T = diag(T1, T2) + rho v v^T, split in the middle down to 1x1 and 2x2
   blocks. We tear with rho = |c_m| and v = (.., 1, sign(c_m), ..) (as LAPACK's dlaed0 does) so
   that rho >= 0 in the secular equation; this is eq. (15) with the sign of c_m moved into v.
   A zero (or negligible) c_m at a split gives rho ~ 0 and every component deflates: the merge
   is then the plain union of the two spectra, which is what splitting at that zero gives.
   The tree depends on n only, so all systems of the batch (and all nodes of one level) are
   merged together.
2. *Secular equation* (eq. 16), 1 + rho sum_i u_i^2 / (lambda_i - lambda) = 0, one root per
   interval between consecutive poles, solved by Gragg's cubically convergent scheme (the
   model c + s/(delta_j - x) + S/(delta_{j+1} - x) matched to f, f', f'' at the current point),
   safeguarded by bisection of a bracket kept from the sign of f, in coordinates shifted to the
   nearer pole, and stopped by the rounding-error bound |f| <= eps * (8 sum|terms| + 1/rho +
   |tau| f') of LAPACK's dlaed4 rather than by a fixed count.
3. *Eigenvectors* by eq. (17) with u replaced by the Gu-Eisenstat vector u~ of Loewner's
   theorem, u~_i^2 = prod_j (lambda_j - d_i) / (rho prod_{j != i} (d_j - d_i)), which keeps
   them orthogonal when eigenvalues are close.
4. *Conquer*: eigenvectors diag(O1, O2) W, a batched matrix product.

Deflation (section 5.1, done as in LAPACK's dlaed2): a component with rho |u_i| <= tol, or
two poles so close that a Givens rotation zeroing one component changes the matrix by no more
than tol = 8 eps max(|d|_max, rho |u|^2), gives an eigenpair directly.
The whole matrix is scaled to max |entry| = 1 first, so huge and tiny scales are safe.
"""

from __future__ import annotations

import numpy as np

from .._backend import boolean_flags, get_array_module
from . import _common as C

__all__ = ["tridiag_eigh", "eigh_small"]

_MAX_SECULAR_ITER = 64


def _eig2_bl(a, b, c):
    """Eigenpairs of [[a, b], [b, c]] for arrays (G,): w (2, G) ascending, V (2, 2, G)."""
    nz = b != 0
    tau = (c - a) / (2 * np.where(nz, b, 1))
    t = np.where(tau >= 0, 1.0, -1.0).astype(a.dtype) / (np.abs(tau) + np.hypot(1, tau))
    t = np.where(nz, t, 0)                                             # tan of the Jacobi angle
    cs = 1 / np.sqrt(1 + t * t)
    sn = t * cs
    l1, l2 = a - t * b, c + t * b
    swap = l1 > l2
    w = np.stack([np.where(swap, l2, l1), np.where(swap, l1, l2)])      # (2, G)
    v1 = np.stack([cs, -sn])                                            # eigenvector of l1
    v2 = np.stack([sn, cs])                                             # eigenvector of l2
    V = np.stack([np.where(swap, v2, v1), np.where(swap, v1, v2)], axis=1)  # (2, 2, G)
    return w, V


def _model_step(c0, a, b, s_, S_, single, t, lo, hi):
    """t + x for the root x of c0 + s/(a-x) + S/(b-x) = 0 (c0 + s/(a-x) = 0 where ``single``)
    that lands inside the bracket (lo, hi), the nearer one if both do; else the bisection point."""
    qb = -(c0 * (a + b) + s_ + S_)                                     # c0 x^2 + qb x + qc = 0
    qc = c0 * a * b + s_ * b + S_ * a
    disc = np.sqrt(np.maximum(qb * qb - 4 * c0 * qc, 0))
    qq = -(qb + np.where(qb >= 0, disc, -disc)) / 2
    x1 = np.where(single, a + s_ / np.where(c0 != 0, c0, np.inf), qq / np.where(c0 != 0, c0, np.inf))
    x2 = qc / np.where(qq != 0, qq, np.inf)
    t1, t2 = t + x1, t + x2
    in1 = np.isfinite(t1) & (t1 > lo) & (t1 < hi)
    in2 = ~single & np.isfinite(t2) & (t2 > lo) & (t2 < hi)
    return np.where(in1 & (~in2 | (np.abs(x1) <= np.abs(x2))), t1, np.where(in2, t2, (lo + hi) / 2))


def _secular_roots_bl(p, zz, valid, r, k):
    """Roots of 1/r + sum_i zz_i / (p_i - lam) = 0 (eq. 16, scaled) for a batch.

    p, zz, valid: (K, G) poles (ascending on valid entries), weights, validity; r, k: (G,).
    Returns lam (K, G) and Dl (K, K, G) with Dl[i, j] = p_i - lam_j computed accurately from the
    shift to the nearer pole. The roots are handled as one flat list, and each iteration works only
    on those not yet converged, at most ``_MAX_SECULAR_ITER`` times.
    """
    K, G = p.shape
    eps = np.finfo(p.dtype).eps
    jj, gg = np.nonzero(valid)                                         # (m,) root j of system g
    P, Z = p[:, gg], np.where(valid, zz, 0)[:, gg]                     # (K, m) poles, weights
    rinv = 1 / r[gg]                                                   # (m,)
    last = jj == k[gg] - 1                                             # (m,)
    pj = P[jj, np.arange(jj.size)]                                     # (m,) left pole
    pn = P[np.minimum(jj + 1, K - 1), np.arange(jj.size)]              # (m,) right pole
    gap = np.where(last, 1, pn - pj)
    upper = r[gg] * Z.sum(0)                                           # last root in (p_{k-1}, p_{k-1}+upper]
    mid = np.where(last, upper / 2, gap / 2)                           # the middle of the bracket
    fmid = rinv + (Z / (P - pj - mid)).sum(0)                          # f at the middle, origin p_j
    left = last | (fmid >= 0)                                          # nearer pole is the left one
    o = np.where(left, pj, pn)                                         # (m,) origin
    delta = P - o                                                      # (K, m) p_i - o, exact
    lo = np.where(last | left, 0, -gap / 2)
    hi = np.where(last, upper, np.where(left, gap / 2, 0))
    lo = np.where(last & (fmid <= 0), mid, lo)                         # f increases past the last pole
    hi = np.where(last & (fmid > 0), mid, hi)
    ia = jj                                                            # Gragg's two poles:
    ib = np.where(last, jj - 1, jj + 1)                                # j, j+1 inside; j, j-1 last
    single = ib < 0                                                    # one pole only (k == 1)
    ib = np.clip(ib, 0, K - 1)
    # Start inside: the two-pole model with the rest of f frozen at the middle of the interval
    # (dlaed4's initial guess; the last root: its pole and the one before, dlaed4's case i = n).
    cols = np.arange(jj.size)
    zj, zn = Z[jj, cols], Z[np.minimum(jj + 1, K - 1), cols]
    zb, pb = np.where(single, 0, Z[ib, cols]), np.where(single, 0, P[ib, cols] - pj)
    c_init = fmid + (zj - zn) / (gap / 2)
    guess = _model_step(c_init, pj - o, pn - o, zj, zn, np.zeros(jj.size, dtype=bool), 0, lo, hi)
    c_last = fmid + zj / mid - zb / (pb - mid)
    tau = np.where(last, _model_step(c_last, 0, pb, zj, zb, single, 0, lo, hi), guess)
    act = np.arange(jj.size)                                           # not yet converged
    for it in range(_MAX_SECULAR_ITER + 1):
        full = act.size == jj.size                                     # no gathers while all are active
        t, l_, h_ = (tau, lo, hi) if full else (tau[act], lo[act], hi[act])
        Za = Z if full else Z[:, act]                                  # (K, a)
        Dl = (delta if full else delta[:, act]) - t                    # (K, a)
        rD = 1 / Dl                                                    # one division per term
        q = Za * rD                                                    # terms
        aq = np.abs(q).sum(0)                                          # sum |terms|
        f = rinv[act] + q.sum(0)
        q *= rD
        f1 = q.sum(0)                                                  # f'
        q *= rD
        f2 = 2 * q.sum(0)                                              # f''
        bound = eps * (8 * aq + rinv[act] + np.abs(t) * f1)
        l_ = np.where(f < 0, np.maximum(l_, t), l_)
        h_ = np.where(f > 0, np.minimum(h_, t), h_)
        lo[act], hi[act] = l_, h_
        conv = (np.abs(f) <= bound) | (h_ - l_ <= 2 * eps * np.maximum(np.abs(l_), np.abs(h_)))
        conv |= ~np.isfinite(f)                                        # t on a pole: stop, bisected below
        keep = ~conv
        act, t, l_, h_, Dl, f, f1, f2 = act[keep], t[keep], l_[keep], h_[keep], Dl[:, keep], f[keep], \
            f1[keep], f2[keep]
        if act.size == 0 or it == _MAX_SECULAR_ITER:
            break
        cols = np.arange(act.size)
        a, b = Dl[ia[act], cols], Dl[ib[act], cols]                    # p_a - lam, p_b - lam
        sg = single[act]
        ab = np.where(sg, 1, a - b)
        ls = last[act] & ~sg                                           # dlaed4's i = n: the last pole
        za = Z[ia[act], act]                                           # exact, the rest fitted to f'
        # (Gragg's fit to f'' below took up to 18 iterations next to a close pair)
        s_ = np.where(sg, a * a * f1, np.where(ls, za, a ** 3 * (f1 - b * f2 / 2) / ab))
        S_ = np.where(sg, 0, np.where(ls, b * b * (f1 - za / (a * a)), b ** 3 * (f1 - a * f2 / 2) / -ab))
        c0 = f - s_ / a - np.where(sg, 0, S_ / b)
        tau[act] = _model_step(c0, a, b, s_, S_, sg, t, l_, h_)
    lam = np.zeros((K, G), dtype=p.dtype)
    lam[jj, gg] = o + tau
    Dl = np.ones((K, K, G), dtype=p.dtype)
    Dl[:, jj, gg] = delta - tau
    return lam, Dl


def _merge_bl(w1, Q1, w2, Q2, z, rho):
    """Eigen of diag(w1, w2) + rho z z^T in the basis diag(Q1, Q2): steps 2-4 with deflation.

    w1 (n1, G), Q1 (n1, n1, G), w2, Q2 likewise, z (n, G), rho (G,) >= 0.
    Returns w (n, G) ascending and Q (n, n, G).
    """
    n1, n2 = w1.shape[0], w2.shape[0]
    n, G = n1 + n2, w1.shape[-1]
    dt = w1.dtype
    eps = np.finfo(dt).eps
    dd = np.concatenate([w1, w2])                                      # (n, G)
    Qb = np.zeros((n, n, G), dtype=dt)                                 # (n, n, G) diag(Q1, Q2)
    Qb[:n1, :n1] = Q1
    Qb[n1:, n1:] = Q2
    order = np.argsort(dd, axis=0, kind="stable")                      # (n, G)
    dd = np.take_along_axis(dd, order, 0)
    z = np.take_along_axis(z, order, 0)
    Qb = np.take_along_axis(Qb, order[None], 1)
    znorm2 = (z * z).sum(0)                                            # (G,) = 2 up to rounding
    zn = z / np.sqrt(znorm2)                                           # (n, G)
    r = rho * znorm2                                                   # (G,)
    tol = 8 * eps * np.maximum(np.abs(dd).max(0), r)                   # (G,)
    defl = r * np.abs(zn) <= tol                                       # (n, G) small components
    prev = np.full(G, -1)                                              # last undeflated pole
    for kk in range(n):                                                # close poles (dlaed2)
        act = ~defl[kk]
        g = np.flatnonzero(act & (prev >= 0))
        if g.size:
            pj = prev[g]
            zp, zk = zn[pj, g], zn[kk, g]
            tau = np.hypot(zp, zk)
            cs, sn = zk / tau, -zp / tau
            close = np.abs((dd[kk, g] - dd[pj, g]) * cs * sn) <= tol[g]
            if close.any():
                g, pj, cs, sn, tau = g[close], pj[close], cs[close], sn[close], tau[close]
                qp, qk = Qb[:, pj, g], Qb[:, kk, g]                    # (n, m) copies
                Qb[:, pj, g] = cs * qp + sn * qk
                Qb[:, kk, g] = cs * qk - sn * qp
                dp, dk = dd[pj, g], dd[kk, g]
                dd[pj, g] = dp * cs * cs + dk * sn * sn
                dd[kk, g] = dp * sn * sn + dk * cs * cs
                zn[kk, g], zn[pj, g] = tau, 0
                defl[pj, g] = True
        prev = np.where(act, kk, prev)
    # Undeflated poles first (still ascending), deflated ones after.
    order = np.argsort(defl, axis=0, kind="stable")
    dd = np.take_along_axis(dd, order, 0)
    zn = np.take_along_axis(zn, order, 0)
    Qb = np.take_along_axis(Qb, order[None], 1)
    k = (~defl).sum(0)                                                 # (G,) secular sizes
    K = int(k.max())
    lam = dd.copy()                                                    # deflated eigenvalues stay
    Q = Qb
    if K > 0:
        valid = np.arange(K)[:, None] < k[None]                        # (K, G)
        p = dd[:K].copy()
        plast = np.take_along_axis(p, np.maximum(k - 1, 0)[None], 0)[0]
        p = np.where(valid, p, (plast + 2 * r + 1)[None])              # park masked poles far right
        zz = np.where(valid, zn[:K] ** 2, 0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lam_s, Dl = _secular_roots_bl(p, zz, valid, np.where(r > 0, r, 1), k)
            # Gu-Eisenstat u~ (Loewner): -prod_j (p_i - lam_j) / prod_{j != i} (p_i - p_j).
            pd = p[:, None, :] - p[None, :, :]                         # (i, j, G)
            eye = np.eye(K, dtype=bool)[..., None]
            ratio = np.where(eye, Dl, Dl / np.where(eye, 1, pd))
            vv = valid[:, None, :] & valid[None, :, :]
            Wp = np.where(vv, ratio, 1).prod(axis=1)                   # (i, G)
            zt = np.where(zn[:K] >= 0, 1, -1) * np.sqrt(np.maximum(-Wp, 0))
            V = np.where(vv, zt[:, None, :] / Dl, 0)                   # (i, j, G) eq. (17)
            V /= np.where(valid, np.sqrt((V * V).sum(0)), 1)[None]
        QV = np.einsum("ikG,kjG->ijG", Qb[:, :K], V)                   # (n, K, G) step 4
        Q = Qb.copy()
        Q[:, :K] = np.where(valid[None], QV, Qb[:, :K])
        lam[:K] = np.where(valid, lam_s, lam[:K])
    order = np.argsort(lam, axis=0, kind="stable")
    return np.take_along_axis(lam, order, 0), np.take_along_axis(Q, order[None], 1)


def _tridiag_eigh_bl(d, e):
    """Divide and conquer on a batch-last block: d (n, c), e (n-1, c) -> w (n, c), V (n, n, c)."""
    n, c = d.shape
    dt = d.dtype
    scale = np.abs(d).max(0)
    if n > 1:
        scale = np.maximum(scale, np.abs(e).max(0))
    scale = np.where(scale > 0, scale, 1).astype(dt)                   # (c,)
    d, e = d / scale, e / scale
    leaves, levels = C.division_tree(n)
    dt_ = d.copy()                                                     # torn diagonal (eq. 15)
    for n1, _, starts in levels:
        for s in starts:
            rho = np.abs(e[s + n1 - 1])
            dt_[s + n1 - 1] -= rho
            dt_[s + n1] -= rho
    W = np.empty((n, c), dtype=dt)                                     # (n, c) eigenvalues by node
    Qs = {}                                                            # node start -> (size, size, c)
    ones = [s for s, size in leaves if size == 1]
    for s in ones:
        W[s] = dt_[s]
        Qs[s] = np.ones((1, 1, c), dtype=dt)
    twos = [s for s, size in leaves if size == 2]
    if twos:
        idx = np.array(twos)
        w2, V2 = _eig2_bl(dt_[idx].ravel(), e[idx].ravel(), dt_[idx + 1].ravel())
        w2, V2 = w2.reshape(2, len(twos), c), V2.reshape(2, 2, len(twos), c)
        for g, s in enumerate(twos):
            W[s:s + 2] = w2[:, g]
            Qs[s] = V2[:, :, g]
    for n1, n2, starts in levels:
        cat = np.concatenate
        w1 = cat([W[s:s + n1] for s in starts], axis=-1)               # (n1, L c)
        w2 = cat([W[s + n1:s + n1 + n2] for s in starts], axis=-1)
        Q1 = cat([Qs.pop(s) for s in starts], axis=-1)                 # (n1, n1, L c)
        Q2 = cat([Qs.pop(s + n1) for s in starts], axis=-1)
        beta = cat([e[s + n1 - 1] for s in starts])                    # (L c,)
        sgn = np.where(beta >= 0, 1, -1).astype(dt)
        z = cat([Q1[n1 - 1], sgn * Q2[0]])                             # (n, L c)
        w, Q = _merge_bl(w1, Q1, w2, Q2, z, np.abs(beta))
        for g, s in enumerate(starts):
            W[s:s + n1 + n2] = w[:, g * c:(g + 1) * c]
            Qs[s] = Q[..., g * c:(g + 1) * c]
    return W * scale, Qs[0]


@boolean_flags("check_finite")
def tridiag_eigh(d, e, *, check_finite=True):
    """Eigenvalues and eigenvectors of a batch of symmetric tridiagonal matrices by divide and conquer.

    Parameters
    ----------
    d : (..., n) array_like, float32 or float64
        Diagonals.
    e : (..., n-1) array_like
        Off-diagonals.
    check_finite : bool, default True
        Raise ``ValueError`` naming the first system with a NaN or Inf; with False such systems
        get NaN outputs.

    Returns
    -------
    w : (..., n) eigenvalues, ascending.
    V : (..., n, n) orthonormal eigenvectors, column ``V[..., :, i]`` for ``w[..., i]``.

    References
    ----------
    Abbas-Turki-Graillat, section 5, eqs. (15)-(17), Algorithm 3; Gu & Eisenstat, SIAM J. Matrix Anal.
    Appl. 16 (1995); R.-C. Li, LAPACK Working Note 89 (1993) for the secular equation.

    Examples
    --------
    >>> import numpy as np, linalg_gpu as lg
    >>> d, e = np.array([2.0, 3.0, 1.0, 4.0]), np.array([1.0, 0.5, 0.25])
    >>> w, V = lg.tridiag_eigh(d, e)
    >>> T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    >>> bool(np.allclose(T @ V, V * w) and np.allclose(w, np.linalg.eigvalsh(T)))
    True
    """
    d, e, batch, n, dt = C.check_tridiagonal(d, e, "tridiag_eigh")
    if check_finite:
        C.check_finite_batch([d, e], batch, ["d", "e"])
    w, V = C.map_chunks(_tridiag_eigh_bl, (C.flatten_batch(d.astype(dt, copy=False), 1),
                                           C.flatten_batch(e.astype(dt, copy=False), 1)), n)
    return w.reshape(batch + (n,)), V.reshape(batch + (n, n))


def _eigh_small_bl(A):
    """Householder + divide and conquer on a batch-last block: A (n, n, c) -> w (n, c), N (n, n, c)."""
    from .householder import _apply_reflectors_bl, _tridiagonalize_bl

    d, e, U, beta = _tridiagonalize_bl(A)
    w, O = _tridiag_eigh_bl(d, e)
    return w, _apply_reflectors_bl(U, beta, O, transpose=False)        # N = Q O


@boolean_flags("check_finite", "assume_symmetric")
def eigh_small(A, *, check_finite=True, assume_symmetric=False):
    """Eigen-decomposition A = N diag(w) N^T of a batch of small symmetric matrices.

    Householder tridiagonalization (section 4) followed by divide and conquer (section 5), the
    decomposition behind the truncated solve of the robust strategy. Only the lower triangle
    of A is used. numpy input is computed on the CPU; cupy input (n <= 64) by the kernel
    ``cuda/eigh_small.cu``, which follows the same steps, except for n <= 12 (float32) and n <= 10
    (float64): there the GPU runs the two-sided parallel Jacobi method (Torun et al., as
    :func:`linalg_gpu.jacobi.klt.jacobi_eigh`) with one thread per system, ``cuda/eigh_jacobi.cu``
    (numpy twin: ``linalg_gpu.small.jacobi_eigh``), 2.2x (float32) and 1.9x (float64) faster than
    the divide-and-conquer kernel at n = 8 on an H100, 6.5x and 3.2x at n = 9. Both give eigenvalues
    to a few n eps ||A|| and orthonormal eigenvectors; the eigenvectors of a cluster of close
    eigenvalues (and their signs) can differ between the two. float32 on the GPU loses the tiny end
    of the range (measured on an H100: max |A_ij| = 2^-120 with off-diagonal entries at 1 % of it,
    float32 subnormals, gave eigenvalue errors of 1-3 % of ||A||; 2^-126 and below gave zeros); the
    CPU path keeps it.

    Parameters
    ----------
    A : (..., n, n) array_like, float32 or float64
    check_finite : bool, default True
        Raise ``ValueError`` naming the first system that holds a NaN or an Inf; with False such
        systems get NaN outputs.
    assume_symmetric : bool, default False
        As in :func:`linalg_gpu.solve_small`.

    Returns
    -------
    w : (..., n) eigenvalues, ascending (as ``numpy.linalg.eigh``).
    N : (..., n, n) orthonormal eigenvectors in columns.

    Examples
    --------
    >>> import numpy as np, linalg_gpu as lg
    >>> X = np.random.default_rng(1).standard_normal((2, 6, 6)); A = X + X.transpose(0, 2, 1)
    >>> w, N = lg.eigh_small(A)
    >>> bool(np.allclose(A @ N, N * w[..., None, :]) and np.allclose(w, np.linalg.eigvalsh(A)))
    True
    """
    xp = get_array_module(A)
    if xp is not np:                                                   # cupy: cuda/eigh_small.cu
        A = C.check_square_batch(A, "A")
        batch, n = A.shape[:-2], A.shape[-1]
        from . import _gpu

        if n > _gpu.MAX_N:
            raise ValueError(f"n = {n} is larger than the GPU kernels' limit of {_gpu.MAX_N}")
        w, N, nonfinite, asym = _gpu.eigh_small(C.contiguous_batch(xp, A, A.dtype, 2))
        if check_finite or not assume_symmetric:                      # the kernel's screening
            found = _gpu.screening_flags(nonfinite, asym, C.SYMMETRY_RTOL * np.finfo(A.dtype).eps)
            C.raise_for_flags(A, [A], ["A"], check_finite and found[0], not assume_symmetric and found[1])
        wshape = batch + (n,)                                          # (a view costs host time)
        return (w if w.shape == wshape else w.reshape(wshape)), (N if N.shape == A.shape else N.reshape(A.shape))
    A, batch, n = C.check_symmetric_input(A, "eigh_small", check_finite, assume_symmetric)
    w, N = C.map_chunks(_eigh_small_bl, (C.flatten_batch(A, 2),), n)
    return w.reshape(batch + (n,)), N.reshape(A.shape)
