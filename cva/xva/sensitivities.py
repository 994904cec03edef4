"""CVA sensitivities by central differences with common random numbers (Glasserman, "Monte Carlo Methods in
Financial Engineering", section 7.1): each bumped run draws the same keyed streams, so the per-path
differences are small and their standard error is that of the difference, not of two independent runs.
Spot, vol and rate bumps run the engine again; a hazard bump reweights the base run's values."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cva.engine.cluster import Executor
from cva.engine.estimators import combine
from cva.engine.nested import DateStats, Levels
from cva.engine.plan import build_plan
from cva.io.config import load_config
from cva.market.model import BlackScholes


def sensitivities(cfg, xp, chunk, plan, model, netted, values, functional, floors, desk=False,
                  log=lambda msg: None, client=None) -> dict:
    """``{"delta": {asset: [value, stderr]}, "vega": {...}, "rho": [value, stderr], "cs01": [value, stderr]}``,
    the derivatives of the CVA per unit of spot, volatility, rate and hazard (the families ``cfg.sensitivities``
    gives a bump for); ``netted`` are the base run's netted levels, ``values`` maps a level's value cube to its
    netted values (:meth:`cva.engine.nested.Levels.levels`). ``functional(c, m, name, shift)`` is the per-path
    CVA g of counterparty ``name`` for the config ``c`` and model ``m``, its hazards shifted by ``shift``;
    ``floors`` the lowest hazard rate of each counterparty by name (a CS01 bump below it is one-sided). With
    ``desk`` the result is ``{name: {...}}``, each counterparty's CS01 that of its own curve; else the one
    counterparty's. With a dask ``client`` the bumped runs' chunks are cluster tasks."""
    bumps, estimator = cfg.sensitivities, cfg.simulation.estimator
    sizes = [lv.paths for lv in netted]
    base = cfg.to_dict()
    keys = list(floors)

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
        executor = None if client is None else Executor(client, c, "cpu" if xp is np else "gpu")
        lv = Levels(c, build_plan(c), m, xp, None, {"config_hash": ""}, chunk, DateStats(len(plan.grid)), {},
                    log, None, False, executor)
        for li, n in enumerate(sizes):
            lv.ensure(li, n)
        return {k: functional(c, m, k, 0.0) for k in keys}, lv.levels(values)

    def difference(up, down, width, key):
        (g_up, l_up), (g_down, l_down) = up, down
        pairs = [replace(a, sets=np.stack([a.sets, b.sets], axis=2)) for a, b in zip(l_up, l_down, strict=True)]
        est = combine(pairs, lambda X: g_up[key](X[:, 0]) - g_down[key](X[:, 1]), estimator)
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

    out = {k: {} for k in keys}
    if bumps.spot is not None:
        for i, s in enumerate(model.spot):
            h = bumps.spot * float(s)
            log(f"sensitivities: spot of asset {i} +- {h:g}")
            up, down = engine(setter("spot", i, float(s) + h)), engine(setter("spot", i, float(s) - h))
            for k in keys:
                out[k].setdefault("delta", {})[f"asset {i}"] = difference(up, down, 2 * h, k)
    if bumps.vol is not None:
        for i, v in enumerate(model.vol):
            h = bumps.vol
            log(f"sensitivities: vol of asset {i} +- {h:g}")
            up = engine(setter("vol", i, float(v) + h))
            if v >= h:
                down, width = engine(setter("vol", i, float(v) - h)), 2 * h
            else:                                                          # one-sided: the base run
                down, width = ({k: functional(cfg, model, k, 0.0) for k in keys}, netted), h
            for k in keys:
                out[k].setdefault("vega", {})[f"asset {i}"] = difference(up, down, width, k)
    if bumps.rate is not None:
        h = bumps.rate
        log(f"sensitivities: rate +- {h:g}")
        up, down = engine(setter("rate", None, model.rate + h)), engine(setter("rate", None, model.rate - h))
        for k in keys:
            out[k]["rho"] = difference(up, down, 2 * h, k)
    if bumps.hazard is not None:
        h = bumps.hazard
        for k in keys:
            shift, width = (-h, 2 * h) if floors[k] >= h else (0.0, h)
            out[k]["cs01"] = difference(({k: functional(cfg, model, k, h)}, netted),
                                        ({k: functional(cfg, model, k, shift)}, netted), width, k)
    return out if desk else out[keys[0]]
