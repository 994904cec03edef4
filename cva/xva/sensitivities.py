"""CVA sensitivities by central differences with common random numbers (Glasserman, "Monte Carlo Methods in
Financial Engineering", section 7.1): each bumped run draws the same keyed streams, so the per-path
differences are small and their standard error is that of the difference, not of two independent runs.
Spot, vol and rate bumps run the engine again; a hazard bump reweights the base run's values."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cva.engine.estimators import combine
from cva.engine.nested import DateStats, Levels
from cva.engine.plan import build_plan
from cva.io.config import load_config
from cva.market.model import BlackScholes
from cva.xva.credit import Counterparty, shifted
from cva.xva.measures import cva_functional


def sensitivities(cfg, xp, chunk, plan, model, counterparty, own, netted, values, log=lambda msg: None) -> dict:
    """``{"delta": {asset: [value, stderr]}, "vega": {...}, "rho": [value, stderr], "cs01": [value, stderr]}``,
    the derivatives of the CVA per unit of spot, volatility, rate and hazard (the families ``cfg.sensitivities``
    gives a bump for); ``netted`` are the base run's netted levels, ``values`` maps a level's value cube to its
    netted values (:meth:`cva.engine.nested.Levels.levels`)."""
    bumps, estimator = cfg.sensitivities, cfg.simulation.estimator
    sizes = [lv.paths for lv in netted]
    base = cfg.to_dict()

    def engine(change):
        data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
        data["market"] = dict(data["market"])
        data["simulation"] = dict(data["simulation"])
        change(data)
        if estimator == "mlmc":                                            # the base run's outer paths per level
            data["simulation"]["level_paths"] = sizes
            data["simulation"].pop("target_rmse", None)
        c = load_config(data)
        m = BlackScholes.from_market(c.market)
        lv = Levels(c, build_plan(c), m, xp, None, {"config_hash": ""}, chunk, DateStats(len(plan.grid)), {},
                    log, None, False)
        for li, n in enumerate(sizes):
            lv.ensure(li, n)
        cp = Counterparty.from_config(c.require_counterparty(), m.rate)
        me = None if c.own_credit is None else Counterparty.from_config(c.own_credit, m.rate)
        return cva_functional(plan, m, cp, me), lv.levels(values)

    def difference(up, down, width):
        (g_up, l_up), (g_down, l_down) = up, down
        pairs = [replace(a, sets=np.stack([a.sets, b.sets], axis=-2))
                 for a, b in zip(l_up, l_down, strict=True)]
        est = combine(pairs, lambda X: g_up(X[..., 0, :]) - g_down(X[..., 1, :]), estimator)
        return [float(est["estimate"]) / width, float(est["stderr"]) / width]

    def setter(key, i, value):
        def change(data):
            if i is None:
                data["market"][key] = value
            else:
                row = list(data["market"][key])
                row[i] = value
                data["market"][key] = row
        return change

    out = {}
    base_g = (cva_functional(plan, model, counterparty, own), netted)
    if bumps.spot is not None:
        out["delta"] = {}
        for i, s in enumerate(model.spot):
            h = bumps.spot * float(s)
            log(f"sensitivities: spot of asset {i} +- {h:g}")
            out["delta"][f"asset {i}"] = difference(engine(setter("spot", i, float(s) + h)),
                                                    engine(setter("spot", i, float(s) - h)), 2 * h)
    if bumps.vol is not None:
        out["vega"] = {}
        for i, v in enumerate(model.vol):
            h = bumps.vol
            log(f"sensitivities: vol of asset {i} +- {h:g}")
            down, width = (engine(setter("vol", i, float(v) - h)), 2 * h) if v >= h else (base_g, h)
            out["vega"][f"asset {i}"] = difference(engine(setter("vol", i, float(v) + h)), down, width)
    if bumps.rate is not None:
        h = bumps.rate
        log(f"sensitivities: rate +- {h:g}")
        out["rho"] = difference(engine(setter("rate", None, model.rate + h)),
                                engine(setter("rate", None, model.rate - h)), 2 * h)
    if bumps.hazard is not None:
        h = bumps.hazard
        down, width = (shifted(counterparty, -h), 2 * h) if np.min(counterparty.curve.rates) >= h else \
            (counterparty, h)
        out["cs01"] = difference((cva_functional(plan, model, shifted(counterparty, h), own), netted),
                                 (cva_functional(plan, model, down, own), netted), width)
    return out
