"""The market model: d correlated Black-Scholes assets, stepped exactly in log space.

Under the risk-neutral measure with flat rate r, dividend yields q_i, vols sigma_i and
correlation C,

    S_i(t + h) = S_i(t) exp((r - q_i - sigma_i^2 / 2) h + sigma_i sqrt(h) (L z)_i),   L L^T = C,

with z standard normal (from :mod:`cva.market.rng`). The step is exact for any h, so any grid works.
The paper's Black-Scholes setting (section 2 of ``001_4133cfb59d0e090f.txt``) is the case of
one vol and a scalar correlation. With a factor ``loading`` B (d, k) (:mod:`cva.market.factors`), L = B: each
step draws k normals instead of d and the correlation is B B^T.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from linalg_gpu._backend import get_array_module

#: Tolerances of the correlation checks: entries must be symmetric and the diagonal one to this
#: absolute accuracy, and the smallest eigenvalue must not be below ``-PSD_TOL``.
SYMMETRY_TOL = 1e-10
PSD_TOL = 1e-10

CUDA_DIR = Path(__file__).resolve().parent / "cuda"     # this package's kernels (the loader is linalg_gpu's)


def correlation_matrix(corr, d: int) -> np.ndarray:
    """The d x d correlation matrix from a scalar (equicorrelation) or a full matrix.

    Raises
    ------
    ValueError
        When the matrix has the wrong shape, is not symmetric, has a diagonal other than one,
        has entries outside [-1, 1] or is not positive semi-definite; the message says which
        and by how much.
    """
    if np.ndim(corr) == 0:
        rho = float(corr)
        if not np.isfinite(rho):
            raise ValueError(f"correlation must be finite, got {rho}")
        C = np.full((d, d), rho)
        np.fill_diagonal(C, 1.0)
        if d > 1 and not (-(1.0 + PSD_TOL / 2) / (d - 1) <= rho <= 1.0):  # then the matrix check passes too
            raise ValueError(f"scalar correlation {rho} is not positive semi-definite for d = {d} assets: "
                             f"it must lie in [{-1.0 / (d - 1):.6g}, 1]")
        return C
    C = np.asarray(corr, dtype=float)
    if C.shape != (d, d):
        raise ValueError(f"correlation matrix has shape {C.shape}, expected ({d}, {d}) for d = {d} assets")
    if not np.all(np.isfinite(C)):
        raise ValueError("correlation matrix has NaN or Inf entries")
    asym = np.abs(C - C.T)
    if asym.max() > SYMMETRY_TOL:
        i, j = np.unravel_index(np.argmax(asym), asym.shape)
        raise ValueError(f"correlation matrix is not symmetric: entry [{i}][{j}] = {C[i, j]} "
                         f"but [{j}][{i}] = {C[j, i]} (difference {asym[i, j]:.3g})")
    diag = np.abs(np.diag(C) - 1.0)
    if diag.max() > SYMMETRY_TOL:
        i = int(np.argmax(diag))
        raise ValueError(f"correlation matrix diagonal must be 1: entry [{i}][{i}] = {C[i, i]}")
    if np.abs(C).max() > 1.0 + SYMMETRY_TOL:
        i, j = np.unravel_index(np.argmax(np.abs(C)), C.shape)
        raise ValueError(f"correlation entry [{i}][{j}] = {C[i, j]} is outside [-1, 1]")
    w = np.linalg.eigvalsh(C)
    if w[0] < -PSD_TOL:
        raise ValueError(f"correlation matrix is not positive semi-definite: smallest eigenvalue {w[0]:.6g}")
    return 0.5 * (C + C.T)


def correlation_factor(C: np.ndarray) -> np.ndarray:
    """L with L L^T = C for a positive semi-definite C (Cholesky, or the eigen square root when
    C is singular)."""
    try:
        return np.linalg.cholesky(C)
    except np.linalg.LinAlgError:
        w, V = np.linalg.eigh(C)
        return V * np.sqrt(np.clip(w, 0.0, None))


@dataclass(frozen=True)
class BlackScholes:
    """d-asset Black-Scholes market: spot, vol, dividend (d,), flat rate, correlation (d, d).

    Build it with :meth:`from_market` (from a validated config) or directly; the constructor
    checks shapes and signs and the correlation with :func:`correlation_matrix`. ``loading`` (d, k), optional,
    drives the d assets with k factors (then ``correlation`` must be B B^T).
    """

    spot: np.ndarray
    vol: np.ndarray
    dividend: np.ndarray
    rate: float
    correlation: np.ndarray
    loading: np.ndarray | None = None

    def __post_init__(self):
        spot = np.atleast_1d(np.asarray(self.spot, dtype=float))
        d = spot.shape[0]
        vol = np.broadcast_to(np.asarray(self.vol, dtype=float), (d,)).copy()
        div = np.broadcast_to(np.asarray(self.dividend, dtype=float), (d,)).copy()
        if spot.ndim != 1 or np.any(~np.isfinite(spot)) or np.any(spot <= 0):
            raise ValueError(f"spot must be a vector of positive numbers, got {spot}")
        if np.any(~np.isfinite(vol)) or np.any(vol < 0):
            raise ValueError(f"vol must be non-negative, got {vol}")
        if np.any(~np.isfinite(div)) or not np.isfinite(self.rate):
            raise ValueError("rate and dividend must be finite")
        object.__setattr__(self, "spot", spot)
        object.__setattr__(self, "vol", vol)
        object.__setattr__(self, "dividend", div)
        object.__setattr__(self, "rate", float(self.rate))
        object.__setattr__(self, "correlation", correlation_matrix(self.correlation, d))
        if self.loading is not None:
            B = np.asarray(self.loading, dtype=float)
            if B.ndim != 2 or B.shape[0] != d or not 1 <= B.shape[1] <= d or not np.all(np.isfinite(B)):
                raise ValueError(f"loading must be a finite (d, k) matrix with d = {d} and 1 <= k <= d, "
                                 f"got shape {B.shape}")
            if np.abs(B @ B.T - self.correlation).max() > 1e-8:
                raise ValueError("correlation must equal loading @ loading.T when a factor loading is given")
            object.__setattr__(self, "loading", B)

    @classmethod
    def from_market(cls, market) -> BlackScholes:
        """From the ``market`` section of a :class:`cva.io.config.Config` (with its KLT factors if it has any)."""
        C, B = market.correlation_matrix, None
        if market.factor_model is not None:
            from cva.market.factors import klt_factors
            f = klt_factors(C, market.factor_model["k"])
            C, B = f.correlation, f.loading
        return cls(spot=np.asarray(market.spot), vol=np.asarray(market.vol), dividend=np.asarray(market.dividend),
                   rate=market.rate, correlation=C, loading=B)

    @property
    def d(self) -> int:
        return self.spot.shape[0]

    @property
    def n_normals(self) -> int:
        """Normals per time step: k with a factor loading, else d."""
        return self.d if self.loading is None else self.loading.shape[1]

    def square_root(self) -> np.ndarray:
        """L (d, k) with L L^T = correlation: the factor loading, else :func:`correlation_factor`."""
        return correlation_factor(self.correlation) if self.loading is None else self.loading

    def paths(self, start, times, z):
        """Exact log-normal paths from ``start`` at ``times[0]`` through ``times[1:]``.

        Parameters
        ----------
        start : array (..., d) or (d,)
            Asset prices at ``times[0]``; broadcast against the path dimensions of ``z``.
        times : (T + 1,) increasing floats.
        z : array (..., T, n_normals)
            Independent standard normals (from :func:`cva.market.rng.normals`), numpy or cupy.

        Returns
        -------
        S : array (..., T, d) of z's dtype and array module: the prices at ``times[1:]``.
        """
        xp = get_array_module(z)
        dt = z.dtype
        h = np.diff(np.asarray(times, dtype=float))                                  # (T,)
        if h.shape[0] != z.shape[-2] or np.any(h <= 0):
            raise ValueError(f"times must be increasing with {z.shape[-2] + 1} entries, got {len(times)}")
        if z.shape[-1] != self.n_normals:
            raise ValueError(f"z must have {self.n_normals} normals per step (its last axis), got {z.shape[-1]}")
        drift = (self.rate - self.dividend - 0.5 * self.vol**2)[None, :] * h[:, None]       # (T, d)
        independent = self.loading is None and np.array_equal(self.correlation, np.eye(self.d))
        mix = None if independent else self.square_root() * self.vol[:, None]          # (d, k)
        start = xp.asarray(start, dtype=dt)
        if xp is not np:                                   # the kernel mixes the normals itself, in a fixed order
            return _paths_gpu(z, start, self.vol if independent else None, mix, np.sqrt(h), drift, self.d)
        w, scale = (z, self.vol) if independent else (z @ mix.astype(dt).T, None)
        dlog = w * np.sqrt(h)[:, None].astype(dt) + drift.astype(dt) if scale is None else \
            w * (scale[None, :] * np.sqrt(h)[:, None]).astype(dt) + drift.astype(dt)     # (..., T, d)
        return start[..., None, :] * np.exp(np.cumsum(dlog, axis=-2))                   # (..., T, d)

    def sample(self, times, n_paths, *, seed, purpose, dtype=np.float64, xp=np, start=None, outer=(0, 1),
               inner0=0, date=0, step0=0, antithetic=False, outer_antithetic=False):
        """Paths from keyed normals: S (n_outer, n_paths, T, d) at ``times[1:]``.

        Path m of outer index l uses the normals of :func:`cva.market.rng.normals` with keys
        (seed, purpose, l, inner0 + m, date, step0 + j): the same numbers whatever the batch
        or the device. With ``antithetic``, paths 2i and 2i + 1 use z and -z of key i; with
        ``outer_antithetic`` (and one path per outer index), outer indices 2i and 2i + 1 do.
        ``start`` (n_outer, d) or (d,) defaults to the spot.
        """
        from cva.market import rng
        T = len(times) - 1
        if outer_antithetic:
            if n_paths != 1 or antithetic:
                raise ValueError("outer_antithetic pairs the outer indices of one path each")
            keys, pick, sign = _pairs(*outer, dtype, xp)
            zb = rng.normals(seed, purpose, keys, (inner0, 1), date, (step0, T), self.n_normals, dtype=dtype, xp=xp)
            z = zb[pick] * sign[:, None, None, None]                                     # (n_outer, 1, T, d)
        elif antithetic:
            keys, pick, sign = _pairs(inner0, n_paths, dtype, xp)
            zb = rng.normals(seed, purpose, outer, keys, date, (step0, T), self.n_normals, dtype=dtype, xp=xp)
            z = zb[:, pick] * sign[None, :, None, None]                                  # (n_outer, M, T, d)
        else:
            z = rng.normals(seed, purpose, outer, (inner0, n_paths), date, (step0, T), self.n_normals, dtype=dtype,
                            xp=xp)
        start = self.spot if start is None else start
        start = xp.asarray(start, dtype=dtype)
        if start.ndim == 2:
            start = start[:, None, :]                                                      # (n_outer, 1, d)
        return self.paths(start, times, z)

    def forward(self, t: float) -> np.ndarray:
        """E[S(t)] per asset under the risk-neutral measure."""
        return self.spot * np.exp((self.rate - self.dividend) * t)


def _pairs(first, count, dtype, xp):
    """Antithetic pairs of the indices first .. first + count - 1: index i draws the normals of key i // 2 times
    (-1)^i. Returns the key range (k0, n) to draw, each index's position in it and its sign."""
    i = np.arange(first, first + count)
    k0 = first // 2
    return ((k0, (first + count - 1) // 2 - k0 + 1), xp.asarray(i // 2 - k0),
            xp.asarray((1 - 2 * (i % 2)).astype(dtype)))


def _paths_gpu(z, start, scale, mix, sqrt_h, drift, d):
    """The CUDA twin of the numpy branch of :meth:`BlackScholes.paths` (``cuda/lognormal_paths.cu``): z (..., T, k)
    the independent normals, ``mix`` (d, k) their mixing (None: independent assets, ``scale`` their vols)."""
    import cupy as cp

    from linalg_gpu._kernels import get_function

    dt = z.dtype
    T, k_normals = z.shape[-2], z.shape[-1]
    batch = z.shape[:-2]
    sp = start.reshape((1,) * (len(batch) + 1 - start.ndim) + start.shape)           # batch ndim + 1 axes
    k = len(batch)
    while k > 0 and sp.shape[k - 1] == 1:                                              # start varies on batch[:k]
        k -= 1
    n_outer = int(np.prod(batch[:k], dtype=np.int64))
    n_inner = int(np.prod(batch, dtype=np.int64)) // max(n_outer, 1)
    st = cp.ascontiguousarray(cp.broadcast_to(sp[(slice(None),) * k + (0,) * (len(batch) - k)], batch[:k] + (d,))
                              .reshape(n_outer, d), dtype=dt)
    z4 = cp.ascontiguousarray(z)
    S = cp.empty(batch + (T, d), dtype=dt)
    fn = get_function("lognormal_paths.cu", "lognormal_paths", dt, cuda_dir=CUDA_DIR)
    total = n_outer * n_inner * d
    blocks = int(min(65535, -(-total // 256)))
    sc = np.ones(d) if scale is None else scale
    mx = cp.asarray(sc if mix is None else mix, dtype=dt)                 # (unread without mixing)
    if blocks:
        fn((blocks,), (256,), (S, z4, st, cp.asarray(sc, dtype=dt), mx, cp.asarray(sqrt_h, dtype=dt),
                              cp.asarray(drift, dtype=dt), np.uint64(n_outer), np.uint64(n_inner), np.int32(T),
                              np.int32(d), np.int32(k_normals), np.int32(mix is not None)))
    return S
