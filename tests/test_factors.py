"""KLT factor reduction of the market (``market.factors``): the eigen-data against numpy's eigh, k = d is the full
model in another square root (paths to rounding), k < d keeps each asset's vol and has the correlation B B^T,
the engine against closed forms and against the full model with that correlation, and bad input in one line."""

import math

import numpy as np
import pytest

import cva
from cva.instruments import analytic
from cva.instruments.products import Contract
from cva.io.config import ConfigError, load_config
from cva.market.factors import factor_count, klt_factors
from cva.market.model import BlackScholes

Z_MC = 4.5      # standard errors allowed to a Monte Carlo estimate (as tests/test_nested.py)


def _correlation(d, seed):
    """A random full-rank correlation with a few strong factors (fixed seed)."""
    g = np.random.default_rng(seed)
    F = g.standard_normal((d, 3)) * [2.0, 1.0, 0.5]
    S = F @ F.T + np.diag(g.uniform(0.2, 0.6, d))
    s = 1.0 / np.sqrt(np.diag(S))
    return S * s[:, None] * s[None, :]


@pytest.mark.parametrize("d", [3, 8, 20])
def test_explained_variance_against_numpy_eigh(d):
    C = _correlation(d, 7 + d)
    ref = np.linalg.eigvalsh(C)[::-1]
    for k in (1, d // 2, d):
        f = klt_factors(C, k)
        np.testing.assert_allclose(f.eigenvalues, ref, rtol=1e-12, atol=1e-13 * d)
        np.testing.assert_allclose(f.explained, ref / d, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(np.linalg.norm(f.loading, axis=1), 1.0, rtol=1e-14)   # each asset keeps its vol
        C_k = f.correlation
        assert np.linalg.matrix_rank(C_k, tol=1e-10) == k
        np.testing.assert_allclose(np.diag(C_k), 1.0)
    for share in (0.3, 0.9, 0.99, 1.0):
        k = factor_count(ref, share)
        cum = np.cumsum(ref) / ref.sum()
        assert cum[k - 1] >= share - 1e-12 and (k == 1 or cum[k - 2] < share)
        assert klt_factors(C, explained=share).k == k


def test_all_factors_is_the_full_model_to_rounding():
    """With k = d, B = L Q for the Cholesky factor L and an orthogonal Q: the factor model's paths from z are the
    full model's from z Q^T."""
    d = 6
    C = _correlation(d, 3)
    f = klt_factors(C, d)
    np.testing.assert_allclose(f.correlation, C, atol=1e-13)
    L = np.linalg.cholesky(C)
    Q = np.linalg.solve(L, f.loading)
    np.testing.assert_allclose(Q @ Q.T, np.eye(d), atol=1e-12)
    kw = {"spot": np.linspace(80, 120, d), "vol": np.linspace(0.15, 0.4, d), "dividend": 0.01, "rate": 0.02}
    full = BlackScholes(correlation=C, **kw)
    klt = BlackScholes(correlation=f.correlation, loading=f.loading, **kw)
    times = np.array([0.0, 0.1, 0.35, 0.5, 1.0])
    z = np.random.default_rng(5).standard_normal((50, 4, d))
    np.testing.assert_allclose(klt.paths(full.spot, times, z), full.paths(full.spot, times, z @ Q.T),
                               rtol=1e-12)


def test_fewer_factors_keep_the_vols_and_give_the_correlation_of_the_loadings():
    d, k = 5, 2
    C = _correlation(d, 11)
    f = klt_factors(C, k)
    vol = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    m = BlackScholes(spot=np.full(d, 100.0), vol=vol, dividend=0.0, rate=0.0, correlation=f.correlation,
                     loading=f.loading)
    assert m.n_normals == k
    n, h = 40_000, 0.25
    S = m.sample(np.array([0.0, h]), n, seed=9, purpose="outer")[0, :, 0, :]          # (n, d)
    x = np.log(S / 100.0)
    # variances: each asset's own vol (relative error of a sample variance: sqrt(2 / n))
    np.testing.assert_allclose(x.var(axis=0, ddof=1) / (vol**2 * h), 1.0, atol=Z_MC * math.sqrt(2 / n))
    # correlations: B B^T (standard error of a sample correlation: (1 - rho^2) / sqrt(n))
    R = np.corrcoef(x, rowvar=False)
    tol = Z_MC * (1 - f.correlation**2) / math.sqrt(n) + 1e-12
    assert np.all(np.abs(R - f.correlation) <= tol)


def _config(tmp_path, market, name="f", **sim):
    return {"run": {"name": name, "seed": 4, "backend": "cpu"},
            "market": market,
            "portfolio": [{"style": "european", "payoff": "call", "underlying": {"asset": 2}, "strike": 100.0,
                           "maturity": 1.0},
                          {"style": "european", "payoff": "call", "underlying": "basket", "strike": 100.0,
                           "maturity": 1.0}],
            "counterparty": {"recovery": 0.4, "hazard_rate": 0.03},
            "simulation": {"dates": 4, "outer_paths": 3000, "inner_paths": 128, "pricing_paths": 20_000,
                           "basis": "quadratic", **sim},
            "output": {"dir": str(tmp_path / name)}}


MARKET = {"spot": [100.0, 95.0, 105.0, 100.0], "vol": [0.25, 0.3, 0.2, 0.35], "rate": 0.03,
          "correlation": _correlation(4, 21).tolist()}


def test_the_engine_with_factors_against_closed_form_and_the_full_model(tmp_path):
    """Two factors of four assets: the call on one asset has the closed-form CVA (its vol is kept), and the whole
    portfolio's CVA is that of the full model given the correlation B B^T (an independent run, own paths)."""
    cfg = load_config(_config(tmp_path, {**MARKET, "factors": 2}))
    fm = cfg.market.factor_model
    w = np.linalg.eigvalsh(cfg.market.correlation_matrix)[::-1]
    assert fm["k"] == 2 and fm["explained_total"] == pytest.approx(w[:2].sum() / 4, rel=1e-12)
    res = cva.run(cfg, progress=False)
    # the call on asset 2 alone
    one = load_config({**_config(tmp_path, {**MARKET, "factors": 2}, name="one"),
                       "portfolio": [_config(tmp_path, MARKET)["portfolio"][0]]})
    r1 = cva.run(one, progress=False)
    m = BlackScholes(spot=MARKET["spot"], vol=MARKET["vol"], dividend=0.0, rate=0.03, correlation=0.0)
    c = analytic.closed_form_price(Contract("european", "call", "asset", 100.0, 1.0, asset=2), m)
    ref = 0.6 * c * (1 - math.exp(-0.03))
    assert abs(r1.cva - ref) < Z_MC * r1.stderr, (r1.cva, r1.stderr, ref)
    # the portfolio against the full model with the factor model's correlation
    C_k = BlackScholes.from_market(cfg.market).correlation
    full = cva.run(load_config(_config(tmp_path, {**MARKET, "correlation": C_k.tolist()}, name="full")),
                   progress=False)
    se = math.hypot(res.stderr, full.stderr)
    assert abs(res.cva - full.cva) < Z_MC * se, (res.cva, full.cva, se)
    assert res.summary["factors"]["k"] == 2 and full.summary["factors"] is None
    assert 'id="factors"' in (res.out_dir / "report.html").read_text()
    # the run directory's configuration loads again into the same factor model
    assert load_config(cfg.to_dict()).market.factor_model == fm


def test_factors_by_explained_share(tmp_path):
    cfg = load_config(_config(tmp_path, {**MARKET, "factors": {"explained": 0.9}}))
    w = np.linalg.eigvalsh(cfg.market.correlation_matrix)[::-1]
    k = int(np.argmax(np.cumsum(w) / 4 >= 0.9)) + 1
    assert cfg.market.factor_model["k"] == k


@pytest.mark.parametrize("factors, message", [
    (0, r"market.factors: must be a positive number of factors"),
    (5, r"market.factors: must be at most d = 4 \(the number of assets\), got 5"),
    (True, r"market.factors: must be a positive number of factors k or \{explained: x\}"),
    ("two", r"market.factors: must be a positive number of factors k or \{explained: x\}"),
    ({"explained": 1.5}, r"market.factors: explained must be a number in \(0, 1\]"),
    ({"explained": 0}, r"market.factors: explained must be a number in \(0, 1\]"),
    ({"share": 0.9}, r"market.factors: must be a positive number of factors k or \{explained: x\}"),
])
def test_bad_factors_get_one_line(tmp_path, factors, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_config(tmp_path, {**MARKET, "factors": factors}))


def test_a_non_symmetric_correlation_is_refused_with_factors(tmp_path):
    C = np.array(MARKET["correlation"])
    C[0, 1] += 0.05
    with pytest.raises(ConfigError, match=r"market.correlation: correlation matrix is not symmetric"):
        load_config(_config(tmp_path, {**MARKET, "correlation": C.tolist(), "factors": 2}))


def test_an_asset_outside_the_kept_factors_is_named():
    C = np.eye(3)
    C[0, 1] = C[1, 0] = 0.9                                                  # asset 2 is independent, eigenvalue 1
    with pytest.raises(ValueError, match=r"asset 2 has no weight on the 1 leading factor"):
        klt_factors(C, 1)
    with pytest.raises(ValueError, match=r"factors must lie in \[1, d = 3\]"):
        klt_factors(C, 4)
    with pytest.raises(ValueError, match=r"explained must lie in \(0, 1\]"):
        klt_factors(C, explained=0.0)


def test_a_loading_that_does_not_give_the_correlation_is_refused():
    f = klt_factors(_correlation(4, 2), 2)
    with pytest.raises(ValueError, match=r"correlation must equal loading @ loading.T"):
        BlackScholes(spot=[1.0] * 4, vol=0.2, dividend=0.0, rate=0.0, correlation=0.0, loading=f.loading)
    m = BlackScholes(spot=[1.0] * 4, vol=0.2, dividend=0.0, rate=0.0, correlation=f.correlation, loading=f.loading)
    with pytest.raises(ValueError, match=r"z must have 2 normals per step"):
        m.paths(m.spot, np.array([0.0, 1.0]), np.zeros((3, 1, 4)))
