"""Credit curves against QuantLib's CDS bootstrap and direct integration; the exposure measures
against direct computations."""

import math
import warnings

import numpy as np
import pytest

from cva.io.config import load_config
from cva.xva import measures
from cva.xva.credit import Counterparty, HazardCurve, _cds_value

ql = pytest.importorskip("QuantLib")


def test_flat_and_piecewise_hazards(rng):
    lam = rng.uniform(0.001, 0.1)
    t = rng.uniform(0, 10, 20)
    np.testing.assert_allclose(HazardCurve.flat(lam).survival(t), np.exp(-lam * t), rtol=1e-14)
    times = np.sort(rng.uniform(0.5, 8, 4))
    rates = rng.uniform(0, 0.2, 4)
    c = HazardCurve(times, rates)
    for x in rng.uniform(0, 12, 10):
        grid = np.linspace(0, x, 200_001)
        mid = 0.5 * (grid[1:] + grid[:-1])
        lam_mid = rates[np.minimum(np.searchsorted(times, mid), 3)]
        assert abs(c.cumulative(x) - np.sum(lam_mid * np.diff(grid))) < 1e-4 * max(1.0, x)
    q = c.default_probabilities([1.0, 2.0, 3.0])
    np.testing.assert_allclose(q.sum(), 1 - c.survival(3.0), rtol=1e-13)
    with pytest.raises(ValueError, match="increasing"):
        HazardCurve([2.0, 1.0], [0.1, 0.1])
    with pytest.raises(ValueError, match="non-negative"):
        HazardCurve([1.0], [-0.1])


def test_cds_bootstrap_against_quantlib(rng):
    today = ql.Date(15, 3, 2024)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    r, R = rng.uniform(0, 0.06), rng.uniform(0.2, 0.6)
    disc = ql.YieldTermStructureHandle(ql.FlatForward(today, r, dc))
    spreads = dict(zip([1, 3, 5, 7], np.sort(rng.uniform(0.002, 0.03, 4)), strict=False))
    helpers = [ql.SpreadCdsHelper(ql.QuoteHandle(ql.SimpleQuote(float(s))), ql.Period(t, ql.Years), 0,
                                  ql.NullCalendar(), ql.Quarterly, ql.Unadjusted, ql.DateGeneration.Forward,
                                  dc, R, disc) for t, s in spreads.items()]
    ref = ql.PiecewiseFlatHazardRate(today, helpers, dc)
    ours = HazardCurve.from_cds(spreads, R, r)
    for t in np.linspace(0.25, 7, 28):
        # calendar days and day counts differ from our year fractions: default probabilities agree to 1%
        pd_ql = 1 - ref.survivalProbability(float(t))
        assert abs(ours.survival(t) - ref.survivalProbability(float(t))) < 0.01 * pd_ql
    for t, s in spreads.items():                                          # each quote repriced at par
        assert abs(_cds_value(ours, t, s, R, r)) < 1e-12


def test_measures_against_direct_computation(rng):
    L, K = 5000, 6
    P = rng.standard_normal((L, K)) * np.arange(1, K + 1) + 0.3
    dates = np.sort(rng.uniform(0.1, 3, K))
    q = rng.uniform(0, 0.02, K)
    contrib = measures.cva_contributions(P, dates, 0.04, q, 0.35)
    direct = [0.65 * sum(math.exp(-0.04 * dates[k]) * max(P[l, k], 0) * q[k] for k in range(K)) for l in range(50)]
    np.testing.assert_allclose(contrib[:50], direct, rtol=1e-12)
    est = measures.cva_estimate(contrib)
    assert est["ci_low"] < est["cva"] < est["ci_high"]
    assert abs(est["stderr"] - np.std(contrib, ddof=1) / math.sqrt(L)) < 1e-15
    prof = measures.exposure_profile(P, dates)
    np.testing.assert_allclose(prof["EE"], np.maximum(P, 0).mean(0))
    np.testing.assert_allclose(prof["ENE"], np.minimum(P, 0).mean(0))
    np.testing.assert_allclose(prof["PFE"], np.sort(np.maximum(P, 0), axis=0)[int(0.975 * (L - 1))], rtol=0.02)
    low = measures.exposure_profile(P, dates, quantile=0.6)
    np.testing.assert_allclose(low["PFE"], np.quantile(np.maximum(P, 0), 0.6, axis=0))


def test_epe_and_eepe_by_hand():
    dates = np.array([0.25, 0.5, 0.75, 1.0, 1.5])
    ee = np.array([1.0, 3.0, 2.0, 4.0, 5.0])
    out = measures.epe_eepe(dates, ee)
    assert out["EPE"] == pytest.approx((0.25 * (1 + 3 + 2 + 4) + 0.5 * 5) / 1.5)
    assert out["EEPE"] == pytest.approx(0.25 * (1 + 3 + 3 + 4) / 1.0)            # effective EE: running max


def test_cds_curve_that_no_hazard_reprices_is_an_error():
    with pytest.raises(ValueError, match=r"tenor 5.*no non-negative hazard"):
        HazardCurve.from_cds({1: 0.05, 5: 0.01}, 0.4, 0.03)


@pytest.mark.parametrize("spread", [5.0, 10.0, 1e3])
def test_cds_spread_too_high_for_any_hazard_is_an_error(spread):
    """Past ~490% at half a year (recovery 0.4) the premium accrued to a default exceeds the protection: no
    hazard reprices the spread; the bracket must say so instead of bisecting NaNs (S underflows to 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"counterparty\.cds_spreads: .*tenor 0\.5 is too high"):
            HazardCurve.from_cds({0.5: spread}, 0.4, 0.05)
        high = HazardCurve.from_cds({0.5: 4.0}, 0.4, 0.05)                      # still matched: a large hazard
    assert np.isfinite(high.rates).all() and high.rates[0] > 1
    assert abs(_cds_value(high, 0.5, 4.0, 0.4, 0.05)) < 1e-9


@pytest.mark.parametrize("curve, words", [
    ({"cds_spreads": {3: 0.015, 1: 0.01}}, "CDS par spreads 1y 100 bp, 3y 150 bp; bootstrapped hazard rates "),
    ({"hazards": {"times": [1, 3], "rates": [0.01, 0.02]}}, "piecewise-constant hazard rates 0.01 to 1y, 0.02 to 3y"),
    ({"hazard_rate": 0.02}, "flat hazard rate 0.02 per year"),
])
def test_credit_description_is_text(curve, words):
    """summary.json's "credit" and the report's counterparty line: words, not a printed dict or list."""
    cfg = load_config({"market": {"spot": 1.0, "vol": 0.2},
                       "portfolio": [{"style": "european", "payoff": "call", "underlying": {"asset": 0},
                                      "strike": 1, "maturity": 1}],
                       "counterparty": {"recovery": 0.4, **curve}})
    cp = Counterparty.from_config(cfg.counterparty, 0.03)
    assert cp.description.startswith(words) and not any(c in cp.description for c in "{}[]:")
    if "cds_spreads" in curve:
        assert cp.description.endswith(f"{cp.curve.rates[0]:.4g} to 1y, {cp.curve.rates[1]:.4g} to 3y (flat beyond)")
