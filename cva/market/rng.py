"""Keyed counter-based random streams: Philox4x32-10 [1]_ and the Box-Muller transform [2]_.

Every standard normal of a run is a pure function of its identity

    (seed, purpose, outer path l, inner path m, date k, step j, asset a),

so the numbers of a path never depend on batch size, chunking, worker count or device. With
``d`` assets and the flat index ``q = j * d + a``:

- key ``= (seed, purpose)``, ``purpose`` one of :data:`PURPOSES`;
- counter ``= (l, m, (k << 16) | (q >> 2), 0)`` and lane ``= q & 3``;
- the 4 words ``x0..x3`` of one Philox call become exactly representable uniforms
  (float64: ``(x + 0.5) * 2**-32``; float32: ``((x >> 9) + 0.5) * 2**-23``) and Box-Muller on the
  lane pairs (0, 1) and (2, 3) gives ``z_even = r cos(2 pi u_odd)``, ``z_odd = r sin(2 pi u_odd)``,
  ``r = sqrt(-2 log u_even)``; the normal of ``q`` is ``z[lane]``.

With numpy arrays the numbers are computed here (vectorized, in chunks); with cupy by the kernels
of ``cva/market/cuda/philox.cu``, the twins of this module. Uniforms are exact in both, so CPU and
GPU differ only by the rounding of ``log`` and ``sincospi`` (a few ulp); the raw words
(:func:`uniform_bits`) agree bit for bit.

References
----------
.. [1] J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel random numbers: as easy as
   1, 2, 3", SC'11, 2011, doi:10.1145/2063384.2063405 (Philox, Sec. 3.3; Random123).
.. [2] G. E. P. Box, M. E. Muller, "A note on the generation of random normal deviates",
   Ann. Math. Statist. 29(2), 1958, doi:10.1214/aoms/1177706645.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from linalg_gpu._backend import SUPPORTED_DTYPES

__all__ = ["PURPOSES", "philox4x32", "uniform_bits", "normals"]

PURPOSES = {"outer": 0, "inner": 1, "price": 2, "price_eval": 3}

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)    # Philox4x32 multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85                          # Weyl key increments
_MASK = 0xFFFFFFFF
_ROUNDS = 10
_U32 = 1 << 32
DATE_LIMIT = 1 << 16          # k occupies the high 16 bits of counter word 2
GROUP_LIMIT = 1 << 16         # q >> 2 occupies the low 16 bits
PATH_LIMIT = _U32             # outer and inner paths: start + count <= 2**32 (counter words 0 and 1)
_CHUNK_BYTES = 16 * 2**20      # cap on the numpy path's temporaries (16 MB: cache-friendlier than 64)
_BYTES_PER_GROUP = 320         # temporaries per Philox call of the numpy path (measured ~250 B)
_THREADS = 256                 # CUDA block size
_MAX_BLOCKS = 8192             # grid cap; the kernels loop grid-stride

CUDA_DIR = Path(__file__).resolve().parent / "cuda"     # this package's kernels (the loader is linalg_gpu's)


# ---------------------------------------------------------------------------------------------
# Philox4x32-10 (numpy)


def _philox_rounds(c0, c1, c2, c3, k0, k1):
    """Ten Philox4x32 rounds on uint64 arrays holding 32-bit words (same shape, owned: updated in place).

    ``k0, k1`` are ints or uint64 arrays broadcastable to the counters. Returns the 4 output words.
    """
    for r in range(_ROUNDS):
        if r:
            k0 = (k0 + _W0) & _MASK                      # key schedule between rounds
            k1 = (k1 + _W1) & _MASK
        p0 = c0 * _M0                                    # exact 64-bit products of 32-bit words
        p1 = c2 * _M1
        c0 = p1 >> 32
        c0 ^= c1
        c0 ^= k0                                         # hi1 ^ c1 ^ k0
        c2 = p0 >> 32
        c2 ^= c3
        c2 ^= k1                                         # hi0 ^ c3 ^ k1
        c1 = p1
        c1 &= _MASK                                      # lo1
        c3 = p0
        c3 &= _MASK                                      # lo0
    return c0, c1, c2, c3


def _as_words(x, name, width):
    """``x`` as an integer array of shape (..., width) with values in [0, 2**32), as uint64."""
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array (uint32 words), got dtype {a.dtype}")
    if a.ndim == 0 or a.shape[-1] != width:
        raise ValueError(f"{name} must have shape (..., {width}), got {a.shape}")
    if a.dtype != np.uint32 and a.size and (a.min() < 0 or a.max() >= _U32):
        raise ValueError(f"{name} words must lie in [0, 2**32), got values in [{a.min()}, {a.max()}]")
    return a.astype(np.uint64)


def philox4x32(counter, key) -> np.ndarray:
    """Philox4x32-10 block function (numpy reference).

    Parameters
    ----------
    counter : array_like of uint32, shape (..., 4)
        Counter words ``c0..c3``.
    key : array_like of uint32, shape (..., 2)
        Key words ``k0, k1``; broadcast against ``counter[..., 0]``.

    Returns
    -------
    ndarray of uint32, shape (..., 4)
        The 4 output words; 10 rounds with multipliers 0xD2511F53, 0xCD9E8D57 and Weyl key
        increments 0x9E3779B9, 0xBB67AE85, as in Random123 [1]_.

    Raises
    ------
    TypeError
        If ``counter`` or ``key`` is not an integer array.
    ValueError
        If the last axis is not 4 (2), a word is outside [0, 2**32), or the shapes do not broadcast.

    References
    ----------
    .. [1] J. K. Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11, 2011, Sec. 3.3.

    Examples
    --------
    >>> philox4x32([0, 0, 0, 0], [0, 0])      # Random123 known-answer vector
    array([1713891541, 3781805453, 3159862348, 2600524760], dtype=uint32)
    >>> hex(int(philox4x32([0, 0, 0, 0], [0, 0])[0]))
    '0x6627e8d5'
    """
    c = _as_words(counter, "counter", 4)
    k = _as_words(key, "key", 2)
    try:
        shape = np.broadcast_shapes(c.shape[:-1], k.shape[:-1])
    except ValueError:
        raise ValueError(f"counter {c.shape} and key {k.shape} do not broadcast (batch shapes must)") from None
    words = [np.array(np.broadcast_to(c[..., i], shape)) for i in range(4)]     # 4 x shape, owned
    out = _philox_rounds(*words, k[..., 0], k[..., 1])
    return np.stack(out, axis=-1).astype(np.uint32)                             # shape + (4,)


def step_limit(d: int) -> int:
    """The most dates a simulation grid may have with ``d`` assets: its date indices k stay below
    :data:`DATE_LIMIT` and its steps j below ``4 * GROUP_LIMIT / d`` (q >> 2 < 2**16)."""
    return min(DATE_LIMIT, 4 * GROUP_LIMIT // d)


# ---------------------------------------------------------------------------------------------
# Argument checks (the public boundary)


def _check_int(value, name, low, high):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if not low <= v < high:
        raise ValueError(f"{name} must satisfy {low} <= {name} < {high}, got {v}")
    return v


def _check_range(value, name, limit):
    """``(start, count)`` with start, count >= 0 and start + count <= limit."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise TypeError(f"{name} must be a (start, count) pair of integers, got {value!r}")
    start = _check_int(value[0], f"{name} start", 0, limit)
    count = _check_int(value[1], f"{name} count", 0, limit + 1)
    if start + count > limit:
        raise ValueError(f"{name}=({start}, {count}) runs past index {limit - 1}: start + count must be <= {limit}")
    return start, count


def _check_purpose(purpose):
    if isinstance(purpose, str):
        if purpose not in PURPOSES:
            raise ValueError(f"purpose must be one of {sorted(PURPOSES)} (or their ints), got {purpose!r}")
        return PURPOSES[purpose]
    if isinstance(purpose, (int, np.integer)) and not isinstance(purpose, (bool, np.bool_)):
        if int(purpose) not in PURPOSES.values():
            raise ValueError(f"purpose must be one of {PURPOSES} (a name or its int), got {int(purpose)}")
        return int(purpose)
    raise TypeError(f"purpose must be a name from {sorted(PURPOSES)} or its int, got {type(purpose).__name__}")


def _check_xp(xp):
    if xp is np:
        return np
    if getattr(xp, "__name__", None) == "cupy":
        return xp
    raise TypeError(f"xp must be the numpy or the cupy module, got {xp!r}")


def _check_dtype(dtype):
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from None
    if dt not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {dt}")
    return dt


def _check_args(seed, purpose, outer, inner, date, steps, d, xp):
    """Validated keys and ranges: (seed, purpose, l0, n_outer, m0, n_inner, date, j0, n_steps, d, xp)."""
    seed = _check_int(seed, "seed", 0, _U32)
    purpose = _check_purpose(purpose)
    l0, n_outer = _check_range(outer, "outer", _U32)
    m0, n_inner = _check_range(inner, "inner", _U32)
    date = _check_int(date, "date", 0, DATE_LIMIT)
    d = _check_int(d, "d", 1, 4 * GROUP_LIMIT + 1)
    j0, n_steps = _check_range(steps, "steps", 4 * GROUP_LIMIT)
    if (j0 + n_steps) * d > 4 * GROUP_LIMIT:
        raise ValueError(
            f"steps=({j0}, {n_steps}) with d={d} reaches the flat index q = j * d + a = {(j0 + n_steps) * d - 1}; "
            f"q >> 2 must stay below 2**16, i.e. (start + count) * d <= {4 * GROUP_LIMIT}"
        )
    return seed, purpose, l0, n_outer, m0, n_inner, date, j0, n_steps, d, _check_xp(xp)


# ---------------------------------------------------------------------------------------------
# numpy path: Philox words per (outer, inner) pair, in chunks of pairs


def _word_chunks(seed, purpose, l0, n_outer, m0, n_inner, date, q0, nq):
    """Yield ``(start, stop, off, words)`` over chunks of the flat pair index ``p = i0 * n_inner + i1``.

    ``words`` are 4 uint64 arrays of shape (stop - start, ng): the Philox output of the groups
    ``g0 .. g0 + ng - 1`` (``g0 = q0 >> 2``) of each pair; q of the request sits at column
    ``4 * (g - g0) + lane`` of the interleaved words, from ``off = q0 & 3`` on.
    """
    g0 = q0 >> 2
    ng = ((q0 + nq - 1) >> 2) - g0 + 1
    c2_row = np.uint64(date << 16) | np.arange(g0, g0 + ng, dtype=np.uint64)        # (ng,)
    per_chunk = max(1, _CHUNK_BYTES // (_BYTES_PER_GROUP * ng))                     # pairs per chunk
    n_pairs = n_outer * n_inner
    for start in range(0, n_pairs, per_chunk):
        stop = min(n_pairs, start + per_chunk)
        p = np.arange(start, stop, dtype=np.uint64)                                 # (P,)
        shape = (stop - start, ng)
        c0 = np.empty(shape, np.uint64)
        c0[...] = (np.uint64(l0) + p // np.uint64(n_inner))[:, None]                # outer path l
        c1 = np.empty(shape, np.uint64)
        c1[...] = (np.uint64(m0) + p % np.uint64(n_inner))[:, None]                 # inner path m
        c2 = np.empty(shape, np.uint64)
        c2[...] = c2_row[None, :]                                                   # (k << 16) | g
        c3 = np.zeros(shape, np.uint64)
        yield start, stop, q0 & 3, _philox_rounds(c0, c1, c2, c3, seed, purpose)


def _to_uniform(x, dtype):
    """Exact uniforms in (0, 1) from uint64-held 32-bit words: float64 (x + .5) 2^-32, float32 ((x >> 9) + .5) 2^-23."""
    if dtype == np.float64:
        u = x.astype(np.float64)
        u += 0.5
        u *= 2.0**-32
        return u
    u = (x >> 9).astype(np.float32)                      # < 2**23: exact
    u += np.float32(0.5)
    u *= np.float32(2.0**-23)
    return u


def _sincospi(x):
    """``(sin(pi x), cos(pi x))`` in the dtype of ``x``, for exact ``x`` in [0, 2] (twin of CUDA's sincospi).

    Exact reduction to ``f = x - n / 2`` with ``|f| <= 1/4`` before multiplying by pi, so the
    rounding of ``pi * x`` near ``x = 2`` does not cost the absolute accuracy that a plain
    ``cos(2 pi u)`` loses (up to ~6 ulp(1) in float32); the quadrant ``n`` then rotates
    ``(sin(pi f), cos(pi f))`` exactly (products with 0 and +-1, sums with a zero).
    """
    n = np.rint(x * 2)                                   # quadrant 0..4 (4 == 0)
    a = n * x.dtype.type(-0.5)
    a += x                                               # f = x - n / 2, exact
    a *= x.dtype.type(np.pi)
    sa, ca = np.sin(a), np.cos(a)
    quad = n.astype(np.int8)
    sign = quad & 2
    np.subtract(1, sign, out=sign)                       # +1 in quadrants 0, 1; -1 in 2, 3
    odd = quad & 1
    rot_s = (odd * sign).astype(x.dtype)                 # sin(pi n / 2): 0, 1, 0, -1
    rot_c = ((1 - odd) * sign).astype(x.dtype)           # cos(pi n / 2): 1, 0, -1, 0
    s = sa * rot_c
    s += ca * rot_s                                      # sin(pi f + pi n / 2)
    c = ca * rot_c
    c -= sa * rot_s                                      # cos(pi f + pi n / 2)
    return s, c


def _box_muller(words, dtype):
    """Normals (P, ng * 4) of ``dtype`` from the 4 Philox words (each (P, ng)): lanes (0, 1), (2, 3)."""
    x0, x1, x2, x3 = words
    u_even = _to_uniform(np.stack((x0, x2)), dtype)                                 # (2, P, ng)
    u_odd = _to_uniform(np.stack((x1, x3)), dtype)                                  # (2, P, ng)
    r = np.log(u_even)
    r *= dtype.type(-2)
    np.sqrt(r, out=r)                                                               # sqrt(-2 log u_even)
    u_odd *= dtype.type(2)                                                          # exact
    s, c = _sincospi(u_odd)
    z = np.empty(x0.shape + (4,), dtype)                                            # (P, ng, 4)
    np.multiply(r[0], c[0], out=z[..., 0])
    np.multiply(r[0], s[0], out=z[..., 1])
    np.multiply(r[1], c[1], out=z[..., 2])
    np.multiply(r[1], s[1], out=z[..., 3])
    return z.reshape(x0.shape[0], -1)                                               # (P, ng * 4)


def _numpy_fill(out, args, convert):
    """Fill ``out`` (n_pairs, nq) chunk by chunk: ``convert(words)`` -> (P, ng * 4)."""
    seed, purpose, l0, n_outer, m0, n_inner, date, q0, nq = args
    for start, stop, off, words in _word_chunks(seed, purpose, l0, n_outer, m0, n_inner, date, q0, nq):
        out[start:stop] = convert(words)[:, off:off + nq]


# ---------------------------------------------------------------------------------------------
# cupy path: thin launchers of cva/market/cuda/philox.cu


def _launch(kernel, dtype, out, args):
    from linalg_gpu._kernels import get_function

    seed, purpose, l0, n_outer, m0, n_inner, date, q0, nq = args
    ng = ((q0 + nq - 1) >> 2) - (q0 >> 2) + 1
    total = n_outer * n_inner * ng                                                  # Philox calls = threads
    blocks = min(_MAX_BLOCKS, -(-total // _THREADS))
    fn = get_function("philox.cu", kernel, dtype, cuda_dir=CUDA_DIR)
    fn((blocks,), (_THREADS,), (out, *(np.uint32(v) for v in args)))


# ---------------------------------------------------------------------------------------------
# Public functions


def _generate(kind, seed, purpose, outer, inner, date, steps, d, dtype, xp):
    seed, purpose, l0, n_outer, m0, n_inner, date, j0, n_steps, d, xp = _check_args(
        seed, purpose, outer, inner, date, steps, d, xp)
    out_dtype = np.dtype(np.uint32) if kind == "bits" else _check_dtype(dtype)
    shape = (n_outer, n_inner, n_steps, d)
    out = xp.empty(shape, out_dtype)                                                # (n_outer, n_inner, n_steps, d)
    if out.size == 0:
        return out
    args = (seed, purpose, l0, n_outer, m0, n_inner, date, j0 * d, n_steps * d)
    flat = out.reshape(n_outer * n_inner, n_steps * d)                              # (pairs, nq), a view
    if xp is np:
        if kind == "bits":
            _numpy_fill(flat, args, lambda w: np.stack(w, axis=-1).astype(np.uint32).reshape(w[0].shape[0], -1))
        else:
            _numpy_fill(flat, args, lambda w: _box_muller(w, out_dtype))
    else:
        kernel, tdtype = ("philox_bits", np.float32) if kind == "bits" else ("philox_normals", out_dtype)
        _launch(kernel, tdtype, out, args)
    return out


_PARAMS_DOC = """
    Parameters
    ----------
    seed : int
        The run's seed, ``0 <= seed < 2**32`` (key word 0).
    purpose : str or int
        A name of :data:`PURPOSES` (``"outer"``, ``"inner"``, ``"price"``, ``"price_eval"``) or its
        int (key word 1): separate streams for separate uses of one seed.
    outer : (int, int)
        ``(l0, n_outer)``: the outer paths ``l0 .. l0 + n_outer - 1`` (counter word 0), ``< 2**32``.
    inner : (int, int)
        ``(m0, n_inner)``: the inner paths ``m0 .. m0 + n_inner - 1`` (counter word 1), ``< 2**32``.
    date : int
        The date index ``k``, ``0 <= k < 2**16`` (high half of counter word 2).
    steps : (int, int)
        ``(j0, n_steps)``: the time steps ``j0 .. j0 + n_steps - 1``; with ``d`` assets the flat
        index ``q = j * d + a`` must satisfy ``q >> 2 < 2**16``.
    d : int
        Number of assets, ``>= 1``."""


def uniform_bits(seed, purpose, outer, inner, date, steps, d, xp=np):
    """The raw Philox4x32-10 word behind each normal of :func:`normals` (its own lane).

    Element ``[i0, i1, i, a]`` is word ``q & 3`` of ``philox4x32((l0 + i0, m0 + i1, (date << 16) | (q >> 2), 0),
    (seed, purpose))`` with ``q = (j0 + i) * d + a`` [1]_. CPU and GPU agree bit for bit.
    {params}
    xp : module, optional
        ``numpy`` (default: computed here, in chunks) or ``cupy`` (computed by the CUDA kernel
        ``philox_bits`` of ``cva/market/cuda/philox.cu``).

    Returns
    -------
    array of uint32, shape (n_outer, n_inner, n_steps, d)
        A numpy or cupy array, following ``xp``.

    Raises
    ------
    TypeError
        If an argument has the wrong type (``xp`` not numpy/cupy, a range not a pair of ints, ...).
    ValueError
        If ``seed``, ``purpose``, ``outer``, ``inner``, ``date``, ``steps`` or ``d`` is out of range;
        the message names the argument.

    References
    ----------
    .. [1] J. K. Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11, 2011.

    Examples
    --------
    >>> w = uniform_bits(7, "outer", (3, 1), (0, 1), 2, (0, 1), 4)
    >>> bool((w[0, 0, 0] == philox4x32([3, 0, 2 << 16, 0], [7, 0])).all())
    True
    """
    return _generate("bits", seed, purpose, outer, inner, date, steps, d, None, xp)


def normals(seed, purpose, outer, inner, date, steps, d, dtype=np.float64, xp=np):
    """Standard normals keyed by (seed, purpose, outer path, inner path, date, step, asset).

    Philox4x32-10 [1]_ words become exactly representable uniforms and the Box-Muller transform
    [2]_ turns the lane pairs (0, 1) and (2, 3) of each Philox call into normals (see the module
    docstring). A normal depends only on its key, never on the requested ranges: any split of a
    request into pieces gives the same numbers.
    {params}
    dtype : {{numpy.float64, numpy.float32}}, optional
        The result dtype; the transform is computed in it. float32 uniforms keep the top 23 bits of
        the word (``|u32 - u64| < 2**-24``), so float32 and float64 normals of one key agree to
        ~1e-5 except where ``u_even`` is near 0 or 1 (there ``dr/du = -1 / (u r)`` is large).
    xp : module, optional
        ``numpy`` (default: computed here, vectorized, in chunks of at most about 16 MB of temporaries) or
        ``cupy`` (the CUDA kernel ``philox_normals``, within a few ulp of the numpy result).

    Returns
    -------
    array of dtype, shape (n_outer, n_inner, n_steps, d)
        Element ``[i0, i1, i, a]`` belongs to outer path ``l0 + i0``, inner path ``m0 + i1``, step
        ``j0 + i`` and asset ``a``; a numpy or cupy array, following ``xp``.

    Raises
    ------
    TypeError
        If ``dtype`` is not float32/float64, ``xp`` not numpy/cupy, or an argument has the wrong type.
    ValueError
        If ``seed``, ``purpose``, ``outer``, ``inner``, ``date``, ``steps`` or ``d`` is out of range;
        the message names the argument.

    References
    ----------
    .. [1] J. K. Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11, 2011.
    .. [2] G. E. P. Box, M. E. Muller, "A note on the generation of random normal deviates", 1958.

    Examples
    --------
    >>> z = normals(7, "inner", (0, 8), (0, 16), 3, (0, 5), 3)
    >>> z.shape
    (8, 16, 5, 3)
    >>> piece = normals(7, "inner", (2, 3), (5, 4), 3, (1, 3), 3)
    >>> bool((piece == z[2:5, 5:9, 1:4]).all())
    True
    """
    return _generate("normals", seed, purpose, outer, inner, date, steps, d, dtype, xp)


uniform_bits.__doc__ = uniform_bits.__doc__.format(params=_PARAMS_DOC)
normals.__doc__ = normals.__doc__.format(params=_PARAMS_DOC)
