"""Closed-form prices of European contracts, the checks of the Monte Carlo prices.

- one asset: Black-Scholes with a continuous dividend yield;
- two assets, call on the max or the min: Stulz (1982), in the form of Haug, *The Complete Guide
  to Option Pricing Formulas*, 2nd ed., section 4.4 (with dividend yields), the min-call by
  C_min = C(S1) + C(S2) - C_max, and puts by the parity P = C - D(E[U_T] - K) with E[max],
  E[min] from the exchange option (Margrabe).
Other European contracts have no closed form here (``closed_form_price`` returns None).
"""

from __future__ import annotations

import math

import numpy as np

_GL_X, _GL_W = np.polynomial.legendre.leggauss(96)


def norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def bivariate_norm_cdf(h: float, k: float, rho: float) -> float:
    """P(X <= h, Y <= k) for standard normals with correlation rho.

    By Plackett's identity d/drho M = phi2(h, k; rho), integrated from rho = 0 in theta =
    arcsin(rho) with 96-point Gauss-Legendre (Drezner & Wesolowsky 1990): accurate to about
    1e-13 for |rho| <= 0.99; |rho| = 1 is the degenerate limit.
    """
    if rho >= 1.0:
        return norm_cdf(min(h, k))
    if rho <= -1.0:
        return max(0.0, norm_cdf(h) - norm_cdf(-k))
    a = math.asin(rho)
    th = 0.5 * a * (_GL_X + 1.0)                                   # nodes on (0, asin rho)
    s, c2 = np.sin(th), np.cos(th) ** 2
    f = np.exp(-(h * h - 2.0 * h * k * s + k * k) / (2.0 * c2))
    return norm_cdf(h) * norm_cdf(k) + 0.5 * a * float(_GL_W @ f) / (2.0 * math.pi)


def black_scholes(S, K, T, r, q, sigma, payoff="call") -> float:
    """Black-Scholes price of a European call or put with dividend yield q."""
    if sigma * math.sqrt(T) < 1e-12:
        fwd = S * math.exp(-q * T) - K * math.exp(-r * T)
        return max(fwd, 0.0) if payoff == "call" else max(-fwd, 0.0)
    sd = sigma * math.sqrt(T)
    d1 = (math.log(S / K) + (r - q + 0.5 * sigma**2) * T) / sd
    d2 = d1 - sd
    if payoff == "call":
        return S * math.exp(-q * T) * norm_cdf(d1) - K * math.exp(-r * T) * norm_cdf(d2)
    return K * math.exp(-r * T) * norm_cdf(-d2) - S * math.exp(-q * T) * norm_cdf(-d1)


def _exchange_sigma(s1, s2, rho):
    return math.sqrt(max(s1**2 + s2**2 - 2.0 * rho * s1 * s2, 0.0))


def stulz_max_call(S1, S2, K, T, r, q1, q2, s1, s2, rho) -> float:
    """Call on max(S1, S2) with strike K (Stulz 1982; Haug eq. 4.4.1)."""
    sig = _exchange_sigma(s1, s2, rho)
    sq = math.sqrt(T)
    d = (math.log(S1 / S2) + (q2 - q1 + 0.5 * sig**2) * T) / (sig * sq)
    y1 = (math.log(S1 / K) + (r - q1 + 0.5 * s1**2) * T) / (s1 * sq)
    y2 = (math.log(S2 / K) + (r - q2 + 0.5 * s2**2) * T) / (s2 * sq)
    rho1 = (s1 - rho * s2) / sig
    rho2 = (s2 - rho * s1) / sig
    M = bivariate_norm_cdf
    return (S1 * math.exp(-q1 * T) * M(y1, d, rho1) + S2 * math.exp(-q2 * T) * M(y2, -d + sig * sq, rho2)
            - K * math.exp(-r * T) * (1.0 - M(-y1 + s1 * sq, -y2 + s2 * sq, rho)))


def _expected_max(S1, S2, T, r, q1, q2, s1, s2, rho) -> float:
    """exp(-rT) E[max(S1_T, S2_T)] = S2 e^{-q2 T} + Margrabe's exchange option on S1 for S2."""
    sig = _exchange_sigma(s1, s2, rho)
    a, b = S1 * math.exp(-q1 * T), S2 * math.exp(-q2 * T)
    if sig * math.sqrt(T) < 1e-12:
        return max(a, b)
    d1 = (math.log(a / b) + 0.5 * sig**2 * T) / (sig * math.sqrt(T))
    return b + a * norm_cdf(d1) - b * norm_cdf(d1 - sig * math.sqrt(T))


def closed_form_price(contract, model) -> float | None:
    """The closed-form t = 0 price per unit of a European contract, or None where there is none."""
    if not contract.is_european:
        return None
    K, T, r = contract.strike, contract.maturity, model.rate
    S, q, v, C = model.spot, model.dividend, model.vol, model.correlation
    if contract.underlying == "asset" or model.d == 1 and contract.underlying in ("basket", "max", "min"):
        i = contract.asset if contract.underlying == "asset" else 0
        return black_scholes(S[i], K, T, r, q[i], v[i], contract.payoff)
    if model.d != 2 or contract.underlying not in ("max", "min"):
        return None
    args = (S[0], S[1], K, T, r, q[0], q[1], v[0], v[1], C[0, 1])
    if min(v[0], v[1], _exchange_sigma(v[0], v[1], C[0, 1])) * math.sqrt(T) < 1e-8:
        return None                                     # degenerate market: the formula divides by zero
    cmax = stulz_max_call(*args)
    e_max = _expected_max(S[0], S[1], T, r, q[0], q[1], v[0], v[1], C[0, 1])
    if contract.underlying == "max":
        call, e_u = cmax, e_max
    else:
        call = (black_scholes(S[0], K, T, r, q[0], v[0]) + black_scholes(S[1], K, T, r, q[1], v[1]) - cmax)
        e_u = S[0] * math.exp(-q[0] * T) + S[1] * math.exp(-q[1] * T) - e_max     # min = S1 + S2 - max
    if contract.payoff == "call":
        return call
    return call - (e_u - K * math.exp(-r * T))                                        # put-call parity


def _ndtr(x, xp):
    """Standard normal CDF of an array (cupyx's ndtr on the GPU; math.erfc per element on the CPU)."""
    if xp is np:
        return 0.5 * np.frompyfunc(math.erfc, 1, 1)(-np.asarray(x, dtype=float) / math.sqrt(2.0)).astype(float)
    from cupyx.scipy.special import ndtr

    return ndtr(x)


def black_scholes_array(S, K, tau, r, q, sigma, payoff="call"):
    """Black-Scholes prices of one contract at many spots S (numpy or cupy array), tau > 0."""
    from linalg_gpu._backend import get_array_module

    xp = get_array_module(S)
    sd = sigma * math.sqrt(tau)
    disc_q, disc_r = math.exp(-q * tau), math.exp(-r * tau)
    if sd < 1e-12:
        fwd = S * disc_q - K * disc_r
        return xp.maximum(fwd, 0) if payoff == "call" else xp.maximum(-fwd, 0)
    d1 = (xp.log(S / K) + (r - q + 0.5 * sigma**2) * tau) / sd
    d2 = d1 - sd
    if payoff == "call":
        return S * disc_q * _ndtr(d1, xp).astype(S.dtype) - K * disc_r * _ndtr(d2, xp).astype(S.dtype)
    return K * disc_r * _ndtr(-d2, xp).astype(S.dtype) - S * disc_q * _ndtr(-d1, xp).astype(S.dtype)


def black_scholes_columns(S, K, tau, r, q, sigma, call):
    """Black-Scholes prices of n contracts at once: column j of S (L, n) (numpy or cupy) priced with strike K[j],
    time to maturity tau[j] > 0, dividend yield q[j], vol sigma[j], a call where call[j] else a put, at the
    rate r; each column bit for bit :func:`black_scholes_array` of its contract with Python float arguments (the
    same operations on the same numbers: the per-contract constants in double precision on the host, then cast to
    S's dtype, so d1 and d2 are in S's dtype)."""
    from linalg_gpu._backend import get_array_module

    xp = get_array_module(S)
    n = S.shape[1]
    sd = [sigma[j] * math.sqrt(tau[j]) for j in range(n)]
    cols = {"K": K, "sd": sd, "dq": [math.exp(-q[j] * tau[j]) for j in range(n)],
            "Kdr": [K[j] * math.exp(-r * tau[j]) for j in range(n)],
            "drift": [(r - q[j] + 0.5 * sigma[j]**2) * tau[j] for j in range(n)]}
    c = {k: xp.asarray(np.asarray(v, dtype=float).astype(S.dtype)) for k, v in cols.items()}
    is_call = xp.asarray(np.asarray(call, dtype=bool))
    tiny = xp.asarray(np.asarray(sd) < 1e-12)
    d1 = (xp.log(S / c["K"]) + c["drift"]) / xp.where(tiny, S.dtype.type(1), c["sd"])
    d2 = d1 - c["sd"]
    n1 = _ndtr(xp.where(is_call, d1, -d2), xp).astype(S.dtype)          # N(d1) of a call, N(-d2) of a put
    n2 = _ndtr(xp.where(is_call, d2, -d1), xp).astype(S.dtype)          # N(d2) of a call, N(-d1) of a put
    Sq = S * c["dq"]
    price = xp.where(is_call, Sq * n1 - c["Kdr"] * n2, c["Kdr"] * n1 - Sq * n2)
    fwd = Sq - c["Kdr"]                                                  # no vol left: the discounted payoff
    return xp.where(tiny, xp.where(is_call, xp.maximum(fwd, 0), xp.maximum(-fwd, 0)), price)
