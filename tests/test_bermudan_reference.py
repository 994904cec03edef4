"""Tests of the exact Bermudan reference (tests/bermudan_reference.py): the value functions against closed
forms (Black-Scholes for one date, Geske's two-date formula), put-call symmetry and QuantLib's finite
differences; the netting-set values and CVA against the engine where both are exact (European contracts),
its conventions (maturity, short positions, dates between exercise dates) and its common random numbers."""

import math

import mpmath as mp
import numpy as np
import pytest
from bermudan_reference import BermudanBS, bs_price, engine_outer_paths, netting_values, reference_cva
from scipy.optimize import brentq

import cva
from cva.instruments.analytic import black_scholes
from cva.io.config import Simulation

ql = pytest.importorskip("QuantLib")


def _bivariate(a, b, rho):
    """P(X <= a, Y <= b), corr(X, Y) = rho, by mpmath quadrature of phi(x) Phi((b - rho x) / sqrt(1 - rho^2))."""
    s = mp.sqrt(1 - rho * rho)
    return mp.quad(lambda x: mp.npdf(x) * mp.ncdf((b - rho * x) / s), [-mp.inf, a])


def _geske_put(S, K, r, q, v, T):
    """Put exercisable at T/2 and T (Geske 1979, Geske & Johnson 1984): exercise at T/2 below S*, where
    K - S* is the European put on (T/2, T]; the rest is a compound option in the bivariate normal."""
    t1 = T / 2
    s_star = brentq(lambda x: (K - x) - float(bs_price(x, K, T - t1, r, q, v, "put")), 1e-6 * K, K, xtol=1e-14)

    def d1(X, t):
        return (math.log(S / X) + (r - q + 0.5 * v * v) * t) / (v * math.sqrt(t))

    a1, a2 = d1(s_star, t1), d1(K, T)
    b1, b2 = a1 - v * math.sqrt(t1), a2 - v * math.sqrt(T)
    rho = math.sqrt(t1 / T)
    with mp.workdps(30):
        early = K * math.exp(-r * t1) * mp.ncdf(-b1) - S * math.exp(-q * t1) * mp.ncdf(-a1)
        late = K * math.exp(-r * T) * _bivariate(b1, -b2, -rho) - S * math.exp(-q * T) * _bivariate(a1, -a2, -rho)
        return float(early + late)


def _quantlib(S, K, r, q, v, taus, payoff, n_grid):
    """QuantLib's FdBlackScholesVanillaEngine (n_grid time and space steps) for the exercise times ``taus`` from
    now. The times become whole days: every tau is a multiple of the smallest gap, which gets 30 days of
    Actual/365; rate, dividend and variance are rescaled so that r tau, q tau and sigma^2 tau are unchanged."""
    gaps = np.diff(np.concatenate([[0.0], taus]))
    base = float(gaps.min())
    c = 30 / (365.0 * base)                                     # QuantLib years per model year
    today = ql.Date(1, 1, 2020)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    steps = np.rint(np.asarray(taus) / base).astype(int)
    assert np.allclose(steps * base, taus, rtol=0, atol=1e-12)
    dates = [today + int(k) * 30 for k in steps]
    ex = ql.BermudanExercise(dates) if len(dates) > 1 else ql.EuropeanExercise(dates[0])
    kind = ql.Option.Put if payoff == "put" else ql.Option.Call
    option = ql.VanillaOption(ql.PlainVanillaPayoff(kind, K), ex)
    process = ql.BlackScholesMertonProcess(
        ql.QuoteHandle(ql.SimpleQuote(S)), ql.YieldTermStructureHandle(ql.FlatForward(today, q / c, dc)),
        ql.YieldTermStructureHandle(ql.FlatForward(today, r / c, dc)),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), v / math.sqrt(c), dc)))
    option.setPricingEngine(ql.FdBlackScholesVanillaEngine(process, n_grid, n_grid))
    return option.NPV()


# (spot, strike, rate, dividend, vol, maturity, exercise dates, payoff)
CASES = {"atm put": (100.0, 100.0, 0.05, 0.0, 0.2, 1.0, 10, "put"),
         "LS2001 put": (36.0, 40.0, 0.06, 0.0, 0.2, 1.0, 50, "put"),
         "vol 0.4 put": (100.0, 100.0, 0.05, 0.0, 0.4, 1.0, 10, "put"),
         "call, dividend": (100.0, 100.0, 0.03, 0.07, 0.3, 1.0, 10, "call")}
_MODELS = {}


def _model(name):
    if name not in _MODELS:
        S0, K, r, q, v, T, n, payoff = CASES[name]
        _MODELS[name] = BermudanBS(K, T, n, r, v, q, payoff, spot=S0)
    return _MODELS[name]


def _check_quantlib(name, t, S):
    """C(t, S) against QuantLib on 1600 and 3200 points. The FD error is second order (measured: it falls 4x
    per doubling), so Richardson's (4 FD_3200 - FD_1600) / 3 is within 1e-7 of the limit (measured: at most
    7e-8 relative on these cases); 3e-7 relative allows for the rest."""
    _, K, r, q, v, _, _, payoff = CASES[name]
    m = _model(name)
    ref = float(m.continuation(t, np.array([S]))[0])
    taus = m.times[m.times > t + 1e-9] - t
    a, b = (_quantlib(S, K, r, q, v, taus, payoff, n) for n in (1600, 3200))
    assert abs(b - ref) <= abs(b - a) + 3e-7 * ref                            # the finer grid: error ~ (b - a) / 3
    assert abs((4 * b - a) / 3 - ref) <= 3e-7 * ref + 1e-9


def test_one_date_is_black_scholes():
    m = BermudanBS(100.0, 2.0, 1, 0.04, 0.3, 0.01, "call")
    S = np.array([50.0, 90.0, 100.0, 130.0, 400.0])
    for t in (0.0, 0.7, 1.9):
        expect = [black_scholes(s, 100.0, 2.0 - t, 0.04, 0.01, 0.3, "call") for s in S]
        np.testing.assert_allclose(m.continuation(t, S), expect, rtol=1e-12)
        np.testing.assert_allclose(m.value(t, S), expect, rtol=1e-12)
    np.testing.assert_array_equal(m.value(2.0, S), np.maximum(S - 100.0, 0.0))
    np.testing.assert_array_equal(m.continuation(2.0, S), 0.0)


def test_two_dates_against_geske():
    """The quadrature step (the first one; the last is Black-Scholes): to 1e-8 relative (measured 3e-9, the
    cubic spline's h^4 error)."""
    m = BermudanBS(100.0, 1.0, 2, 0.05, 0.25, 0.02, "put")
    for S in (80.0, 100.0, 120.0):
        assert float(m.price(S)) == pytest.approx(_geske_put(S, 100.0, 0.05, 0.02, 0.25, 1.0), rel=1e-8)


def test_put_call_symmetry():
    """McDonald & Schroder (1998): call(S, K, r, q) = put(K, S, q, r), exercise date by exercise date."""
    call = BermudanBS(95.0, 1.0, 12, 0.02, 0.35, 0.06, "call", spot=110.0)
    put = BermudanBS(110.0, 1.0, 12, 0.06, 0.35, 0.02, "put", spot=95.0)
    assert float(call.price()) == pytest.approx(float(put.price()), rel=1e-8)
    assert float(call.continuation(0.5, np.array([110.0]))[0]) == pytest.approx(
        float(BermudanBS(110.0, 0.5, 6, 0.06, 0.35, 0.02, "put", spot=95.0).price()), rel=1e-8)


def test_grid_refinement():
    """Halving the grid step changes the price by under 1e-8 relative (the target is 1e-5)."""
    S0, K, r, q, v, T, n, payoff = CASES["atm put"]
    fine = BermudanBS(K, T, n, r, v, q, payoff, spot=S0, points_per_sd=48, nodes=64, width=12.0)
    assert float(fine.price()) == pytest.approx(float(_model("atm put").price()), rel=1e-8)


@pytest.mark.parametrize("name", list(CASES))
def test_price_against_quantlib(name):
    _check_quantlib(name, 0.0, CASES[name][0])


@pytest.mark.parametrize("name, t, S", [("atm put", 0.35, 80.0), ("atm put", 0.35, 120.0), ("atm put", 0.5, 100.0),
                                        ("LS2001 put", 0.5, 40.0), ("vol 0.4 put", 0.9, 80.0),
                                        ("call, dividend", 0.35, 120.0)])
def test_continuation_against_quantlib(name, t, S):
    """C(t, S) between exercise dates and at one: the Bermudan of the remaining dates from S at t."""
    _check_quantlib(name, t, S)


def test_value_at_the_dates():
    m = _model("atm put")
    S = np.linspace(40.0, 160.0, 121)
    t = m.times[3]
    C, h = m.continuation(t, S), m.payoff(S)
    np.testing.assert_array_equal(m.value(t, S), np.where((h > 0) & (h >= C), h, C))
    C_t, V_t = m.at(t)
    np.testing.assert_array_equal(C_t(S), C)
    np.testing.assert_array_equal(V_t(S), m.value(t, S))
    np.testing.assert_array_equal(m.value(0.35, S), m.continuation(0.35, S))
    np.testing.assert_array_equal(m.value(1.0, S), h)
    s_star = m.boundaries(3)
    assert s_star.size == 1 and 60.0 < s_star[0] < 100.0
    assert float(m.continuation(t, s_star)[0]) == pytest.approx(100.0 - s_star[0], rel=1e-9)
    assert np.all(m.value(t, S)[S < s_star[0]] == h[S < s_star[0]]) and np.all(C[S > s_star[0]] > h[S > s_star[0]])


def _config(tmp_path, portfolio, dates=4, outer_paths=64, inner_paths=64, seed=5):
    cfg = {"run": {"name": "ref", "seed": seed, "backend": "cpu"},
           "market": {"spot": 100.0, "vol": 0.25, "rate": 0.04, "dividend": 0.01},
           "portfolio": portfolio, "counterparty": {"recovery": 0.4, "hazard_rate": 0.03},
           "simulation": {"dates": dates, "outer_paths": outer_paths, "inner_paths": inner_paths, "basis": "laguerre"}}
    if "estimator" in Simulation.model_fields:
        cfg["simulation"]["estimator"] = "plain"                  # one level: the outer paths 0 .. L - 1
    if tmp_path is not None:
        cfg["output"] = {"dir": str(tmp_path / "run")}
    return cfg


def test_european_netting_set_matches_the_engine(tmp_path):
    """European contracts are exact in both: the same values and CVA on the same outer paths, a short one
    maturing before the horizon included (its payoff at its maturity, nothing after)."""
    port = [{"style": "european", "payoff": "put", "underlying": {"asset": 0}, "strike": 105.0, "maturity": 1.0},
            {"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 95.0, "maturity": 0.5,
             "quantity": -2.0}]
    cfg = _config(tmp_path, port)
    res = cva.run(cfg, progress=False, log=lambda msg: None)
    ref = reference_cva(cfg)
    np.testing.assert_allclose(ref.values, res.values, rtol=1e-12, atol=1e-12)
    assert ref.cva == pytest.approx(res.cva, rel=1e-12) and ref.stderr == pytest.approx(res.stderr, rel=1e-10)
    S = ref.paths                                                                   # dates 0.25, 0.5, 0.75, 1
    np.testing.assert_allclose(ref.values[:, 1], bs_price(S[:, 1], 105.0, 0.5, 0.04, 0.01, 0.25, "put")
                               - 2.0 * np.maximum(S[:, 1] - 95.0, 0.0), rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(ref.values[:, 3], np.maximum(105.0 - S[:, 3], 0.0))


def test_bermudan_first_date_near_the_engine(tmp_path):
    """On the first exercise date, with 2048 inner paths, the engine's value is the exact one up to its inner
    Monte Carlo error (about 0.1 here, the exact values being 1 to 15)."""
    port = [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 10}]
    cfg = _config(tmp_path, port, dates=10, outer_paths=16, inner_paths=2048)
    res = cva.run(cfg, progress=False, log=lambda msg: None)
    P = netting_values(cfg, engine_outer_paths(cfg))
    assert np.max(np.abs(res.values[:, 0] - P[:, 0])) < 0.5
    assert abs(np.mean(res.values[:, 0] - P[:, 0])) < 0.2


def test_short_positions_and_dates_between_exercise_dates(tmp_path):
    """The exercise is the holder's whatever the sign of the quantity; exposure dates between exercise dates
    carry the continuation value while alive and 0 after exercise."""
    long = {"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 110.0, "maturity": 1.0,
            "exercise_dates": 4}
    cfg_long = _config(tmp_path, [long], dates=6, outer_paths=256)
    cfg_short = _config(tmp_path, [{**long, "quantity": -1.5}], dates=6, outer_paths=256)
    S = engine_outer_paths(cfg_long)
    P_long, P_short = netting_values(cfg_long, S), netting_values(cfg_short, S)
    np.testing.assert_array_equal(P_short, -1.5 * P_long)
    m = BermudanBS(110.0, 1.0, 4, 0.04, 0.25, 0.01, "put", spot=100.0)
    grid = [1 / 6, 1 / 4, 1 / 3, 1 / 2, 2 / 3, 3 / 4, 5 / 6, 1.0]                  # exposure and exercise dates
    done = np.zeros(S.shape[0], dtype=bool)
    k = 0
    for g, t in enumerate(grid):
        expect = np.where(done, 0.0, m.value(t, S[:, g]))
        if g in (1, 3, 5):                                                         # exercise dates before T
            h = m.payoff(S[:, g])
            done |= (h > 0) & (h >= m.continuation(t, S[:, g]))
        if g not in (1, 5):                                                        # exposure dates
            np.testing.assert_allclose(P_long[:, k], expect, rtol=1e-10, atol=1e-12)   # the grid's t: 12 digits
            k += 1
    assert k == 6 and 0 < done.sum() < S.shape[0]


def test_independent_paths_agree():
    """The reference CVA on numpy paths and on the engine's paths agree within their standard errors."""
    port = [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 10}]
    cfg = _config(None, port, dates=10, outer_paths=4000)
    a, b = reference_cva(cfg, "engine"), reference_cva(cfg, "numpy", seed=3)
    assert abs(a.cva - b.cva) < 4.5 * math.hypot(a.stderr, b.stderr)
    assert b.paths.shape == (4000, 10) and a.values.shape == (4000, 10)
