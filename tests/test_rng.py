"""cva.market.rng on the CPU: Philox4x32-10 known answers, keying, chunk invariance, distribution, argument errors.

The references here are independent of ``cva.market.rng``: a scalar Philox on Python ints and a scalar
Box-Muller with ``math``. Inputs are fresh random keys and ranges (the ``rng`` fixture).
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from scipy import stats

import cva.market.rng as crng
from cva.market.rng import PURPOSES, normals, philox4x32, uniform_bits

DTYPES = [np.float64, np.float32]
U32 = 1 << 32

# Random123 tests/kat_vectors: philox4x32 10 rounds; counter, key -> output
KAT = [
    ([0x00000000, 0x00000000, 0x00000000, 0x00000000], [0x00000000, 0x00000000],
     [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], [0xFFFFFFFF, 0xFFFFFFFF],
     [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]


# ---------------------------------------------------------------------------------------------
# independent scalar references


def philox_ref(counter, key):
    """Philox4x32-10 on plain Python ints (Salmon et al. 2011)."""
    c0, c1, c2, c3 = (int(v) for v in counter)
    k0, k1 = (int(v) for v in key)
    mask = 0xFFFFFFFF
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & mask, (k1 + 0xBB67AE85) & mask
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & mask, (p0 >> 32) ^ c3 ^ k1, p0 & mask
    return [c0, c1, c2, c3]


def word_ref(seed, purpose, l, m, k, j, a, d):
    """The raw word of normal (l, m, k, j, a) and its lane pair's words, by the documented keying."""
    q = j * d + a
    x = philox_ref([l, m, (k << 16) | (q >> 2), 0], [seed, purpose])
    lane = q & 3
    return x[lane], x[lane & 2], x[(lane & 2) + 1], lane


def normal_ref(seed, purpose, l, m, k, j, a, d, dtype):
    """Box-Muller of the scalar reference in float64 math, from the uniforms of ``dtype``."""
    _, xe, xo, lane = word_ref(seed, purpose, l, m, k, j, a, d)
    if dtype == np.float64:
        ue, uo = (xe + 0.5) * 2.0**-32, (xo + 0.5) * 2.0**-32
    else:
        ue, uo = ((xe >> 9) + 0.5) * 2.0**-23, ((xo >> 9) + 0.5) * 2.0**-23
    r = math.sqrt(-2.0 * math.log(ue))
    return r * (math.cos(2 * math.pi * uo) if lane % 2 == 0 else math.sin(2 * math.pi * uo))


def random_request(rng, max_outer=6, max_inner=5, max_steps=7, max_d=5, min_outer=1, min_inner=1):
    """Random keys and ranges, with starts anywhere in their allowed range (near the top included)."""
    d = int(rng.integers(1, max_d + 1))
    n_steps = int(rng.integers(1, max_steps + 1))
    n_outer = int(rng.integers(min_outer, max_outer + 1))
    n_inner = int(rng.integers(min_inner, max_inner + 1))
    top = rng.random() < 0.3
    return dict(
        seed=int(rng.integers(0, U32)),
        purpose=str(rng.choice(list(PURPOSES))),
        outer=(int(U32 - n_outer if top else rng.integers(0, U32 - n_outer)), n_outer),
        inner=(int(rng.integers(0, U32 - n_inner)), n_inner),
        date=int((1 << 16) - 1 if top else rng.integers(0, 1 << 16)),
        steps=(int(rng.integers(0, (1 << 18) // d - n_steps)), n_steps),
        d=d,
    )


# ---------------------------------------------------------------------------------------------
# Philox4x32-10


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_known_answer_vectors(counter, key, expected):
    out = philox4x32(np.array(counter, np.uint32), np.array(key, np.uint32))
    assert out.dtype == np.uint32 and out.shape == (4,)
    assert [int(v) for v in out] == expected
    assert philox_ref(counter, key) == expected           # the test's own reference too


def test_known_answer_vectors_batched():
    counters = np.array([c for c, _, _ in KAT], np.uint32)
    keys = np.array([k for _, k, _ in KAT], np.uint32)
    out = philox4x32(counters, keys)
    assert out.shape == (3, 4)
    assert out.tolist() == [e for _, _, e in KAT]


def test_philox_matches_scalar_reference(rng):
    counters = rng.integers(0, U32, size=(300, 4), dtype=np.uint64).astype(np.uint32)
    keys = rng.integers(0, U32, size=(300, 2), dtype=np.uint64).astype(np.uint32)
    counters[:20] = rng.integers(0, 4, size=(20, 4))                  # small words (sparse bits) too
    out = philox4x32(counters, keys)
    for c, k, o in zip(counters, keys, out, strict=True):
        assert o.tolist() == philox_ref(c, k)


def test_philox_broadcasts_keys(rng):
    counters = rng.integers(0, U32, size=(1, 7, 4), dtype=np.uint64)       # int array, not uint32
    keys = rng.integers(0, U32, size=(5, 1, 2), dtype=np.uint64)
    out = philox4x32(counters, keys)
    assert out.shape == (5, 7, 4)
    for i in range(5):
        for j in range(7):
            assert out[i, j].tolist() == philox_ref(counters[0, j], keys[i, 0])


# ---------------------------------------------------------------------------------------------
# keying


def test_uniform_bits_follow_the_keying(rng):
    for _ in range(5):
        req = random_request(rng)
        bits = uniform_bits(**req)
        (l0, no), (m0, ni), (j0, ns), d = req["outer"], req["inner"], req["steps"], req["d"]
        assert bits.shape == (no, ni, ns, d) and bits.dtype == np.uint32
        purpose = PURPOSES[req["purpose"]]
        for idx in np.ndindex(bits.shape):
            i0, i1, i, a = idx
            expected = word_ref(req["seed"], purpose, l0 + i0, m0 + i1, req["date"], j0 + i, a, d)[0]
            assert int(bits[idx]) == expected, (req, idx)


@pytest.mark.parametrize("dtype", DTYPES)
def test_normals_equal_scalar_box_muller(rng, dtype):
    tol = dict(rtol=1e-13, atol=1e-13) if dtype == np.float64 else dict(rtol=2e-6, atol=2e-6)
    for _ in range(5):
        req = random_request(rng)
        z = normals(**req, dtype=dtype)
        (l0, _), (m0, _), (j0, _), d = req["outer"], req["inner"], req["steps"], req["d"]
        assert z.dtype == dtype
        purpose = PURPOSES[req["purpose"]]
        expected = np.array([normal_ref(req["seed"], purpose, l0 + i0, m0 + i1, req["date"], j0 + i, a, d, dtype)
                             for i0, i1, i, a in np.ndindex(z.shape)]).reshape(z.shape)
        np.testing.assert_allclose(z, expected, **tol, err_msg=str(req))


def random_splits(rng, start, count, max_pieces=4):
    """Consecutive (start, count) pieces covering [start, start + count), counts of 1 or more."""
    k = int(rng.integers(1, min(max_pieces, count) + 1))
    cuts = np.sort(rng.choice(np.arange(1, count), size=k - 1, replace=False)) if k > 1 else []
    edges = [0, *map(int, cuts), count]
    return [(start + a, b - a) for a, b in zip(edges[:-1], edges[1:], strict=True)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_pieces_equal_the_whole(rng, dtype):
    """Any split of the outer/inner/steps ranges gives the same numbers, bit for bit (unaligned q included)."""
    d = int(rng.choice([1, 3, 5]))                                  # steps start at unaligned q
    req = dict(seed=int(rng.integers(0, U32)), purpose=str(rng.choice(list(PURPOSES))),
               date=int(rng.integers(0, 1 << 16)), d=d)
    outer = (int(rng.integers(0, 1 << 31)), int(rng.integers(5, 12)))
    inner = (int(rng.integers(0, 1 << 31)), int(rng.integers(5, 12)))
    steps = (int(rng.integers(0, 100)), int(rng.integers(5, 12)))
    whole = normals(**req, outer=outer, inner=inner, steps=steps, dtype=dtype)
    for _ in range(3):
        rows = []
        for o in random_splits(rng, *outer):
            cols = []
            for i in random_splits(rng, *inner):
                parts = [normals(**req, outer=o, inner=i, steps=s, dtype=dtype) for s in random_splits(rng, *steps)]
                cols.append(np.concatenate(parts, axis=2))
            rows.append(np.concatenate(cols, axis=1))
        assert np.array_equal(np.concatenate(rows, axis=0), whole)
    # single elements anywhere, including the last q of a group and the first of the next
    for _ in range(20):
        i0, i1, i = (int(rng.integers(0, n)) for n in (outer[1], inner[1], steps[1]))
        one = normals(**req, outer=(outer[0] + i0, 1), inner=(inner[0] + i1, 1), steps=(steps[0] + i, 1), dtype=dtype)
        assert np.array_equal(one[0, 0, 0], whole[i0, i1, i])


@pytest.mark.parametrize("dtype", DTYPES)
def test_internal_chunking_is_invisible(rng, monkeypatch, dtype):
    req = random_request(rng, max_outer=40, max_inner=30, max_steps=9)
    whole = normals(**req, dtype=dtype)
    bits = uniform_bits(**req)
    monkeypatch.setattr(crng, "_CHUNK_BYTES", 1)                   # one (outer, inner) pair per chunk
    assert np.array_equal(normals(**req, dtype=dtype), whole)
    assert np.array_equal(uniform_bits(**req), bits)
    monkeypatch.setattr(crng, "_CHUNK_BYTES", 7 * crng._BYTES_PER_GROUP * 4)   # chunks that split inner rows
    assert np.array_equal(normals(**req, dtype=dtype), whole)


def test_numpy_path_caps_its_temporaries(rng, monkeypatch):
    monkeypatch.setattr(crng, "_CHUNK_BYTES", 2 * 2**20)
    tracemalloc.start()
    try:
        z = normals(int(rng.integers(0, U32)), "inner", (0, 2000), (0, 500), 3, (0, 1), 4)   # 32 MB out
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert z.nbytes == 32_000_000
    assert peak - z.nbytes < 4 * crng._CHUNK_BYTES, f"temporaries peaked at {(peak - z.nbytes) / 2**20:.1f} MB"


def test_different_keys_give_different_numbers(rng):
    # at least 4 numbers: the correlation of a single pair is undefined (NaN; 1e-4 of the draws had one)
    base = random_request(rng, max_outer=20, max_inner=20, max_steps=5, min_outer=2, min_inner=2)
    base["date"] = int(rng.integers(0, (1 << 16) - 1))
    z = normals(**base)
    changed = [
        dict(base, seed=(base["seed"] + 1) % U32),
        dict(base, purpose=next(p for p in PURPOSES if p != base["purpose"])),
        dict(base, date=base["date"] + 1),
    ]
    for other in changed:
        w = normals(**other)
        assert np.mean(w == z) < 0.01, other
        assert abs(np.corrcoef(w.ravel(), z.ravel())[0, 1]) < 5 / math.sqrt(z.size) + 0.05
    # all four purposes pairwise distinct
    zs = [normals(**dict(base, purpose=p)) for p in PURPOSES]
    for a in range(4):
        for b in range(a):
            assert np.mean(zs[a] == zs[b]) < 0.01


def test_purpose_name_or_int_and_numpy_integers(rng):
    req = random_request(rng)
    by_name = normals(**req)
    by_int = normals(**dict(req, purpose=PURPOSES[req["purpose"]], seed=np.uint32(req["seed"]),
                            date=np.int64(req["date"])))
    assert np.array_equal(by_name, by_int)
    assert np.array_equal(uniform_bits(**req), uniform_bits(**dict(req, purpose=np.int32(PURPOSES[req["purpose"]]))))


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_requests(dtype):
    z = normals(1, "outer", (5, 0), (0, 3), 0, (0, 2), 2, dtype=dtype)
    assert z.shape == (0, 3, 2, 2) and z.dtype == dtype
    assert normals(1, "outer", (5, 2), (0, 3), 0, (4, 0), 2, dtype=dtype).shape == (2, 3, 0, 2)
    assert uniform_bits(1, "outer", (5, 2), (0, 0), 0, (0, 2), 3).shape == (2, 0, 2, 3)


# ---------------------------------------------------------------------------------------------
# distribution


def _corr_ok(x, y, name):
    r = np.corrcoef(x.ravel(), y.ravel())[0, 1]
    assert abs(r) < 5 / math.sqrt(x.size), f"{name}: correlation {r:.2e} over {x.size} pairs"


@pytest.mark.parametrize("dtype", DTYPES)
def test_distribution(rng, dtype):
    seed = int(rng.integers(0, U32))
    z = normals(seed, "outer", (int(rng.integers(0, 1 << 30)), 250), (int(rng.integers(0, 1 << 30)), 100),
                int(rng.integers(0, 1 << 16)), (0, 10), 4, dtype=dtype)             # (250, 100, 10, 4): 1e6
    x = z.astype(np.float64).ravel()
    n = x.size
    assert np.isfinite(x).all()
    assert abs(x.mean()) < 5 / math.sqrt(n)
    assert abs(x.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs(stats.skew(x)) < 5 * math.sqrt(6 / n)
    assert abs(stats.kurtosis(x)) < 5 * math.sqrt(24 / n)
    assert stats.kstest(x, "norm").pvalue > 1e-4
    assert np.abs(x).max() < 7.0                                   # Box-Muller of (0, 1) uniforms: r <= 6.7
    flat = z.astype(np.float64).reshape(250, 100, 40)               # q = j * 4 + a: lanes are q & 3
    _corr_ok(flat[..., 0::4], flat[..., 1::4], "lanes 0, 1 (one Box-Muller pair)")
    _corr_ok(flat[..., 0::4] ** 2, flat[..., 1::4] ** 2, "squares of lanes 0, 1")
    _corr_ok(flat[..., 1::4], flat[..., 2::4], "lanes 1, 2")
    _corr_ok(flat[..., 2::4], flat[..., 3::4], "lanes 2, 3")
    _corr_ok(flat[..., 3::4][..., :-1], flat[..., 4::4], "lane 3 and the next call's lane 0")
    _corr_ok(z[..., :-1], z[..., 1:], "adjacent assets")
    _corr_ok(z[:, :, :-1], z[:, :, 1:], "adjacent steps")
    _corr_ok(z[:, :-1], z[:, 1:], "adjacent inner paths")
    _corr_ok(z[:-1], z[1:], "adjacent outer paths")


def test_float32_agrees_with_float64(rng):
    """float32 = the float64 Box-Muller of its own uniforms to float32 rounding, and = the float64 normals
    to ~1e-5 away from u_even -> 0 and u_even -> 1, within the first-order effect of the uniforms'
    difference (float32 keeps the top 23 bits of a word: |u32 - u64| < 2**-24) everywhere."""
    req = random_request(rng, max_outer=40, max_inner=40, max_steps=8, max_d=4, min_outer=30, min_inner=30)
    req["steps"], req["d"] = (0, req["steps"][1]), 4                # whole Philox calls: lane partners present
    z32, z64 = normals(**req, dtype=np.float32), normals(**req, dtype=np.float64)
    bits = uniform_bits(**req).astype(np.uint64)
    flat = bits.reshape(-1, bits.shape[2] * 4)
    q = np.arange(flat.shape[1])
    xe, xo = flat[:, q & ~1], flat[:, q | 1]                         # the lane pair of each q
    ue32, uo32 = ((xe >> 9) + 0.5) * 2.0**-23, ((xo >> 9) + 0.5) * 2.0**-23
    ue64, uo64 = (xe + 0.5) * 2.0**-32, (xo + 0.5) * 2.0**-32
    r32, r64 = np.sqrt(-2 * np.log(ue32)), np.sqrt(-2 * np.log(ue64))
    ref32 = np.where(q % 2 == 0, r32 * np.cos(2 * np.pi * uo32), r32 * np.sin(2 * np.pi * uo32)).reshape(z32.shape)
    np.testing.assert_allclose(z32, ref32, rtol=2e-6, atol=2e-6)
    # |r32 - r64| <= |r32^2 - r64^2| / r64 <= 2 |ue32 - ue64| / (min(ue) r64); |d(cos, sin)| <= 2 pi |uo32 - uo64|
    bound = (2 * np.abs(ue32 - ue64) / (np.minimum(ue32, ue64) * r64) + 2 * np.pi * r32 * np.abs(uo32 - uo64))
    bound = bound.reshape(z32.shape) + 2e-6 * (1 + np.abs(z64))
    assert (np.abs(z32 - z64) <= bound).all()
    ue64 = ue64.reshape(z32.shape)
    mask = (ue64 >= 1e-2) & (ue64 <= 1 - 1e-2)
    assert mask.mean() > 0.95
    np.testing.assert_allclose(z32[mask], z64[mask], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# argument errors


GOOD = dict(seed=3, purpose="inner", outer=(0, 2), inner=(0, 3), date=1, steps=(0, 2), d=2)


@pytest.mark.parametrize("change,exc,name", [
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=U32), ValueError, "seed"),
    (dict(seed=1.5), TypeError, "seed"),
    (dict(seed=True), TypeError, "seed"),
    (dict(purpose="bogus"), ValueError, "purpose"),
    (dict(purpose=7), ValueError, "purpose"),
    (dict(purpose=None), TypeError, "purpose"),
    (dict(outer=(0, -1)), ValueError, "outer"),
    (dict(outer=(-1, 2)), ValueError, "outer"),
    (dict(outer=(U32 - 1, 2)), ValueError, "outer"),
    (dict(outer=5), TypeError, "outer"),
    (dict(inner=(0, -3)), ValueError, "inner"),
    (dict(inner=(0, 2.0)), TypeError, "inner"),
    (dict(steps=(0, -2)), ValueError, "steps"),
    (dict(steps=(1 << 17, 1)), ValueError, "steps"),                   # q >> 2 >= 2**16 with d = 2
    (dict(date=1 << 16), ValueError, "date"),
    (dict(date=-1), ValueError, "date"),
    (dict(d=0), ValueError, "d"),
    (dict(d=2.0), TypeError, "d"),
])
def test_argument_errors(change, exc, name):
    for fn in (normals, uniform_bits):
        with pytest.raises(exc, match=rf"\b{name}\b"):
            fn(**dict(GOOD, **change))


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.complex128, "float128", "not a dtype", object])
def test_bad_dtype(dtype):
    with pytest.raises(TypeError, match="dtype"):
        normals(**GOOD, dtype=dtype)


def test_bad_xp():
    with pytest.raises(TypeError, match="xp"):
        normals(**GOOD, xp="numpy")
    with pytest.raises(TypeError, match="xp"):
        uniform_bits(**GOOD, xp=math)


def test_philox_argument_errors():
    with pytest.raises(ValueError, match="counter"):
        philox4x32([0, 0, 0], [0, 0])
    with pytest.raises(ValueError, match="key"):
        philox4x32([0, 0, 0, 0], [0, 0, 0])
    with pytest.raises(TypeError, match="key"):
        philox4x32([0, 0, 0, 0], [0.5, 0])
    with pytest.raises(ValueError, match="counter"):
        philox4x32([0, -1, 0, 0], [0, 0])
    with pytest.raises(ValueError, match="key"):
        philox4x32([0, 0, 0, 0], [U32, 0])
    with pytest.raises(ValueError, match="broadcast"):
        philox4x32(np.zeros((3, 4), np.uint32), np.zeros((2, 2), np.uint32))
