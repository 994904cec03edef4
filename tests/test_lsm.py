"""Longstaff-Schwartz against independent references: QuantLib's finite-difference Bermudan
put (Longstaff & Schwartz 2001, Table 1 cases), Andersen & Broadie's 5-asset max call, and
per-set least squares by LAPACK for the batched regressions."""

import gc
import math
import warnings
import weakref

import numpy as np
import pytest
from engine_testlib import grouped_lsm_against_alone, stopped_cashflows_against_lsm

from cva.engine import basis
from cva.engine import lsm as lsm_module
from cva.engine.lsm import (
    _affine_fitted,
    _gram_normal_equations,
    _normal_equations,
    _parts,
    _split_normal_equations,
    apply_policy,
    longstaff_schwartz,
    report_summary,
)
from cva.instruments.products import Contract
from cva.market.model import BlackScholes

ql = pytest.importorskip("QuantLib")


def ql_bermudan_put(S, K, r, sigma, T, n_dates):
    """QuantLib's FD Black-Scholes engine with Bermudan exercise on n_dates dates of (0, T] (days rounded)."""
    today = ql.Date(2, 1, 2024)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    days = round(365 * T)
    dates = sorted({today + round(days * (i + 1) / n_dates) for i in range(n_dates)})
    proc = ql.BlackScholesMertonProcess(ql.QuoteHandle(ql.SimpleQuote(S)),
                                        ql.YieldTermStructureHandle(ql.FlatForward(today, 0.0, dc)),
                                        ql.YieldTermStructureHandle(ql.FlatForward(today, r, dc)),
                                        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(),
                                                                                           sigma, dc)))
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Put, K), ql.BermudanExercise(dates))
    opt.setPricingEngine(ql.FdBlackScholesVanillaEngine(proc, 800, 800))
    return opt.NPV()


def lsm_price(model, contract, z, name="laguerre", payoff_regressor=False, solver=None, regression_dtype=None):
    times = contract.exercise_times()
    S = model.paths(model.spot, np.concatenate([[0.0], times]), z)[None]        # (1, M, N, d)

    def psi(X, h):
        return basis.evaluate(name, X, model.spot, h if payoff_regressor else None,
                              order_statistics=contract.symmetric_in_assets)

    res = longstaff_schwartz(S, times, contract.payoff_value, psi, model.rate, solver=solver,
                             regression_dtype=regression_dtype)
    return res, S, psi


@pytest.mark.parametrize("S0,sigma,T", [(36, 0.2, 1), (40, 0.4, 1), (44, 0.2, 2)])
def test_bermudan_put_against_quantlib_fd(rng, S0, sigma, T):
    K, r, n = 40.0, 0.06, 50 * T
    model = BlackScholes(spot=[S0], vol=sigma, dividend=0.0, rate=r, correlation=0.0)
    put = Contract(style="bermudan", payoff="put", underlying="asset", asset=0, strike=K, maturity=T, n_exercise=n)
    res, _, psi = lsm_price(model, put, rng.standard_normal((100_000, n, 1)))
    ref = ql_bermudan_put(S0, K, r, sigma, T, n)
    price, se = float(res.value[0]), float(res.stderr[0])
    assert abs(price - ref) < 3 * se + 0.02, (price, se, ref)
    # the policy on independent paths is low-biased: below the reference up to noise, and close to it
    S2 = model.paths(model.spot, np.concatenate([[0.0], put.exercise_times()]), rng.standard_normal((100_000, n, 1)))
    cash = apply_policy(S2[None], put.exercise_times(), res.coefficients, put.payoff_value, psi, r)
    low, low_se = float(cash.mean()), float(cash.std() / math.sqrt(cash.size))
    # (4.5 low_se: a false failure 3.4e-6 of the runs; 3 low_se was 1.3e-3)
    assert low < ref + 4.5 * low_se and abs(low - ref) < 4.5 * low_se + 0.05, (low, low_se, ref)


def test_andersen_broadie_max_call(rng):
    model = BlackScholes(spot=np.full(5, 100.0), vol=0.2, dividend=0.1, rate=0.05, correlation=0.0)
    call = Contract(style="bermudan", payoff="call", underlying="max", strike=100.0, maturity=3.0, n_exercise=9)
    res, _, _ = lsm_price(model, call, rng.standard_normal((1 << 19, 9, 5)), name="quadratic")
    assert basis.basis_size("quadratic", 5) == 21
    assert abs(float(res.value[0]) - 26.15) < 0.15, (res.value, res.stderr)


def test_batched_regressions_match_per_set_least_squares(rng):
    """Each of B path sets gets its own regression: the coefficients at the last-but-one date
    equal LAPACK least squares on that set's in-the-money paths."""
    B, M, n = 6, 4000, 4
    model = BlackScholes(spot=[1.0, 1.2], vol=[0.25, 0.3], dividend=0.0, rate=0.05, correlation=0.3)
    put = Contract(style="bermudan", payoff="put", underlying="basket", strike=1.1, maturity=1.0, n_exercise=n)
    times = put.exercise_times()
    start = rng.uniform(0.8, 1.3, (B, 1, 2))
    S = model.paths(start, np.concatenate([[0.0], times]), rng.standard_normal((B, M, n, 2)))  # (B, M, n, 2)

    def psi(X, h):
        return basis.evaluate("quadratic", X, model.spot)

    res = longstaff_schwartz(S, times, put.payoff_value, psi, model.rate, solver={"method": "auto"})
    disc = math.exp(-model.rate * (times[-1] - times[-2]))
    for bi in range(B):
        h = put.payoff_value(S[bi, :, -2])
        itm = h > 0
        X = psi(S[bi, itm, -2], None)
        y = put.payoff_value(S[bi, itm, -1]) * disc
        beta = np.linalg.lstsq(X, y, rcond=None)[0]
        np.testing.assert_allclose(res.coefficients[-1][bi], beta, rtol=1e-7, atol=1e-9)
        one = longstaff_schwartz(S[bi:bi + 1], times, put.payoff_value, psi, model.rate, solver={"method": "auto"})
        np.testing.assert_allclose(one.value[0], res.value[bi], rtol=1e-12)
    rows = report_summary(res.reports)
    assert len(rows) == n - 1 and all(r["systems"] == B and r["failed"] == 0 for r in rows)


@pytest.mark.parametrize("payoff_regressor", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("one_scale", [False, True])
@pytest.mark.parametrize("splits", [0, 2])
def test_gram_normal_equations_match_the_formed_basis(rng, payoff_regressor, masked, one_scale, splits):
    """The affine basis's normal equations and fitted values from the strided slice S[:, :, j] (the GPU
    path's algebra, here on numpy) equal those of the formed psi, in psi's order and scale, for the whole sets
    and each depth's equal parts (each depth with its own cashflows); a set or part with no path in the money
    gets A = I, b = 0 in both."""
    B, M, N, d = 4, 300 if splits == 0 else 320, 3, 3
    S = rng.uniform(50.0, 150.0, (B, M, N, d))
    scale = np.full(d, 97.0) if one_scale else rng.uniform(80.0, 120.0, d)
    psi = basis.make_basis("linear", scale, payoff_regressor)
    assert psi.affine and not basis.make_basis("linear", scale, order_statistics=True).affine
    Sj = S[:, :, 1]                                                    # strided rows, as the LSM passes them
    h = np.maximum(100.0 - Sj.mean(axis=-1), 0)
    h[0] = 0.0                                                         # set 0: no path in the money
    h[1, :M // 4] = 0.0                                                # set 1: its first quarter neither
    Vs = [rng.standard_normal((B, M)) for _ in range(splits + 1)]
    mask = h > 0 if masked else None
    As, bs = _gram_normal_equations(np, Sj, psi, h, Vs, mask)
    X = psi(Sj, h)
    betas = []
    for depth, (A, b) in enumerate(zip(As, bs, strict=True)):
        n = 2 ** depth
        A_ref, b_ref = _normal_equations(np, _parts(X, n), _parts(Vs[depth], n),
                                         None if mask is None else _parts(mask, n))
        np.testing.assert_allclose(A, A_ref, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(b, b_ref, rtol=1e-13, atol=1e-15)
        betas.append(rng.standard_normal((B * n, A.shape[1])))
    for depth, C in enumerate(_affine_fitted(Sj, psi, h, betas)):
        Xp, beta = _parts(X, 2 ** depth), betas[depth]
        ref = (Xp @ beta[..., None])[..., 0].reshape(B, M)
        np.testing.assert_allclose(C, ref, atol=1e-13 * (np.abs(Xp) @ np.abs(beta)[..., None]).max())
    formed = _gram_normal_equations(np, X, None, h, Vs, mask)                # psi formed: the same equations
    split = _split_normal_equations(np, X, Vs, mask)                           # and the CPU's
    for got, ref in zip([*formed[0], *formed[1]], [*split[0], *split[1]], strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("payoff_regressor", [False, True])
def test_one_calls_dates_share_their_columns_and_get_the_equations_of_fresh_ones(rng, payoff_regressor):
    """A Longstaff-Schwartz call's dates share one buffer of the normal equations' columns (1[, h / c], V_0 .. V_s),
    the 1 written once: each date's equations are bitwise those from a buffer of its own, and a later call of
    other sizes or dtype with the same cache gets a buffer of its own."""
    B, M, d, splits = 3, 64, 2, 1
    psi = basis.make_basis("linear", rng.uniform(80.0, 120.0, d), payoff_regressor)
    cache = {}
    for dtype, sets in ((np.float64, B), (np.float64, B), (np.float32, B), (np.float64, B + 1)):
        Sj = rng.uniform(50.0, 150.0, (sets, M, d)).astype(dtype)
        h = np.maximum(100.0 - Sj.mean(axis=-1), 0).astype(dtype)
        Vs = [rng.standard_normal((sets, M)).astype(dtype) for _ in range(splits + 1)]
        got = _gram_normal_equations(np, Sj, psi, h, Vs, h > 0, joined=True, cache=cache)
        ref = _gram_normal_equations(np, Sj, psi, h, Vs, h > 0, joined=True, cache={})
        for a, b in zip(got, ref, strict=True):
            assert a.dtype == dtype and np.array_equal(a, b)


def test_one_exercise_date_is_the_discounted_mean_payoff(rng):
    model = BlackScholes(spot=[100.0], vol=0.3, dividend=0.02, rate=0.04, correlation=0.0)
    c = Contract(style="bermudan", payoff="call", underlying="asset", asset=0, strike=95.0, maturity=0.7)
    res, S, _ = lsm_price(model, c, rng.standard_normal((5000, 1, 1)))
    expect = np.maximum(S[0, :, 0, 0] - 95.0, 0).mean() * math.exp(-0.04 * 0.7)
    assert res.reports == [] and abs(float(res.value[0]) - expect) < 1e-12 * expect


def test_set_without_in_the_money_paths_never_exercises(rng):
    """A deep out-of-the-money set has no regression data: beta = 0 and no exercise, no NaN."""
    model = BlackScholes(spot=[1.0], vol=0.01, dividend=0.0, rate=0.0, correlation=0.0)
    put = Contract(style="bermudan", payoff="put", underlying="asset", asset=0, strike=0.5, maturity=1.0, n_exercise=3)
    res, _, _ = lsm_price(model, put, rng.standard_normal((500, 3, 1)))
    assert float(res.value[0]) == 0.0 and all(np.all(c == 0) for c in res.coefficients)


def test_float32_matches_float64(rng):
    model = BlackScholes(spot=[36.0], vol=0.2, dividend=0.0, rate=0.06, correlation=0.0)
    put = Contract(style="bermudan", payoff="put", underlying="asset", asset=0, strike=40.0, maturity=1.0,
                   n_exercise=10)
    z = rng.standard_normal((20_000, 10, 1))
    # the linear basis (Gram condition 3e2-1.3e3): with the Laguerre basis (4e9-2e11, beyond 1 / eps32)
    # the float32 regressions are numerically singular, the two exercise policies differ and the prices
    # with them by more than the sampling error of either (0.27 % of the seeds; e.g. 16000004)
    r64, _, _ = lsm_price(model, put, z, name="linear")
    r32, _, _ = lsm_price(model, put, z.astype(np.float32), name="linear")
    assert r32.value.dtype == np.float32
    assert abs(float(r32.value[0]) - float(r64.value[0])) < 3 * float(r64.stderr[0])


def _methods(res):
    mix = {}
    for rep in res.reports:
        for k, v in rep.counts().items():
            mix[k] = mix.get(k, 0) + v
    return mix


def test_float32_paths_with_float64_regressions(rng):
    """The Laguerre basis on float32 paths with the regressions in float64 (``regression_dtype``; the
    config's ``regression.dtype: auto``): every date solved by LDL^T, and the price and the policy those
    of float64 paths on the same normals, where float32 regressions fall back to the truncated eigen-solve
    (the test_float32_matches_float64 case above)."""
    model = BlackScholes(spot=[36.0], vol=0.2, dividend=0.0, rate=0.06, correlation=0.0)
    put = Contract(style="bermudan", payoff="put", underlying="asset", asset=0, strike=40.0, maturity=1.0,
                   n_exercise=50)
    z = rng.standard_normal((1 << 15, 50, 1))
    r64, S64, psi = lsm_price(model, put, z)
    r32, S32, _ = lsm_price(model, put, z.astype(np.float32), regression_dtype=np.float64)
    r32s, _, _ = lsm_price(model, put, z.astype(np.float32))
    assert _methods(r32s)["eig_truncate"] > 0                     # float32 cannot hold these regressions
    assert _methods(r32)["ldlt"] == _methods(r64)["ldlt"] == 49
    assert r32.value.dtype == np.float32 and all(c.dtype == np.float64 for c in r32.coefficients)
    se = float(r64.stderr[0])
    # LSM is chaotic in its inputs (README): over 240 seeds the float32 paths moved the price by 0.044 se
    # on average, 0.23 se at most
    assert abs(float(r32.value[0]) - float(r64.value[0])) < 0.4 * se
    # the policy applied to the float32 paths evaluates psi in the coefficients' dtype (as the LSM did)
    times = put.exercise_times()
    cash = apply_policy(S32, times, r32.coefficients, put.payoff_value, psi, model.rate)
    assert cash.dtype == np.float32
    np.testing.assert_allclose(cash, r32.cashflow, rtol=1e-6, atol=1e-5)


def test_regression_dtype_policy():
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert basis.regression_dtype("auto", "float32", "laguerre") == f64
    assert basis.regression_dtype("auto", "float32", "linear") == f32
    assert basis.regression_dtype("auto", "float32", "quadratic") == f32
    assert basis.regression_dtype("auto", "float64", "linear") == f64
    assert basis.regression_dtype("run", "float32", "laguerre") == f32
    assert basis.regression_dtype("float64", "float32", "linear") == f64
    with pytest.raises(ValueError, match="regression dtype"):
        basis.regression_dtype("float16", "float32", "linear")
    S = np.ones((1, 4, 2, 1))
    for bad in ("float16", np.int64):
        with pytest.raises(ValueError, match="regression_dtype"):
            longstaff_schwartz(S, [0.5, 1.0], lambda x: x[..., 0], lambda x, h: x, 0.0, regression_dtype=bad)


def test_condition_sample_is_timed_apart_from_the_solve(rng, monkeypatch):
    """The condition numbers (eigenvalues of the first regression matrices) are booked in the
    "conditions" stage, not in "solve": a slowed eigvalsh shows there and only there, once (one call for the
    matrices of every date)."""
    model = BlackScholes(spot=[36.0], vol=0.2, dividend=0.0, rate=0.06, correlation=0.0)
    put = Contract(style="bermudan", payoff="put", underlying="asset", asset=0, strike=40.0, maturity=1.0,
                   n_exercise=4)
    times = put.exercise_times()
    S = model.paths(model.spot, np.concatenate([[0.0], times]), rng.standard_normal((2000, 4, 1)))
    S = S.reshape(8, 250, *S.shape[1:])                                            # 8 regression sets
    psi = basis.make_basis("linear", model.spot)
    eigvalsh, pause, clock = np.linalg.eigvalsh, 0.2, [0.0]

    def slow_eigvalsh(a):                       # the only thing that moves the (fake) clock: no wall time
        clock[0] += pause
        return eigvalsh(a)

    monkeypatch.setattr(np.linalg, "eigvalsh", slow_eigvalsh)
    monkeypatch.setattr(lsm_module.time, "perf_counter", lambda: clock[0])
    timings = {}
    res = longstaff_schwartz(S, times, put.payoff_value, psi, model.rate, timings=timings, condition_sample=8)
    assert all(c.shape == (8,) for c in res.conditions)
    assert timings["conditions"] == pytest.approx(pause)
    assert timings["solve"] == 0 and timings["assembly"] == 0


def test_condition_of_a_singular_regression_is_inf_without_a_warning():
    """A regression matrix with a zero eigenvalue (a regressor that is zero on every path, e.g. the payoff
    column without itm_only where no path is in the money) has condition inf, without numpy's warning."""
    model = BlackScholes(spot=[100.0], vol=0.2, dividend=0.0, rate=0.03, correlation=0.0)
    put = Contract(style="bermudan", payoff="put", underlying="asset", asset=0, strike=1.0, maturity=1.0,
                   n_exercise=3)
    times = put.exercise_times()
    S = model.sample(np.concatenate([[0.0], times]), 64, seed=1, purpose="price", outer=(0, 2))  # (2, 64, 3, 1)
    psi = basis.make_basis("linear", model.spot, payoff_regressor=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = longstaff_schwartz(S, times, put.payoff_value, psi, model.rate, itm_only=False, condition_sample=2)
    assert all(np.isinf(c).all() for c in res.conditions[:-1] if c is not None)
    assert res.conditions[0].shape == (2,)


@pytest.mark.parametrize("affine_basis", ["quadratic", "linear"])
def test_split_parts_are_the_parts_priced_alone(affine_basis):
    """longstaff_schwartz(splits=2): each part's value is that of the part priced on its own (the Gram
    matrices of the finest parts averaged for the coarser ones: equal up to rounding)."""
    from cva.engine.basis import make_basis
    from cva.engine.lsm import longstaff_schwartz
    from cva.market.model import BlackScholes

    m = BlackScholes(spot=[100.0, 90.0], vol=[0.2, 0.3], dividend=[0.0, 0.0], rate=0.03, correlation=0.4)
    times = np.array([0.25, 0.5, 0.75, 1.0])
    S = m.sample(np.concatenate([[0.0], times]), 64, seed=4, purpose="inner", outer=(0, 6))   # (6, 64, 4, 2)
    payoff = Contract("bermudan", "put", "basket", 100.0, 1.0, weights=(1.0, 1.0), n_exercise=4).payoff_value
    psi = make_basis(affine_basis, m.spot, False, True)
    res = longstaff_schwartz(S, times, payoff, psi, m.rate, splits=2)
    whole = longstaff_schwartz(S, times, payoff, psi, m.rate)
    np.testing.assert_allclose(res.value, whole.value, rtol=1e-12)
    for depth, parts in enumerate(res.parts, start=1):
        n = 2 ** depth
        alone = longstaff_schwartz(S.reshape((6 * n, 64 // n) + S.shape[2:]), times, payoff, psi, m.rate)
        np.testing.assert_allclose(parts, alone.value.reshape(6, n), rtol=1e-12)


def test_concat_gram_numpy_twin_and_its_checks(rng):
    """linalg_gpu.strided.concat_gram on numpy: the weighted Gram matrices of the rows (s, f) against einsum in
    float64, its first rows alone, and one-line errors for operands of the wrong shape or an impossible row count."""
    from linalg_gpu import strided

    s = rng.standard_normal((3, 50, 4, 5))[:, :, 2]                   # a date's strided slice
    f = rng.standard_normal((3, 50, 2))
    w = (rng.uniform(size=(3, 50)) < 0.5).astype(float)
    z = np.concatenate([s, f], axis=2)
    ref = np.einsum("bm,bmi,bmj->bij", w, z, z) * 0.5
    np.testing.assert_allclose(strided.concat_gram(s, f, w, alpha=0.5), ref, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(strided.concat_gram(s, f, w, alpha=0.5, rows=5), ref[:, :5], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(strided.concat_gram(s), np.einsum("bmi,bmj->bij", s, s), rtol=1e-13, atol=1e-13)
    with pytest.raises(ValueError, match="f must have shape"):
        strided.concat_gram(s, f[:, :10])
    with pytest.raises(ValueError, match="weights must have shape"):
        strided.concat_gram(s, f, w[:2])
    with pytest.raises(ValueError, match="rows must be in 1 .. 7"):
        strided.concat_gram(s, f, rows=8)
    with pytest.raises(ValueError, match="s must be a float32 or float64 array"):
        strided.concat_gram(s.astype(int))



@pytest.mark.parametrize("name, payoff_regressor", [("linear", False), ("linear", True), ("quadratic", True)])
@pytest.mark.parametrize("splits", [0, 1])
def test_a_scale_per_group_is_each_groups_own_basis(name, payoff_regressor, splits):
    grouped_lsm_against_alone(np, np.float64, name, payoff_regressor, splits)


@pytest.mark.parametrize("dtype, regression_dtype", [(np.float64, None), (np.float32, None),
                                                     (np.float32, np.float64)])
@pytest.mark.parametrize("name, splits", [("linear", 0), ("linear", 2), ("quadratic", 1)])
def test_stopped_cashflows_at_the_lsm_exercise_dates(dtype, regression_dtype, name, splits):
    stopped_cashflows_against_lsm(np, dtype, name, splits, regression_dtype)


def test_stopped_cashflows_checks_the_dates_shape():
    from cva.engine.lsm import stopped_cashflows

    S = np.ones((2, 8, 3, 1))
    with pytest.raises(ValueError, match="stopping must hold"):
        stopped_cashflows(S, [0.1, 0.2, 0.3], [np.zeros((2, 4), dtype=np.uint8)], lambda X: X[..., 0], 0.0)


@pytest.mark.parametrize("col, date", [(0, "0.25"), (1, "0.5"), (2, "0.75")])
def test_non_finite_regression_input_is_one_error_naming_the_date(rng, col, date):
    """A NaN in one path at one exercise date makes that date's normal equations non-finite: the call raises one
    ValueError naming the date (the solver's input is checked at the end of the call, with the exercise shares),
    not NaN prices."""
    model = BlackScholes(spot=[36.0], vol=0.2, dividend=0.0, rate=0.06, correlation=0.0)
    put = Contract(style="bermudan", payoff="put", underlying="asset", asset=0, strike=40.0, maturity=1.0,
                   n_exercise=4)
    times = put.exercise_times()                                                    # 0.25, 0.5, 0.75, 1
    S = model.paths(model.spot, np.concatenate([[0.0], times]), rng.standard_normal((2000, 4, 1)))[None]
    S[0, 7, col, 0] = np.nan
    psi = basis.make_basis("linear", model.spot)
    with pytest.raises(ValueError, match=rf"exercise date {date} has non-finite normal equations") as err:
        longstaff_schwartz(S, times, put.payoff_value, psi, model.rate)
    assert "\n" not in str(err.value)


def test_deferred_calls_read_their_flags_at_once(rng):
    """Calls with ``deferred`` leave their exercise shares, condition numbers and non-finite checks to one read
    (Deferred.read) and book their stage times on the caller's clock: the same shares and condition numbers, bit for
    bit, as calls that read them themselves; the first call with non-finite normal equations raises at the read,
    naming its date, and a later bad call does not mask it."""
    from cva.engine.lsm import Deferred, StageClock

    model = BlackScholes(spot=[36.0], vol=0.2, dividend=0.0, rate=0.06, correlation=0.0)
    put = Contract(style="bermudan", payoff="put", underlying="asset", asset=0, strike=40.0, maturity=1.0,
                   n_exercise=4)
    times = put.exercise_times()
    psi = basis.make_basis("linear", model.spot)
    paths = [model.paths(model.spot, np.concatenate([[0.0], times]), rng.standard_normal((2000, 4, 1)))
             .reshape(4, 500, 4, 1) for _ in range(2)]
    alone = [longstaff_schwartz(S, times, put.payoff_value, psi, model.rate, condition_sample=3) for S in paths]
    timings = {}
    deferred = Deferred(StageClock(np, timings))
    later = [longstaff_schwartz(S, times, put.payoff_value, psi, model.rate, condition_sample=3, deferred=deferred)
             for S in paths]
    assert all(r.exercised is None for r in later)                                   # nothing read yet
    dropped = weakref.ref(longstaff_schwartz(paths[0], times, put.payoff_value, psi, model.rate, deferred=deferred))
    gc.collect()
    assert dropped() is None                     # a deferred call keeps no result alive (its cashflows, reports)
    assert timings["solve"] > 0 and timings["assembly"] > 0                  # on the caller's clock (the CPU's: now)
    deferred.read()
    assert deferred.calls == []
    for a, b in zip(alone, later, strict=True):
        np.testing.assert_array_equal(a.exercised, b.exercised)
        np.testing.assert_array_equal(a.value, b.value)
        for ca, cb in zip(a.conditions, b.conditions, strict=True):
            np.testing.assert_array_equal(ca, cb)
            assert cb.shape == (3,) and np.isfinite(cb).all()
    bad = [S.copy() for S in paths]
    bad[0][0, 7, 1, 0] = np.nan                                                     # the first call's date 0.5
    bad[1][0, 7, 0, 0] = np.nan                                                     # the second's 0.25
    for S in bad:
        longstaff_schwartz(S, times, put.payoff_value, psi, model.rate, deferred=deferred)   # (no error yet)
    with pytest.raises(ValueError, match=r"exercise date 0.5 has non-finite normal equations"):
        deferred.read()


@pytest.mark.parametrize("payoff_regressor", [False, True])
def test_affine_exercise_twin_exercises_where_the_payoff_beats_the_fit(rng, payoff_regressor):
    """lsm.affine_exercise_twin (the numpy twin of cuda/affine_exercise.cu) against the formed basis: per depth,
    the paths where the payoff is positive and at least psi(S) beta (its part's beta) take the payoff and date j,
    the others keep theirs, then all are discounted; the decisions returned are depth 0's."""
    from cva.engine.lsm import affine_exercise_twin

    B, M, d, j, depths = 4, 200, 2, 3, 3
    scale = np.array([80.0, 120.0])
    psi = basis.make_basis("linear", scale, payoff_regressor)
    S = rng.uniform(0.5, 1.5, (B, M, d)) * scale
    h = np.maximum(100.0 - S.mean(axis=2), 0)
    p = d + 1 + payoff_regressor
    betas = [rng.normal(0, 5, (B * 2 ** k, p)) + np.r_[15.0, np.zeros(p - 1)] for k in range(depths)]
    V0, stop0 = rng.uniform(0, 30, (B, M)), np.full((B, M), 9, np.uint8)
    V, stop = np.stack([V0] * depths), np.stack([stop0] * depths)
    ex = affine_exercise_twin(S, psi, h, betas, V, stop, j, 0.9)
    X = psi(S, h)                                                                     # (B, M, p) formed
    for k in range(depths):
        part = np.arange(M) // (M // 2 ** k)
        C = np.einsum("bmp,bmp->bm", X, betas[k].reshape(B, 2 ** k, p)[:, part])
        want = (h > 0) & (h >= C)
        assert want.any() and not want.all()
        if k == 0:
            np.testing.assert_array_equal(ex, want)
        np.testing.assert_allclose(V[k], np.where(want, h, V0) * 0.9, rtol=1e-14)
        np.testing.assert_array_equal(stop[k], np.where(want, j, 9))


@pytest.mark.parametrize("splits", [0, 1, 2])
@pytest.mark.parametrize("payoff_regressor", [False, True])
def test_joined_normal_equations_with_a_scale_per_group(rng, splits, payoff_regressor):
    """_gram_normal_equations(joined=True) with a basis scale per group of sets (one-asset contracts stacked across
    assets): the solver's one batch, depth after depth, each part's equations those of its own group's formed basis
    (psi (1, S / scale_g[, h / c_g])), and a part without a path in the money A = I, b = 0."""
    from cva.engine.basis import evaluate

    groups, per, M, d = 3, 2, 64, 1
    B = groups * per
    scale = rng.uniform(50.0, 150.0, (groups, d))
    psi = basis.make_basis("linear", scale, payoff_regressor)
    S = rng.uniform(0.5, 1.5, (B, M, 1)) * np.repeat(scale, per, axis=0)[:, None, :]
    h = np.maximum(np.repeat(scale[:, 0], per)[:, None] - S[..., 0], 0)
    h[1, : M // 2 ** splits] = 0.0                      # set 1's first finest part (all of it at splits 0): none ITM
    Vs = [rng.standard_normal((B, M)) for _ in range(splits + 1)]
    mask = h > 0
    A, b = _gram_normal_equations(np, S, psi, h, Vs, mask, joined=True, cache={})
    p = d + 1 + payoff_regressor
    assert A.shape == (B * (2 ** (splits + 1) - 1), p, p) and b.shape == A.shape[:2]
    X = np.concatenate([evaluate("linear", S[g * per:(g + 1) * per], scale[g], h[g * per:(g + 1) * per]
                                 if payoff_regressor else None, payoff_scale=scale[g].mean()) for g in range(groups)])
    row = 0
    for k in range(splits + 1):
        n = 2 ** k
        A_ref, b_ref = _normal_equations(np, _parts(X, n), _parts(Vs[k], n), _parts(mask, n))
        np.testing.assert_allclose(A[row:row + B * n], A_ref, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(b[row:row + B * n], b_ref, rtol=1e-13, atol=1e-15)
        row += B * n
    empty = ~_parts(mask, 2 ** splits).any(axis=1)                         # the finest parts, the last depth
    assert empty.sum() == 1
    np.testing.assert_array_equal(A[B * (2 ** splits - 1):][empty], np.eye(p)[None])
    np.testing.assert_array_equal(b[B * (2 ** splits - 1):][empty], 0.0)
