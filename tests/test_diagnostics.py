"""Regression diagnostics: the design matrices' singular values by the Jacobi SVD against numpy's SVD (LAPACK),
the effective rank of constructed rank-deficient designs, and the per-date columns of a run's solver table
(the same whatever the chunking)."""

import numpy as np
import pytest

import cva
from cva.engine.diagnostics import analyse


@pytest.mark.parametrize("m, p, rank", [(200, 6, 6), (200, 6, 3), (40, 10, 10), (5, 8, 5), (300, 30, 12),
                                         (300, 4, 4)])
def test_singular_values_rank_and_condition(rng, m, p, rank):
    X = rng.standard_normal((m, rank)) @ rng.standard_normal((rank, p))       # exact rank `rank`
    X *= np.logspace(0, 2, p)                                                  # columns of different scales
    (r,) = analyse([X], cond_max=1e5)
    ref = np.linalg.svd(X, compute_uv=False)
    s = np.sort(r["singular_values"])[::-1][:ref.size]
    np.testing.assert_allclose(s[:rank], ref[:rank], rtol=1e-10)
    assert np.all(s[rank:] <= 1e-12 * ref[0])                                  # the null directions are ~0
    assert r["rank"] == int(np.sum(ref > ref[0] / np.sqrt(1e5))) <= rank and r["p"] == p   # the rank the solver sees
    if rank == p and m >= p:
        assert r["cond2"] == pytest.approx((ref[0] / ref[-1]) ** 2, rel=1e-8)
    else:
        assert r["cond2"] > 1e20


def test_the_solver_table_explains_the_fallbacks(tmp_path):
    """A deep out-of-the-money basket put on five assets: few in-the-money inner paths, so designs of rank < p
    where the eigen fallback runs; the columns are the same whatever the chunking."""
    cfg = {"run": {"name": "d", "seed": 3, "backend": "cpu"},
           "market": {"spot": [100.0] * 5, "vol": 0.2, "rate": 0.03, "correlation": 0.5},
           "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 75.0,
                          "maturity": 1.0, "exercise_dates": 4}],
           "counterparty": {"recovery": 0.4, "hazard_rate": 0.02},
           "simulation": {"dates": 4, "outer_paths": 40, "inner_paths": 32, "basis": "quadratic"}}
    runs = [cva.run({**cfg, "output": {"dir": str(tmp_path / str(c))}}, chunk=c, progress=False) for c in (40, 3)]
    t = runs[0].solver_stats
    assert t.equals(runs[1].solver_stats)
    sampled = t["design_samples"] > 0             # (a date where no sampled path has an in-the-money inner path: 0)
    assert sampled.iloc[0] and (t.loc[sampled, "design_p"] == 21).all()       # quadratic on 5 assets
    assert (t.loc[sampled, "design_rank_min"] <= 21).all()
    assert t["design_rank_deficient"].sum() > 0                                 # the case the fallback handles
    assert "design rank (min)" in (runs[0].out_dir / "report.html").read_text()
