"""Helpers shared by the Jacobi algorithms and their blocked GPU variants (``blocked``, ``congruence``): the
2 x 2 Hari-Zimmermann and hyperbolic transformations, row norms, the GSVD's zero threshold, the output order of
the hyperbolic SVD and the run record. They sit below every algorithm module, so that dependencies run one way:
an algorithm -> its blocked variant -> these."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._backend import get_array_module


def _row_norms(W):
    """Euclidean norms of the rows of W (..., n, m) (numpy or cupy, real or complex; a stack row by row), scaled
    per row so that tiny rows do not underflow and huge ones do not overflow."""
    xp = get_array_module(W)
    mx = xp.abs(W).max(axis=-1) if W.shape[-1] else xp.zeros(W.shape[:-1], xp.abs(W).dtype)   # (..., n)
    safe = xp.where(mx > 0, mx, 1).astype(mx.dtype)
    return mx * xp.sqrt((xp.abs(W / safe[..., None]) ** 2).sum(axis=-1))


def _hz_real(a1, a2, a12, x, one):
    """Section 2.1.2's Z' (t, cos(phi), cos(psi) for C1) of the rescaled pivot blocks, x = b'_ij."""
    xp = get_array_module(a1)
    two = 2 * one
    t = xp.sqrt((one - x) * (one + x))
    sp, sm = xp.sqrt(one + x), xp.sqrt(one - x)
    xi = x / (sp + sm)
    eta = x / ((one + sp) * (one + sm))
    num = t * (a2 - a1)
    den = two * a12 - (a1 + a2) * x
    exception = (num == 0) & (den == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        cot = xp.where(exception, 0, num / xp.where(exception, 1, den))     # +-inf where den = 0
        tan = xp.where(xp.isinf(cot), 0, xp.sign(cot) / (xp.abs(cot) + xp.hypot(one, cot)))
    tan = xp.where(cot == 0, one, tan)                                   # cot = 0: theta = pi/4
    c = one / xp.sqrt(one + tan * tan)
    s = tan * c
    cphi = c + xi * (s - eta * c)
    cpsi = c - xi * (s + eta * c)
    sphi = s - xi * (c + eta * s)
    spsi = s + xi * (c - eta * s)
    z11, z12, z21, z22 = cphi / t, sphi / t, -spsi / t, cpsi / t
    r2 = one / xp.sqrt(two)
    e1, e2 = r2 / sp, r2 / sm                                            # the exception's Z'
    z11, z12 = xp.where(exception, e1, z11), xp.where(exception, -e2, z12)
    z21, z22 = xp.where(exception, e1, z21), xp.where(exception, e2, z22)
    return z11, z12, z21, z22, t, xp.where(exception, 0, cphi), xp.where(exception, 0, cpsi)


def _hz_complex(a1, a2, a12, b12, one):
    """Section 2.1.1's Z' (t, cos(phi), cos(psi) for C1) of the rescaled pivot blocks, b12 = b'_ij.

    x = |b'_ij|, e^{i zeta} its phase (1 for 0), z = e^{-i zeta} a'_ij = u + i v, h = a'_jj - a'_ii,
    tau = sign(1, h); tan(2 theta) = tau (2 u - (a'_ii + a'_jj) x) / (t sqrt(h^2 + 4 v^2)), tan(gamma) = 2 v / h;
    cos(phi), cos(psi) = sqrt(1 +- x sin(2 theta) + t cos(gamma) cos(2 theta)) / sqrt(2),
    e^{i alpha} sin(phi) = e^{i zeta} ((sin(2 theta) - x) + i t sin(gamma) cos(2 theta)) / (2 cos(psi)),
    e^{-i beta} sin(psi) = e^{-i zeta} ((sin(2 theta) + x) - i t sin(gamma) cos(2 theta)) / (2 cos(phi)),
    Z' = [[cos(phi), e^{i alpha} sin(phi)], [-e^{-i beta} sin(psi), cos(psi)]] / t.
    For h = 0 (gamma = +-pi/2) sin(gamma) = sign(v): the paper's sin(gamma) = 1 diagonalizes only for
    v > 0 (measured on random pairs: off-diagonal up to 30x the diagonal for v < 0). Exception (v = h = 0):
    Z' = [[1 / sqrt(1 + x), -e^{i zeta} / sqrt(1 - x)], [e^{-i zeta} / sqrt(1 + x), 1 / sqrt(1 - x)]] / sqrt(2)."""
    xp = get_array_module(a1)
    two = 2 * one
    x = xp.abs(b12)
    ph = b12 / xp.where(x > 0, x, 1)
    ph = xp.where(x > 0, ph, 1)                                          # e^{i zeta}
    z = a12 * ph.conj()
    u, v = z.real, z.imag
    h = a2 - a1
    tau = xp.where(h < 0, -one, one)
    t = xp.sqrt((one - x) * (one + x))
    exception = (h == 0) & (v == 0)
    den = t * xp.hypot(h, two * v)
    tan2 = tau * (two * u - (a1 + a2) * x) / xp.where(exception, 1, den)
    c2 = one / xp.sqrt(one + tan2 * tan2)
    s2 = tan2 * c2
    hz = h == 0
    tg = two * v / xp.where(hz, 1, h)
    cg = xp.where(hz, 0, one / xp.sqrt(one + tg * tg))
    sg = xp.where(hz, xp.sign(v), tg * cg)
    w = t * cg * c2
    cphi = xp.sqrt((one + x * s2 + w) / two)
    cpsi = xp.sqrt((one - x * s2 + w) / two)
    ws = t * sg * c2
    sphi = ph * ((s2 - x) + 1j * ws) / (two * cpsi)                      # e^{i alpha} sin(phi)
    spsi = ph.conj() * ((s2 + x) - 1j * ws) / (two * cphi)               # e^{-i beta} sin(psi)
    z11, z12, z21, z22 = cphi / t, sphi / t, -spsi / t, cpsi / t
    r2 = one / xp.sqrt(two)
    e1, e2 = r2 / xp.sqrt(one + x), r2 / xp.sqrt(one - x)                # the exception's Z'
    z11, z12 = xp.where(exception, e1, z11), xp.where(exception, -ph * e2, z12)
    z21, z22 = xp.where(exception, ph.conj() * e1, z21), xp.where(exception, e2, z22)
    return z11, z12, z21, z22, t, xp.where(exception, 0, cphi), xp.where(exception, 0, cpsi)


def hz_transform(aii, ajj, aij, bii, bjj, bij, tol):
    """The 2 x 2 transformations of the pivot pairs (arrays of the same shape; module docstring); aij, bij
    complex for complex F, G (section 2.1.1), the diagonals real.

    Returns (z11, z12, z21, z22, rotate, big): Z = [[z11, z12], [z21, z22]] with the rescaling D and
    the sorting swap included; ``rotate`` False where the pair was relatively orthogonal (Z is then
    the identity or the swap), ``big`` True for the big transformations (criterion C1)."""
    xp = get_array_module(aii)
    dt = aii.dtype.type
    one, two = dt(1), dt(2)
    di, dj = one / xp.sqrt(bii), one / xp.sqrt(bjj)                      # D
    a1, a2, a12 = aii * di * di, ajj * dj * dj, aij * di * dj            # A' = D A D
    x = bij * di * dj                                                    # b'_ij
    # not relatively orthogonal (a strict test for A, so that a pair of zero columns of F is left alone)
    rotate = (xp.abs(x) >= tol) | (xp.abs(a12) > xp.sqrt(xp.abs(a1)) * xp.sqrt(xp.abs(a2)) * tol)
    x = xp.where(rotate, x, 0)
    hz = _hz_complex if x.dtype.kind == "c" else _hz_real
    z11, z12, z21, z22, t, cphi, cpsi = hz(a1, a2, a12, x, one)
    # criterion C1, to one rounding: cos/t of 1 + eps (t = 1 - eps/2 for |x| just above eps/4) is small;
    # the exceptions (cphi = cpsi = 0 there) are big
    e1 = dt(2 * np.finfo(aii.dtype).eps)
    big = rotate & ~((xp.abs(cphi / t - 1) <= e1) & (xp.abs(cpsi / t - 1) <= e1))
    z11, z12 = xp.where(rotate, z11, one), xp.where(rotate, z12, 0)
    z21, z22 = xp.where(rotate, z21, 0), xp.where(rotate, z22, one)
    # the new diagonal of A' (z_k^H A' z_k), to keep it descending: swap the columns of Z' if not
    d1 = abs(z11) ** 2 * a1 + two * (z11.conj() * z21 * a12).real + abs(z21) ** 2 * a2
    d2 = abs(z12) ** 2 * a1 + two * (z12.conj() * z22 * a12).real + abs(z22) ** 2 * a2
    swap = d1 < d2
    z11, z12 = xp.where(swap, z12, z11), xp.where(swap, z11, z12)
    z21, z22 = xp.where(swap, z22, z21), xp.where(swap, z21, z22)
    di, dj = xp.where(rotate, di, one), xp.where(rotate, dj, one)        # no rescaling without a rotation
    return z11 * di, z12 * di, z21 * dj, z22 * dj, rotate, big


def frobenius(X):
    """||X||_F without under- or overflow (numpy or cupy)."""
    return _row_norms(X.reshape(1, -1))[0]


def zero_threshold(sF, WZ, fnorm, xp):
    """Which alphas are nonzero: ||F z_j|| above the rounding of the product F z_j, n eps ||F||_F ||z_j||
    (z_j: row j of WZ, unscaled like sF; fnorm = ||F||_F by ``frobenius``). Below it F is rank deficient in
    the direction z_j. (With ||F Z||_F in place of ||F||_F the bound grew with the largest alpha / beta:
    float32 64 x 64 Gaussian pairs lost alphas up to 0.048 of a nonsingular F, about one pair in 27.)"""
    return sF > sF.shape[0] * np.finfo(WZ.dtype).eps * fnorm * _row_norms(WZ)


def _sorted_positions(d, sign):
    """Column indices by position: the j = +1 columns by d descending, then the j = -1 ones ascending."""
    pos = np.flatnonzero(sign > 0)
    neg = np.flatnonzero(sign < 0)
    return np.concatenate([pos[np.argsort(-d[pos], kind="stable")], neg[np.argsort(d[neg], kind="stable")]])


def _output_slots(s, row_sign, sign):
    """For each output slot k (G's column order), the row of ``s`` it takes: among the rows of the
    sign ``sign[k]``, the + ones by s descending, the - ones ascending, so that V keeps J as given."""
    order = _sorted_positions(s, row_sign)
    npos = int((row_sign > 0).sum())
    pick = np.empty(len(sign), dtype=np.int64)
    pick[sign > 0], pick[sign < 0] = order[:npos], order[npos:]
    return pick


def _hyperbolic_pair(alpha, beta, gamma, hyp):
    """The 2 x 2 transformations [g_i g_j] <- [g_i g_j] [[a, b], [e, f]] of the pairs (eqs. 2.2-2.5):
    [[c, ct], [-ct, c]] or [[ch, ch t], [ch t, ch]],
    and t; ``hyp`` True for opposite signs. Returns (a, b, e, f, t, ok) with ok False where a
    hyperbolic pair has |zeta| <= 1 (the columns are numerically dependent)."""
    dt = alpha.dtype.type
    one = dt(1)
    t = np.empty_like(alpha)
    ok = np.ones(alpha.shape, dtype=bool)
    tr = ~hyp
    if tr.any():                                                         # trigonometric, eq. 2.4
        zeta = (beta[tr] - alpha[tr]) / (2 * gamma[tr])
        t[tr] = np.copysign(one, zeta) / (np.abs(zeta) + np.hypot(one, zeta))
    if hyp.any():                                                        # hyperbolic, eq. 2.5
        zeta = (alpha[hyp] + beta[hyp]) / (2 * gamma[hyp])
        az = np.abs(zeta)
        ok[hyp] = az > 1
        root = np.sqrt(np.maximum(az - 1, 0) * (az + 1))
        t[hyp] = -np.copysign(one, zeta) / (az + root)
    c = one / np.sqrt(np.where(hyp, (one - t) * (one + t), one + t * t))  # cos phi or cosh phi
    s = c * t
    return c, s, np.where(hyp, s, -s), c, t, ok


@dataclass(frozen=True)
class JacobiInfo:
    """What a Jacobi run did (``return_info=True``).

    Attributes
    ----------
    sweeps : int
        Sweeps run, including the last one, which rotates nothing when ``converged``.
    converged : bool
        A sweep rotated no pair within ``max_sweeps`` sweeps.
    rotations : int
        Plane rotations applied over all sweeps.
    off_norm : float
        ||offdiag(A_final)||_F / ||A||_F (0 for the zero matrix): the part of A left off the
        diagonal, relative to A (the diagonalization metric off(A), eq. 2 of Torun et al.).
    tol : float
        The rotation threshold used.
    """

    sweeps: int
    converged: bool
    rotations: int
    off_norm: float
    tol: float
