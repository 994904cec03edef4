"""The desk's aggregation on the GPU: the trades' Euler contributions (``cva/engine/cuda/euler_contributions.cu``)
bitwise their numpy twin, and a desk chunk's aggregate (netted values, CSA gross values, contributions) bitwise
the numpy aggregate of the same value cube."""

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

from cva.xva.desk import euler_contributions, euler_contributions_twin  # noqa: E402


def _values(rng, shape):
    """Normal values with exact zeros, negative zeros, a NaN and infinities among them."""
    x = rng.normal(size=shape)
    x[rng.uniform(size=shape) < 0.1] = 0.0
    x[rng.uniform(size=shape) < 0.05] = -0.0
    flat = x.reshape(-1)
    flat[rng.integers(flat.size, size=3)] = [np.nan, np.inf, -np.inf]
    return x


@pytest.mark.parametrize("K", [1, 7, 24])
@pytest.mark.parametrize("side", [1.0, -1.0])
def test_euler_contributions_are_the_twins(K, side):
    rng = np.random.default_rng(11 + K)
    sets, L, S, C = 3, 37, 4, 9
    members = [6, 1, 4]
    x = _values(rng, (sets, L, len(members), K))
    P = _values(rng, (sets, L, S, K))
    w = rng.uniform(0.0, 0.02, size=K)
    for j in range(S):
        out = cp.zeros((sets, L, C))
        euler_contributions(cp.asarray(x), cp.asarray(P), j, w, side, members, out)
        want = np.zeros((sets, L, C))
        want[:, :, members] = euler_contributions_twin(x, P[..., j, :], w, side)
        np.testing.assert_array_equal(cp.asnumpy(out).view(np.int64), want.view(np.int64))   # bits, -0.0 too


def test_a_desk_chunks_aggregate_is_the_numpy_aggregate():
    from cva.engine.plan import build_plan
    from cva.io.config import load_config
    from cva.market.model import BlackScholes
    from cva.xva.desk import Book

    cfg = load_config("configs/desk.yaml")
    plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)
    book = Book.of_config(cfg, plan, model)
    rng = np.random.default_rng(5)
    cube = rng.normal(scale=5.0, size=(3, 41, len(plan.contracts), len(plan.value_index))).astype(cfg.run.dtype)
    host = book.aggregate(cube)
    device = book.aggregate(cp.asarray(cube))
    assert device.dtype == host.dtype
    np.testing.assert_array_equal(cp.asnumpy(device), host)
