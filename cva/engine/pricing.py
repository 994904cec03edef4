"""``cva price``: the t = 0 price of each contract by Monte Carlo (plain Longstaff-Schwartz).

Every contract is simulated on its own exercise grid from keyed normals (purpose "price"),
so the contracts of one file share their random numbers (common random numbers). European
contracts are the discounted mean payoff and come with their closed form where one exists
(:mod:`cva.instruments.analytic`); Bermudan and American ones use :func:`cva.engine.lsm.longstaff_schwartz`, a
contract on one asset of a market of several regressing on its own asset alone (its price is a function of it),
those of one schedule in one call (bit for bit each alone).
With ``out_of_sample`` the estimated exercise policy is also applied to a second,
independent path set (purpose "price_eval"), a low-biased estimate (LS 2001, section 3).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from cva.backend import resolve_backend
from cva.engine import basis
from cva.engine.lsm import apply_policy, longstaff_schwartz, report_rows, report_summary
from cva.instruments.analytic import closed_form_price
from cva.instruments.products import Contract, stacked_payoff
from cva.io.config import load_config, whole_number
from cva.market.model import BlackScholes
from linalg_gpu._backend import to_host as _host

Z95 = 1.959963984540054
#: The most path values (contracts x paths x exercise dates) of one stacked Longstaff-Schwartz call
STACK_VALUES = 1 << 25


def price(config, backend=None, paths=None, out_of_sample=None) -> pd.DataFrame:
    """Price each contract of ``config`` at t = 0.

    Parameters
    ----------
    config : path to a YAML file, a dict, or a :class:`cva.io.config.Config`.
    backend : "auto" | "cpu" | "gpu", optional (default: ``run.backend`` of the config).
    paths : int, optional (default: ``simulation.pricing_paths``).
    out_of_sample : bool, optional (default: ``simulation.out_of_sample``).

    Returns
    -------
    DataFrame, one row per contract: contract, style, quantity, price, stderr, ci_low, ci_high
    (95%), closed_form (European contracts where one exists, else NaN), value (quantity x
    price) and, with ``out_of_sample``, price_oos and stderr_oos. ``df.attrs`` holds the backend,
    the number of paths, the dtype and that of the regressions, the seed, the time taken and the
    solver summary per contract.
    """
    paths = None if paths is None else whole_number(paths, "paths", 2)
    if out_of_sample is not None and not isinstance(out_of_sample, (bool, np.bool_)):
        raise TypeError(f"out_of_sample must be True or False, got {out_of_sample!r}")
    cfg = load_config(config)
    xp, label = resolve_backend(backend or cfg.run.backend)
    model = BlackScholes.from_market(cfg.market)
    dtype = np.dtype(cfg.run.dtype)
    sim = cfg.simulation
    M = int(sim.pricing_paths if paths is None else paths)
    oos = sim.out_of_sample if out_of_sample is None else bool(out_of_sample)
    solver = {"method": cfg.regression.method, "cond_max": cfg.regression.cond_max, "rtol": cfg.regression.rtol}
    rdt = cfg.regression_dtype()
    t_start = time.perf_counter()
    rows, solver_stats = {}, {}
    contracts = [Contract.from_config(c) for c in cfg.portfolio]
    draw = dict(seed=cfg.run.seed, dtype=dtype, xp=xp, antithetic=sim.antithetic)
    drawn = {}                             # the keyed paths of the last grid: contracts of one schedule share them
    for batch in _batches(contracts, model.d, M):
        first = contracts[batch[0]]
        times = first.exercise_times()
        grid = np.concatenate([[0.0], times])
        if drawn.get("grid") is None or not np.array_equal(drawn["grid"], grid):
            drawn = {"grid": grid, "price": model.sample(grid, M, purpose="price", **draw)}     # (1, M, N, d)
        S = drawn["price"]
        stacked = first.underlying == "asset" and model.d > 1 and not first.is_european
        if stacked:                        # Markov in its own asset: regress on it alone, one call for the batch
            assets = [contracts[i].asset for i in batch]
            payoff = stacked_payoff([contracts[i] for i in batch], 1, xp)
            scale = model.spot[assets][:, None] if len(set(assets)) > 1 else model.spot[assets[0]:assets[0] + 1]
            basis_fn = basis.make_basis(sim.basis, scale, sim.payoff_regressor, False)

            def own(P, assets=assets):     # (B, M, N, 1): each contract's asset's slice of the shared paths
                return xp.concatenate([P[..., a:a + 1] for a in assets])
        else:
            payoff = first.payoff_value
            basis_fn = basis.make_basis(sim.basis, model.spot, sim.payoff_regressor, first.symmetric_in_assets)

            def own(P):
                return P
        if first.is_european:
            cash = first.payoff_value(S[:, :, -1]) * dtype.type(np.exp(-model.rate * first.maturity))
            res = None
        else:
            res = longstaff_schwartz(own(S), times, payoff, basis_fn, model.rate, solver=solver,
                                     itm_only=sim.itm_only, regression_dtype=rdt, exercised_per_set=True)
        cash_oos = None
        if oos and res is not None:
            if "price_eval" not in drawn:
                drawn["price_eval"] = model.sample(grid, M, purpose="price_eval", **draw)
            cash_oos = apply_policy(own(drawn["price_eval"]), times, res.coefficients, payoff, basis_fn, model.rate)
        for pos, i in enumerate(batch):
            contract = contracts[i]
            row = {"contract": contract.name, "style": contract.style, "quantity": contract.quantity}
            if res is not None:
                cash = res.cashflow[pos:pos + 1]
                solver_stats[contract.name] = {
                    "exercised": res.exercised[:, pos].tolist(),
                    "dates": report_summary([rep if rep is None else report_rows(rep, slice(pos, pos + 1))
                                             for rep in res.reports])}
            row.update(_estimate(cash, sim.antithetic))
            cf = closed_form_price(contract, model)
            row["closed_form"] = np.nan if cf is None else cf
            row["value"] = contract.quantity * row["price"]
            if oos:
                if cash_oos is None:
                    row.update(price_oos=row["price"], stderr_oos=row["stderr"])
                else:
                    est = _estimate(cash_oos[pos:pos + 1], sim.antithetic)
                    row.update(price_oos=est["price"], stderr_oos=est["stderr"])
            rows[i] = row
    df = pd.DataFrame([rows[i] for i in range(len(contracts))])
    solver_stats = {c.name: solver_stats[c.name] for c in contracts if c.name in solver_stats}
    df.attrs.update(backend=label, paths=M, dtype=str(dtype), seed=cfg.run.seed, basis=sim.basis,
                    regression_dtype=rdt.name,
                    seconds=time.perf_counter() - t_start, solver=solver_stats)
    return df


def _batches(contracts, d, M):
    """The contracts in the order of their exercise schedules, in batches priced by one call on one schedule's
    paths: on a market of d > 1 assets the Bermudan and American contracts on one asset with the same schedule
    together (each regressed on its own asset with its own basis scale, bit for bit as alone), a batch closed once
    it holds :data:`STACK_VALUES` path values or more; every other contract alone."""
    order = sorted(range(len(contracts)), key=lambda i: tuple(contracts[i].exercise_times()))
    out, open_ = [], {}
    for i in order:
        c = contracts[i]
        if c.underlying == "asset" and d > 1 and not c.is_european:
            key = tuple(c.exercise_times())
            batch = open_.get(key)
            if batch is None or len(batch) * M * len(key) >= STACK_VALUES:
                batch = open_[key] = []
                out.append(batch)
            batch.append(i)
        else:
            out.append([i])
    return out


def _estimate(cash, antithetic=False) -> dict:
    """Mean, standard error and 95% interval of discounted cashflows (1, M); antithetic pairs
    (paths 2i, 2i + 1) are averaged first, since they are not independent."""
    c = _host(cash).astype(np.float64).ravel()
    m = float(c.mean())
    if antithetic and c.size >= 4:
        c = c[: c.size // 2 * 2].reshape(-1, 2).mean(axis=1)
    se = float(c.std(ddof=1) / np.sqrt(c.size))
    return {"price": m, "stderr": se, "ci_low": m - Z95 * se, "ci_high": m + Z95 * se}
