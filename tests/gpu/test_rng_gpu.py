"""cva.market.rng on the GPU (cuda/philox.cu) against its numpy twin, on fresh random keys and ranges.

The raw Philox words agree bit for bit. Uniforms are exact in both, so the normals differ only by
the rounding of log and sincospi: float64 to ~1e-15, float32 to ~1e-6 (|z| <= 5.8 in float32).
"""

import numpy as np
import pytest

import cva.market.rng as crng
from cva.market.rng import PURPOSES, normals, uniform_bits

cp = pytest.importorskip("cupy")

U32 = 1 << 32
DTYPES = [np.float64, np.float32]
TOL = {np.float64: dict(rtol=1e-13, atol=1e-13), np.float32: dict(rtol=5e-6, atol=5e-6)}


def random_request(rng, max_outer=40, max_inner=40, max_steps=12, max_d=6):
    """Random keys and ranges; starts anywhere (near 2**32, 2**16 and q >> 2 = 2**16 - 1 included)."""
    d = int(rng.integers(1, max_d + 1))
    n_steps = int(rng.integers(1, max_steps + 1))
    n_outer, n_inner = int(rng.integers(1, max_outer + 1)), int(rng.integers(1, max_inner + 1))
    top = rng.random() < 0.3
    j_max = (1 << 18) // d - n_steps
    return dict(
        seed=int(rng.integers(0, U32)),
        purpose=str(rng.choice(list(PURPOSES))),
        outer=(int(U32 - n_outer if top else rng.integers(0, U32 - n_outer)), n_outer),
        inner=(int(U32 - n_inner if top else rng.integers(0, U32 - n_inner)), n_inner),
        date=int((1 << 16) - 1 if top else rng.integers(0, 1 << 16)),
        steps=(int(j_max if top else rng.integers(0, j_max + 1)), n_steps),
        d=d,
    )


def test_bits_bitwise_equal(rng):
    for _ in range(20):
        req = random_request(rng)
        got = uniform_bits(**req, xp=cp)
        assert isinstance(got, cp.ndarray) and got.dtype == np.uint32
        want = uniform_bits(**req)
        assert got.shape == want.shape
        assert np.array_equal(cp.asnumpy(got), want), req


@pytest.mark.parametrize("dtype", DTYPES)
def test_normals_match_numpy_twin(rng, dtype):
    for _ in range(20):
        req = random_request(rng)
        got = normals(**req, dtype=dtype, xp=cp)
        assert isinstance(got, cp.ndarray) and got.dtype == dtype
        want = normals(**req, dtype=dtype)
        np.testing.assert_allclose(cp.asnumpy(got), want, **TOL[dtype], err_msg=str(req))


@pytest.mark.parametrize("dtype", DTYPES)
def test_normals_match_numpy_twin_large(rng, dtype):
    """Enough Philox calls that the grid-stride loop wraps (more than _MAX_BLOCKS * _THREADS)."""
    n_calls = crng._MAX_BLOCKS * crng._THREADS
    req = dict(seed=int(rng.integers(0, U32)), purpose="inner", outer=(int(rng.integers(0, 1 << 31)), 1500),
               inner=(int(rng.integers(0, 1 << 31)), 1000), date=int(rng.integers(0, 1 << 16)),
               steps=(1, 3), d=3)                                   # q in [3, 12): 3 groups, partial at both ends
    assert 1500 * 1000 * 3 > n_calls
    got = cp.asnumpy(normals(**req, dtype=dtype, xp=cp))
    want = normals(**req, dtype=dtype)
    np.testing.assert_allclose(got, want, **TOL[dtype])
    assert np.array_equal(cp.asnumpy(uniform_bits(**req, xp=cp)), uniform_bits(**req))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pieces_equal_the_whole_on_gpu(rng, dtype):
    req = random_request(rng)
    (l0, no), (m0, ni), (j0, ns) = req["outer"], req["inner"], req["steps"]
    whole = normals(**req, dtype=dtype, xp=cp)
    for _ in range(10):
        a0, a1, a2 = (int(rng.integers(0, n)) for n in (no, ni, ns))
        b0, b1, b2 = (int(rng.integers(a + 1, n + 1)) for a, n in ((a0, no), (a1, ni), (a2, ns)))
        piece = normals(**dict(req, outer=(l0 + a0, b0 - a0), inner=(m0 + a1, b1 - a1), steps=(j0 + a2, b2 - a2)),
                        dtype=dtype, xp=cp)
        assert bool((piece == whole[a0:b0, a1:b1, a2:b2]).all())


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_distribution_sanity(rng, dtype):
    z = normals(int(rng.integers(0, U32)), "outer", (0, 500), (0, 200), 5, (0, 10), 1, dtype=dtype, xp=cp)
    x = z.astype(cp.float64).ravel()
    n = x.size
    assert abs(float(x.mean())) < 5 / np.sqrt(n)
    assert abs(float(x.var()) - 1) < 5 * np.sqrt(2 / n)
    assert bool(cp.isfinite(x).all())


def test_empty_request_on_gpu():
    z = normals(1, "outer", (0, 0), (0, 4), 0, (0, 3), 2, xp=cp)
    assert isinstance(z, cp.ndarray) and z.shape == (0, 4, 3, 2)
