"""A chunk's values to the host: into page-locked memory (a cluster task's result) the same array as the plain
copy, picklable as Dask sends it, and timed_chunk's values bitwise either way."""

import pickle

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

from linalg_gpu._backend import to_host, to_pinned_host  # noqa: E402


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.bool_])
def test_pinned_copy_is_the_plain_copy(dtype):
    a = cp.asarray(np.random.default_rng(3).normal(size=(7, 33, 5)) > 0 if dtype is np.bool_ else
                   np.random.default_rng(3).normal(size=(7, 33, 5)).astype(dtype))
    for x in (a, a[:, ::2].transpose(1, 0, 2)):                                      # contiguous and strided
        pinned = to_pinned_host(x)
        assert isinstance(pinned, np.ndarray) and pinned.dtype == dtype
        np.testing.assert_array_equal(pinned, to_host(x))
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(pinned, protocol=5)), to_host(x))


def test_timed_chunk_pinned_is_bitwise_the_plain_one():
    from cva.engine.nested import timed_chunk
    from cva.engine.plan import build_plan
    from cva.io.config import load_config
    from cva.market.model import BlackScholes

    cfg = load_config({"run": {"name": "p", "seed": 3, "dtype": "float32"},
                       "market": {"spot": [100.0], "vol": [0.25], "rate": 0.03},
                       "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0,
                                      "maturity": 1.0, "exercise_dates": 4}],
                       "counterparty": {"hazard_rate": 0.02},
                       "simulation": {"dates": 4, "outer_paths": 64, "inner_paths": 32}})
    plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)
    plain, *_, ok = timed_chunk(cfg, plan, model, cp, 0, 64, 32, 1, 0)
    pinned, *_, ok_pinned = timed_chunk(cfg, plan, model, cp, 0, 64, 32, 1, 0, pinned=True)
    assert ok and ok_pinned
    np.testing.assert_array_equal(pinned, plain)
