"""CVA sensitivities by central differences with common random numbers (Glasserman, "Monte Carlo Methods in
Financial Engineering", section 7.1): each bumped market draws the same keyed streams, so the per-path
differences are small and their standard error is that of the difference, not of two independent runs.
A hazard bump reweights the base run's values (:func:`cs01`). Spot, vol and rate bumps value the trades again,
in every chunk next to the base and only the trades a bump moves (:class:`BumpedDesk`). By default
(``exercise_policy: base``) each inner path of a Bermudan or American trade exercises in a bumped market when it
did in the base (the pathwise estimator with the exercise time held fixed: Piterbarg 2004, "Computing deltas of
callable LIBOR exotics in forward LIBOR models"): the optimal rule moves a price only to second order in the bump,
the regressions' noise is common to both sides of a difference, and a bumped market costs no regression of its own."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cva.engine.estimators import combine
from cva.xva.credit import Counterparty
from cva.xva.measures import exposure_weights
from linalg_gpu._backend import get_array_module


class BumpedDesk:
    """A desk's bumped markets valued in each chunk next to the base (:func:`cva.engine.nested.chunk_values`'s
    ``revalue``): the chunk's aggregate (:meth:`cva.xva.desk.Book.aggregate`) gets, per scenario and counterparty,
    the per-path CVA of its netting sets in the bumped market, from which :meth:`result` takes the central
    differences. A trade on one asset depends on that asset's spot and vol alone, so one valuation with every
    asset's spot (vol) bumped serves every asset's scenario for those trades; a trade on several assets is valued
    again for each asset it depends on; a rate bump moves every trade. A scenario's netting-set values are the
    base's plus q_c (v_c' - v_c) over the trades c it moves (v' their bumped values), then collateral and the CVA
    weights (the bumped rate's discount and credit curves for a rate scenario) as for the base."""

    def __init__(self, cfg, plan, model, book):
        self.book, self.bumps, self.estimator = book, cfg.sensitivities, cfg.simulation.estimator
        C = len(plan.contracts)
        credit = {e.counterparty: e.credit for e in book.entries}
        own_config = cfg.own_credit

        def weights(m):                                            # (S, K) CVA weights of the market m
            cps = {name: Counterparty.from_config(c, m.rate) for name, c in credit.items()}
            me = None if own_config is None else Counterparty.from_config(own_config, m.rate)
            return np.stack([exposure_weights(plan.dates, m.rate, cps[e.counterparty], me)[0] for e in book.entries])

        base_w = weights(model)
        single = [[c for c in range(C) if plan.contracts[c].underlying == "asset" and plan.contracts[c].asset == i]
                  for i in range(model.d)]
        # a contract on several assets regresses on every asset (a basket weight of 0 too): each asset moves it
        several = [[c for c in range(C) if plan.contracts[c].underlying != "asset"]] * model.d
        self.passes, self.scenarios, self.rows = [], [], []      # (plan, model, trades); (pass trades, weights); rows

        def add_pass(trades, m):
            if not trades:
                return None
            self.passes.append((_subplan(plan, trades), m, list(trades)))          # (trades: base indices)
            return len(self.passes) - 1

        def scenario(moved, w):                                    # moved: [(pass, trades of the pass)]
            self.scenarios.append(([(p, t) for p, t in moved if p is not None], w))
            return len(self.scenarios) - 1

        base = None
        for family, key in (("delta", "spot"), ("vega", "vol")):
            h = getattr(self.bumps, key)
            if h is None:
                continue
            value = getattr(model, key)
            step = h * value if key == "spot" else np.full(model.d, h)
            down_ok = value - step > 0 if key == "spot" else value >= h
            ids = {}
            for sign in (1, -1):
                moves = down_ok | (sign > 0)                             # a vol below the bump is not bumped down
                bumped = value + sign * np.where(moves, step, 0.0)
                everyone = add_pass([c for i in range(model.d) if moves[i] for c in single[i]],
                                    replace(model, **{key: bumped}))
                for i in range(model.d):
                    alone = value.copy()
                    alone[i] = bumped[i]
                    own_pass = add_pass(several[i] if moves[i] else [], replace(model, **{key: alone}))
                    ids[i, sign] = (everyone, own_pass)
            for i in range(model.d):
                (a, b), (c, d) = ids[i, 1], ids[i, -1]
                up = scenario([(a, single[i]), (b, several[i])], base_w)
                if down_ok[i]:
                    down, width = scenario([(c, single[i]), (d, several[i])], base_w), 2 * step[i]
                else:                                                    # one-sided: the base
                    base = scenario([], base_w) if base is None else base
                    down, width = base, step[i]
                self.rows.append((family, f"asset {i}", up, down, width))
        if self.bumps.rate is not None:
            h, every = self.bumps.rate, list(range(C))
            ends = []
            for sign in (1, -1):
                m = replace(model, rate=model.rate + sign * h)
                ends.append(scenario([(add_pass(every, m), every)], weights(m)))
            self.rows.append(("rho", None, ends[0], ends[1], 2 * h))
        self._position = [{c: k for k, c in enumerate(t)} for _, _, t in self.passes]   # a pass's trades: places
        self.counterparties = book.counterparties

    def aggregate(self, cube, revalue):
        """The base aggregate and the scenarios' per-path CVA per counterparty, (sets, L, W), in float64 (the
        scenarios' CVAs are differenced; the base's values are those of the run's dtype). Each pass is valued by
        ``revalue`` and kept while a scenario still to come needs it; a scenario is built when its last pass is
        in, so that one copy of the netting-set values lives at a time."""
        xp = get_array_module(cube)
        book = self.book
        P = book.gross(cube)
        out = [book.aggregate(cube, P=P).astype(np.float64, copy=False)]
        last = [max((p for p, _ in moved), default=-1) for moved, _ in self.scenarios]
        keep = {p: max((last[s] for s, (moved, _) in enumerate(self.scenarios) if any(q == p for q, _ in moved)),
                       default=p) for p in range(len(self.passes))}          # the last pass that needs pass p
        kept, done = {}, {}
        for s in (s for s, end in enumerate(last) if end < 0):
            done[s] = self._cva(P, s, xp)
        for p, (plan, model, trades) in enumerate(self.passes):
            kept[p] = revalue(plan, model, trades)
            for s in (s for s, end in enumerate(last) if end == p):
                Ps = P.copy()
                for q, moved in self.scenarios[s][0]:
                    for c in moved:                                    # a fixed order of terms
                        k = self._position[q][c]
                        Ps[:, :, book.set_of[c], :] += book.quantities[c] * (kept[q][:, :, k, :] - cube[:, :, c, :])
                done[s] = self._cva(Ps, s, xp)
            for q in [q for q in kept if keep[q] <= p]:
                del kept[q]
        cols = [done[s][..., k] for s in range(len(self.scenarios)) for k in range(len(self.counterparties))]
        return xp.concatenate(out + ([xp.stack(cols, axis=-1)] if cols else []), axis=-1)

    def _cva(self, P, s, xp):
        """(sets, L, counterparties): each counterparty's per-path CVA of the gross values P (sets, L, S, V)."""
        E = xp.maximum(self.book.exposed(P), 0.0)                                     # (sets, L, S, K)
        W = xp.asarray(self.scenarios[s][1])
        acc = E[..., 0] * W[:, 0]
        for k in range(1, W.shape[1]):
            acc = acc + E[..., k] * W[:, k]
        per = []
        for name in self.counterparties:
            which = self.book.of(name)
            total = acc[..., which[0]]
            for j in which[1:]:
                total = total + acc[..., j]
            per.append(total)
        return xp.stack(per, axis=-1)

    def result(self, levels, netted, functional, floors) -> dict:
        """``{counterparty: {"delta": {asset: [value, stderr]}, "vega": {...}, "rho": [...], "cs01": [...]}}`` from
        the levels of the chunks' aggregates and the base's ``netted`` levels (CS01: :func:`cs01`)."""
        n = len(self.counterparties)
        out = {k: {} for k in self.counterparties}
        for family, label, up, down, width in self.rows:
            for k, name in enumerate(self.counterparties):
                # the scenarios' columns are the chunk's last, scenario by scenario, counterparty by counterparty
                a, b = (up - len(self.scenarios)) * n + k, (down - len(self.scenarios)) * n + k
                est = combine(levels, lambda X, a=a, b=b: X[..., a] - X[..., b], self.estimator)
                value = [float(est["estimate"]) / width, float(est["stderr"]) / width]
                if label is None:
                    out[name][family] = value
                else:
                    out[name].setdefault(family, {})[label] = value
        if self.bumps.hazard is not None:
            for name in self.counterparties:
                out[name]["cs01"] = cs01(self.bumps.hazard, netted, functional, floors, name, self.estimator)
        return out


def cs01(h, netted, functional, floors, name, estimator):
    """dCVA/dlambda of counterparty ``name``: its hazards shifted by +-h (one-sided at a floor below h), the base
    run's values reweighted (``functional(name, shift)``, the per-path CVA g)."""
    shift, width = (-h, 2 * h) if floors[name] >= h else (0.0, h)
    g_up, g_down = functional(name, h), functional(name, shift)
    est = combine(netted, lambda X: g_up(X) - g_down(X), estimator)
    return [float(est["estimate"]) / width, float(est["stderr"]) / width]


def _subplan(plan, trades):
    """The plan of the contracts ``trades`` alone (the same grid and dates)."""
    return replace(plan, contracts=[plan.contracts[c] for c in trades],
                   exercise_index=[plan.exercise_index[c] for c in trades],
                   closed_form=[plan.closed_form[c] for c in trades])
