"""The market model, payoffs, bases and closed forms against independent references
(QuantLib's analytic engines, scipy's bivariate normal, moments of exact samples)."""

import math

import numpy as np
import pytest
from scipy import stats

from cva.engine import basis
from cva.instruments import analytic
from cva.instruments.products import Contract
from cva.market.model import BlackScholes, correlation_matrix

ql = pytest.importorskip("QuantLib")


# ---------------------------------------------------------------------------------------------
# correlation checks


def test_correlation_errors_say_which_and_by_how_much():
    with pytest.raises(ValueError, match=r"not symmetric.*\[0\]\[1\] = 0.5.*\[1\]\[0\] = 0.4"):
        correlation_matrix([[1, 0.5, 0], [0.4, 1, 0], [0, 0, 1]], 3)
    with pytest.raises(ValueError, match=r"diagonal must be 1: entry \[1\]\[1\] = 0.9"):
        correlation_matrix([[1, 0.2], [0.2, 0.9]], 2)
    with pytest.raises(ValueError, match=r"not positive semi-definite: smallest eigenvalue -0.8"):
        correlation_matrix([[1, 0.9, -0.9], [0.9, 1, 0.9], [-0.9, 0.9, 1]], 3)
    with pytest.raises(ValueError, match=r"scalar correlation -0.6 .* d = 3 .*\[-0.5, 1\]"):
        correlation_matrix(-0.6, 3)
    with pytest.raises(ValueError, match=r"shape \(2, 2\), expected \(3, 3\)"):
        correlation_matrix(np.eye(2), 3)


def test_correlation_psd_singular_is_accepted(rng):
    v = rng.standard_normal((4, 2))
    C = v @ v.T
    C = C / np.sqrt(np.outer(np.diag(C), np.diag(C)))                 # rank 2 correlation
    m = BlackScholes(spot=np.ones(4), vol=0.2, dividend=0.0, rate=0.0, correlation=C)
    z = rng.standard_normal((200_000, 1, 4))
    S = m.paths(np.ones(4), [0.0, 1.0], z)[:, 0]
    emp = np.corrcoef(np.log(S).T)
    assert np.abs(emp - C).max() < 5 * 2 / math.sqrt(200_000)


# ---------------------------------------------------------------------------------------------
# exact log-normal stepping


def test_paths_moments_and_exact_stepping(rng):
    d = 3
    spot, vol, q, r = rng.uniform(50, 150, d), rng.uniform(0.1, 0.4, d), rng.uniform(0, 0.05, d), 0.03
    rho = 0.4
    m = BlackScholes(spot=spot, vol=vol, dividend=q, rate=r, correlation=rho)
    times = np.sort(rng.uniform(0, 2, 5))
    times = np.concatenate([[0.0], times])
    n = 400_000
    z = rng.standard_normal((n, 5, d))
    S = m.paths(spot, times, z)                                         # (n, 5, d)
    T = times[-1]
    mean, se = S[:, -1].mean(0), S[:, -1].std(0) / math.sqrt(n)
    assert np.all(np.abs(mean - m.forward(T)) < 5 * se)
    lr = np.log(S[:, -1] / spot)
    cov = np.cov(lr.T)
    expect = rho * np.outer(vol, vol) * T + np.diag((1 - rho) * vol**2 * T)
    assert np.abs(cov - expect).max() < 6 * np.sqrt(2.0 / n) * np.abs(expect).max()
    # exactness: the two-step path with the same Brownian increments gives S_T of one step
    h = np.diff(times)
    w = (z * np.sqrt(h)[None, :, None]).sum(1) / math.sqrt(T)           # (n, d) the same W_T / sqrt(T)
    S1 = m.paths(spot, [0.0, T], w[:, None, :])[:, 0]
    np.testing.assert_allclose(S[:, -1], S1, rtol=1e-12)


def test_paths_float32_stays_float32(rng):
    m = BlackScholes(spot=[1.0, 2.0], vol=[0.1, 0.2], dividend=0.0, rate=0.1, correlation=0.5)
    z = rng.standard_normal((10, 4, 2)).astype(np.float32)
    S = m.paths(m.spot, np.linspace(0, 1, 5), z)
    assert S.dtype == np.float32
    np.testing.assert_allclose(S, m.paths(m.spot, np.linspace(0, 1, 5), z.astype(float)), rtol=2e-6)


def test_model_rejects_bad_parameters():
    with pytest.raises(ValueError, match="spot"):
        BlackScholes(spot=[100, -1], vol=0.2, dividend=0, rate=0, correlation=0)
    with pytest.raises(ValueError, match="vol"):
        BlackScholes(spot=[100], vol=-0.2, dividend=0, rate=0, correlation=0)


# ---------------------------------------------------------------------------------------------
# payoffs and bases


def test_payoffs(rng):
    S = rng.uniform(50, 150, (1000, 3))
    K = 100.0
    w = (1.0, 2.0, 3.0)
    cases = {
        ("call", "asset"): np.maximum(S[:, 1] - K, 0),
        ("put", "basket"): np.maximum(K - S @ np.array(w) / 6.0, 0),
        ("call", "max"): np.maximum(S.max(1) - K, 0),
        ("put", "min"): np.maximum(K - S.min(1), 0),
    }
    for (pay, und), expect in cases.items():
        c = Contract(style="bermudan", payoff=pay, underlying=und, strike=K, maturity=1.0, n_exercise=4,
                     asset=1 if und == "asset" else None, weights=w if und == "basket" else None)
        np.testing.assert_allclose(c.payoff_value(S), expect, rtol=1e-14, atol=1e-12 * K)
    np.testing.assert_allclose(c.exercise_times(), [0.25, 0.5, 0.75, 1.0])


def test_bases_columns(rng):
    S = rng.uniform(0.5, 2.0, (7, 3))
    scale = np.array([1.0, 2.0, 4.0])
    x = S / scale
    X = basis.evaluate("quadratic", S, scale)
    assert X.shape == (7, basis.basis_size("quadratic", 3)) == (7, 10)
    np.testing.assert_allclose(X[:, 4], x[:, 0] ** 2)
    np.testing.assert_allclose(X[:, 5], x[:, 0] * x[:, 1])
    h = rng.uniform(0, 1, 7)
    Xl = basis.evaluate("linear", S, scale, payoff=h)
    assert Xl.shape == (7, basis.basis_size("linear", 3, payoff_regressor=True)) == (7, 5)
    np.testing.assert_allclose(Xl[:, -1], h / scale.mean())
    y = S[:, :1] / 1.0
    L = basis.evaluate("laguerre", S[:, :1], [1.0])
    lag = [np.polynomial.laguerre.lagval(y[:, 0], np.eye(3)[k]) * np.exp(-y[:, 0] / 2) for k in range(3)]
    np.testing.assert_allclose(L[:, 1:], np.stack(lag, 1), rtol=1e-13)
    with pytest.raises(ValueError, match="laguerre basis is for one asset"):
        basis.evaluate("laguerre", S, scale)


# ---------------------------------------------------------------------------------------------
# closed forms against QuantLib and scipy


def _ql_process(S, r, q, sigma, today):
    dc = ql.Actual365Fixed()
    return ql.BlackScholesMertonProcess(ql.QuoteHandle(ql.SimpleQuote(S)),
                                        ql.YieldTermStructureHandle(ql.FlatForward(today, q, dc)),
                                        ql.YieldTermStructureHandle(ql.FlatForward(today, r, dc)),
                                        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(),
                                                                                           sigma, dc)))


def test_bivariate_normal_against_scipy(rng):
    for _ in range(40):
        h, k = rng.uniform(-3, 3, 2)
        rho = rng.uniform(-0.99, 0.99)
        ref = stats.multivariate_normal([0, 0], [[1, rho], [rho, 1]]).cdf([h, k])
        assert abs(analytic.bivariate_norm_cdf(h, k, rho) - ref) < 1e-6


def test_black_scholes_and_stulz_against_quantlib(rng):
    today = ql.Date(2, 1, 2024)
    ql.Settings.instance().evaluationDate = today
    for _ in range(5):
        S1, S2, K = rng.uniform(80, 120, 3)
        s1, s2 = rng.uniform(0.1, 0.5, 2)
        q1, q2, r = rng.uniform(0, 0.08, 3)
        rho = rng.uniform(-0.8, 0.8)
        days = int(rng.integers(30, 1500))
        T = days / 365.0
        mat = today + days
        p1, p2 = _ql_process(S1, r, q1, s1, today), _ql_process(S2, r, q2, s2, today)
        for kind, qk in (("call", ql.Option.Call), ("put", ql.Option.Put)):
            opt = ql.VanillaOption(ql.PlainVanillaPayoff(qk, K), ql.EuropeanExercise(mat))
            opt.setPricingEngine(ql.AnalyticEuropeanEngine(p1))
            assert abs(analytic.black_scholes(S1, K, T, r, q1, s1, kind) - opt.NPV()) < 1e-9 * K
        m = BlackScholes(spot=[S1, S2], vol=[s1, s2], dividend=[q1, q2], rate=r, correlation=rho)
        for und, Pay in (("max", ql.MaxBasketPayoff), ("min", ql.MinBasketPayoff)):
            for kind, qk in (("call", ql.Option.Call), ("put", ql.Option.Put)):
                bo = ql.BasketOption(Pay(ql.PlainVanillaPayoff(qk, K)), ql.EuropeanExercise(mat))
                bo.setPricingEngine(ql.StulzEngine(p1, p2, rho))
                c = Contract(style="european", payoff=kind, underlying=und, strike=K, maturity=T)
                assert abs(analytic.closed_form_price(c, m) - bo.NPV()) < 1e-6 * K, (und, kind)
