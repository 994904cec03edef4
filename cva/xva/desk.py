"""A desk's xVA from the value cube: every netting set of every counterparty netted (and collateralized) from the
same trade values, its CVA, DVA and exposures by the run's estimator, the sums per counterparty and for the desk
with standard errors from the per-path sums (the netting sets share the outer paths), and the Euler allocation of
each uncollateralized netting set to its trades (ORE's split: NPV cube, then aggregation per netting set)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cva.engine.estimators import combine
from cva.engine.plan import margin_columns, net, netting_order
from cva.xva import measures
from cva.xva.collateral import net_of_collateral


class Book:
    """The run's netting sets (:meth:`cva.io.config.Config.book`) with their counterparties' credit
    (:class:`cva.xva.credit.Counterparty` by name), the plan's contracts and netting order, and each CSA's margin
    columns in the value cube."""

    def __init__(self, cfg, plan, credits):
        self.entries = cfg.book()
        self.plan, self.credits = plan, credits
        self.quantities, self.order = [c.quantity for c in plan.contracts], netting_order(plan)
        self.margins = [None if e.csa is None else margin_columns(cfg, plan.value_index, e.csa.margin_period_of_risk)
                        for e in self.entries]
        self.counterparties = list(dict.fromkeys(e.counterparty for e in self.entries))

    def values(self, collateral=True, which=None):
        """The map from a level's value cube (sets, N, C, V) to the values (sets, N, S, K) of the netting sets
        ``which`` (default all) at the exposure dates, net of collateral where a CSA applies (``collateral``)."""
        idx = range(len(self.entries)) if which is None else which

        def f(cube):
            return np.stack([net_of_collateral(net(cube, self.quantities, self.order, self.entries[j].members),
                                               self.plan, self.entries[j].csa if collateral else None,
                                               self.margins[j]) for j in idx], axis=-2)
        return f

    def cva_functional(self, model, own=None, which=None):
        """g: the per-path CVA contributions summed over the netting sets ``which`` (default all), of values
        (..., S, K)."""
        return self._sum([measures.cva_functional(self.plan, model, self.credits[e.counterparty], own)
                          for e in self.entries], which)

    def dva_functional(self, model, own, which=None):
        return self._sum([measures.dva_functional(self.plan, model, self.credits[e.counterparty], own)
                          for e in self.entries], which)

    def _sum(self, gs, which):
        idx = range(len(self.entries)) if which is None else list(which)

        def g(X):
            return sum(gs[j](X[..., j, :]) for j in idx)
        return g

    def of(self, counterparty) -> list[int]:
        return [j for j, e in enumerate(self.entries) if e.counterparty == counterparty]


def _estimate(levels, g, estimator, prefix):
    est = combine(levels, g, estimator)
    return {prefix: float(est["estimate"]), f"{prefix}_stderr": float(est["stderr"]),
            f"{prefix}_ci": [float(est["ci_low"]), float(est["ci_high"])]}


def desk_measures(book, model, netted, uncollateralized, estimator, pfe_quantile, own=None):
    """The desk's numbers from the netted levels (sets, N, S, K); ``uncollateralized(j)``: the levels of netting
    set j's values without its collateral (sets, N, K), asked for the netting sets under a CSA.

    Returns ``(total, counterparties, profiles)``: the desk's ``cva`` (and ``dva``) with standard errors and
    intervals, per counterparty its totals and ``netting_sets`` (cva, dva, EPE, EEPE, collateralized, and the
    uncollateralized CVA where a CSA applies), and per netting set its exposure profile (EE, ENE, PFE by the
    estimator, collateral, uncollateralized EE)."""
    plan = book.plan
    total = _estimate(netted, book.cva_functional(model, own), estimator, "cva")
    if own is not None:
        total.update(_estimate(netted, book.dva_functional(model, own), estimator, "dva"))
    cps, profiles = {}, []
    for name in book.counterparties:
        which = book.of(name)
        row = _estimate(netted, book.cva_functional(model, own, which), estimator, "cva")
        if own is not None:
            row.update(_estimate(netted, book.dva_functional(model, own, which), estimator, "dva"))
        row["netting_sets"] = {}
        cps[name] = row
    for j, e in enumerate(book.entries):
        mine = [replace(lv, sets=lv.sets[..., j, :]) for lv in netted]
        prof, est, _ = measures.exposures_and_cva(plan, model, book.credits[e.counterparty], mine, estimator,
                                                  pfe_quantile, own)
        ns = {"cva": est["cva"], "cva_stderr": est["stderr"], **measures.epe_eepe(prof["date"], prof["EE"]),
              "collateralized": e.csa is not None, "trades": len(e.members)}
        if own is not None:
            ns.update({"dva": est["dva"], "dva_stderr": est["dva_stderr"]})
        if e.csa is not None:
            raw = uncollateralized(j)
            g = measures.cva_functional(plan, model, book.credits[e.counterparty], own)
            unc = combine(raw, g, estimator)
            ns.update({"cva_uncollateralized": float(unc["estimate"]),
                       "cva_uncollateralized_stderr": float(unc["stderr"]), "csa": e.csa.model_dump()})
            prof["EE_uncollateralized"] = combine(raw, lambda P: np.maximum(P, 0.0), estimator)["estimate"]
            prof["collateral"] = combine(raw, lambda P: P, estimator)["estimate"] - prof["mean_value"]
        else:
            prof["EE_uncollateralized"] = prof["EE"]
            prof["collateral"] = 0.0
        cps[e.counterparty]["netting_sets"][e.name] = ns
        profiles.append(prof)
    return total, cps, profiles
