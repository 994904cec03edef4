"""A Longstaff-Schwartz call's solver statistics on the GPU (``cva/engine/cuda/solver_stats.cu``) are, bit for bit,
their numpy twin's from the same reports."""

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

from cva.engine.nested import solver_stats, solver_stats_twin  # noqa: E402
from linalg_gpu import SolverReport  # noqa: E402


def _report(rng, n, dtype, nonfinite_share):
    res = rng.uniform(0.0, 1e-3, n).astype(dtype)
    res[rng.uniform(size=n) < nonfinite_share] = np.nan
    res[rng.uniform(size=n) < nonfinite_share / 2] = np.inf
    zeros = np.zeros(n)
    return SolverReport(method_code=rng.integers(0, 4, n).astype(np.int8), residual=res,
                        n_discarded=rng.integers(0, 4, n).astype(np.int32), cond_estimate=zeros,
                        breakdown=zeros.astype(bool), ok=rng.uniform(size=n) > 0.1, nonfinite=zeros.astype(bool),
                        start_method="per-system", rtol=1e-5, cond_max=1e5)


def _on_gpu(rep):
    return SolverReport(**{**rep.__dict__, **{f: cp.asarray(getattr(rep, f)) for f in
                                             ("method_code", "residual", "n_discarded", "ok")}})


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sizes", [[1], [33, 0, 5000], [2**18 + 3, 77]])
@pytest.mark.parametrize("nonfinite_share", [0.0, 0.2, 1.0])
def test_solver_stats_are_the_twins(dtype, sizes, nonfinite_share):
    rng = np.random.default_rng(20261129)
    reps = [_report(rng, n, dtype, nonfinite_share) for n in sizes]
    got = cp.asnumpy(solver_stats([_on_gpu(r) for r in reps]))
    ref = solver_stats_twin(reps)
    assert got.dtype == np.uint64 and np.array_equal(got, ref)
    assert ref[:4].sum() == sum(sizes)
