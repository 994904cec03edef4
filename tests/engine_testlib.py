"""Checks of the engine shared by the CPU tests and their GPU twins in ``tests/gpu`` (``xp`` numpy or cupy), kept
out of the test modules so that a GPU test does not import one that needs QuantLib (which the GPU machine lacks)."""

from __future__ import annotations

import numpy as np

from cva.engine import basis
from cva.engine.lsm import longstaff_schwartz


def grouped_lsm_against_alone(xp, dtype, name, payoff_regressor, splits):
    """Two groups of path sets on assets of spots 100 and 40 in one call, each with its own basis scale, give
    each group's coefficients, values and parts bitwise as the group's own call (the stacks of
    :mod:`cva.engine.nested`)."""
    gen = np.random.default_rng(20261128)
    spots, strikes, times = np.array([100.0, 40.0]), [105.0, 38.0], np.array([0.25, 0.5, 0.75, 1.0])
    z = gen.standard_normal((2, 6, 64, 4))
    S = spots[:, None, None, None] * np.exp(np.cumsum(0.25 * np.sqrt(0.25) * z - 0.25 ** 3 / 2, axis=-1))
    S = xp.asarray(S[..., None].reshape(12, 64, 4, 1).astype(dtype))
    K = xp.asarray(np.repeat(strikes, 6).astype(dtype))[:, None]

    def payoff(X, k=K):
        return xp.maximum((k if X.ndim == 3 else k[:, :, None]) - X[..., 0], 0)

    def host(a):
        return a if xp is np else xp.asnumpy(a)

    grouped = basis.make_basis(name, spots[:, None], payoff_regressor)
    together = longstaff_schwartz(S, times, payoff, grouped, 0.03, splits=splits)
    for i in range(2):
        rows = slice(6 * i, 6 * i + 6)
        alone = longstaff_schwartz(S[rows], times, lambda X, k=K[rows]: payoff(X, k),
                                   basis.make_basis(name, spots[i:i + 1], payoff_regressor), 0.03, splits=splits)
        for a, b in zip(together.coefficients, alone.coefficients, strict=True):
            np.testing.assert_array_equal(host(a)[rows], host(b))
        for a, b in zip([together.value] + together.parts, [alone.value] + alone.parts, strict=True):
            np.testing.assert_array_equal(host(a)[rows], host(b))


def black_scholes_columns_against_each_contract(xp, dtype):
    """:func:`black_scholes_columns` (the engine's Black-Scholes prices of a date's European contracts in one batch)
    column by column bitwise :func:`black_scholes_array` of its contract, calls and puts, one with no vol left; and
    within float rounding of the scalar closed form."""
    from cva.instruments.analytic import black_scholes, black_scholes_array, black_scholes_columns

    gen = np.random.default_rng(20261128)
    S = gen.uniform(40, 160, (500, 5)).astype(dtype)
    K, tau, q = [100.0, 55.5, 80.0, 120.0, 99.0], [0.5, 1.25, 0.02, 2.0, 0.75], [0.01, 0.0, 0.02, 0.0, 0.03]
    sigma, call = [0.2, 0.35, 0.15, 0.25, 0.0], [True, False, True, False, True]
    P = black_scholes_columns(xp.asarray(S), K, tau, 0.03, q, sigma, call)
    P = P if xp is np else xp.asnumpy(P)
    for j in range(5):
        one = black_scholes_array(xp.asarray(S[:, j].copy()), K[j], tau[j], 0.03, q[j], sigma[j],
                                  "call" if call[j] else "put")
        np.testing.assert_array_equal(P[:, j], one if xp is np else xp.asnumpy(one))
        ref = [black_scholes(float(s), K[j], tau[j], 0.03, q[j], sigma[j], "call" if call[j] else "put")
               for s in S[:200, j]]
        np.testing.assert_allclose(P[:200, j], ref, rtol=50 * np.finfo(dtype).eps, atol=50 * np.finfo(dtype).eps * 100)


def stopped_cashflows_against_lsm(xp, dtype, name, splits, regression_dtype=None, vanilla=False):
    """:func:`stopped_cashflows` at a Longstaff-Schwartz call's own exercise dates (``keep_stopping``) gives the
    call's values, parts and cashflows bit for bit (two groups with their own basis scales, as the engine's
    stacks); on paths of a bumped spot (the same normals) each path's cashflow is the discounted payoff at its
    kept date, computed per path in float64. With ``vanilla`` the puts are declared as such (the GPU's kernel)."""
    from cva.engine.lsm import stopped_cashflows

    gen = np.random.default_rng(20261129)
    spots, strikes, times, r = np.array([100.0, 40.0]), [105.0, 38.0], np.array([0.25, 0.5, 0.75, 1.0]), 0.03
    growth = np.exp(np.cumsum(0.25 * np.sqrt(0.25) * gen.standard_normal((2, 6, 64, 4)) - 0.25 ** 3 / 2, axis=-1))

    def paths(bump):
        S = (spots * bump)[:, None, None, None] * growth
        return xp.asarray(S[..., None].reshape(12, 64, 4, 1).astype(dtype))

    K = xp.asarray(np.repeat(strikes, 6).astype(dtype))[:, None]

    def payoff(X):
        return xp.maximum((K if X.ndim == 3 else K[:, :, None]) - X[..., 0], 0)

    def host(a):
        return a if xp is np else xp.asnumpy(a)

    S = paths(1.0)
    psi = basis.make_basis(name, spots[:, None])
    res = longstaff_schwartz(S, times, payoff, psi, r, t0=0.1, splits=splits, keep_stopping=True,
                             regression_dtype=regression_dtype)
    assert len(res.stopping) == splits + 1
    kw = {"regression_dtype": regression_dtype,
          "vanilla": (np.repeat(strikes, 6), np.zeros(12, dtype=bool)) if vanilla else None}
    again = stopped_cashflows(S, times, res.stopping, payoff, r, t0=0.1, **kw)
    for a, b in zip([res.value, res.stderr, res.cashflow] + res.parts,
                    [again.value, again.stderr, again.cashflow] + again.parts, strict=True):
        np.testing.assert_array_equal(host(a), host(b))
    bumped = paths(1.01)
    moved = stopped_cashflows(bumped, times, res.stopping, payoff, r, t0=0.1, **kw)
    tau = host(res.stopping[0]).astype(int)                                            # (12, 64)
    Sb = host(bumped)[..., 0].astype(np.float64)
    at = np.take_along_axis(Sb, tau[..., None], axis=2)[..., 0]
    ref = np.maximum(np.repeat(strikes, 6)[:, None] - at, 0) * np.exp(-r * (times[tau] - 0.1))
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(host(moved.cashflow), ref, rtol=20 * eps, atol=20 * eps * 100)
    assert np.any(tau < len(times) - 1) and np.any(tau == len(times) - 1)          # early and late exercises


def bumped_desk(outer=200, inner=16):
    """Two counterparties: Bermudan puts on two assets netted, a basket put with a weight of 0 and a European call
    under a CSA, our own credit (bilateral weights), a credit curve from CDS spreads and a vol below its bump."""
    market = {"spot": [100.0, 90.0, 80.0], "vol": [0.2, 0.3, 0.005], "rate": 0.03, "correlation": 0.3}
    put = {"style": "bermudan", "payoff": "put", "strike": 100.0, "maturity": 1.0, "exercise_dates": 4}
    cps = [{"name": "A", "recovery": 0.4, "cds_spreads": {1: 0.01, 2: 0.015},
            "netting_sets": [{"name": "a1", "portfolio": [{**put, "underlying": {"asset": 0}},
                                                          {**put, "underlying": {"asset": 1}, "strike": 90.0,
                                                           "quantity": -1.0}]},
                             {"name": "a2", "csa": {"threshold": 1.0, "margin_period_of_risk": "10d"},
                              "portfolio": [{**put, "underlying": "basket", "weights": [1.0, 1.0, 0.0],
                                             "strike": 90.0, "quantity": 2.0},
                                            {"style": "european", "payoff": "call", "underlying": {"asset": 2},
                                             "strike": 80.0, "maturity": 1.0}]}]},
           {"name": "B", "recovery": 0.3, "hazard_rate": 0.03,
            "netting_sets": [{"name": "b", "portfolio": [{**put, "underlying": {"asset": 1}, "quantity": 3.0}]}]}]
    return {"run": {"name": "d", "seed": 3, "backend": "cpu"}, "market": market, "counterparties": cps,
            "own_credit": {"recovery": 0.4, "hazard_rate": 0.01},
            "simulation": {"dates": 4, "outer_paths": outer, "inner_paths": inner}}


def kept_exercise_dates_give_the_base_cube(xp):
    """A chunk of :func:`bumped_desk` valued again with the base's kept inner exercise dates and no bump
    (``exercise_policy: base``) is the base's value cube bit for bit, for every trade and for a subset stacked in
    another order, on one chunk and on two."""
    from cva.engine.nested import DateStats, chunk_values
    from cva.engine.plan import build_plan
    from cva.io.config import load_config
    from cva.market.model import BlackScholes
    from cva.xva.sensitivities import _subplan

    cfg = load_config({**bumped_desk(outer=24, inner=16), "sensitivities": {"spot": 0.01}})
    plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)
    assert plan.keeps_exercise_times and any(not c.is_european for c in plan.contracts)
    every, some = list(range(len(plan.contracts))), [4, 1, 2]          # 4 and 1 stacked, in another order

    def aggregate(V, revalue):
        return xp.concatenate([V, revalue(plan, model, every), revalue(_subplan(plan, some), model, some)], axis=2)

    for l0, Lc in ((0, 24), (5, 7)):
        out = chunk_values(cfg, plan, model, xp, l0, Lc, DateStats(len(plan.grid)), None, splits=2,
                           aggregate=aggregate)
        C = len(every)
        np.testing.assert_array_equal(out[:, :, C:2 * C], out[:, :, :C])
        np.testing.assert_array_equal(out[:, :, 2 * C:], out[:, :, some])
        assert np.all(np.isfinite(out)) and np.any(out[:, :, 0] != 0)
