"""The xVA of a run's netting sets (a desk's, or the one netting set of a ``portfolio:`` run) from the value cube
(ORE's split: NPV cube, then aggregation per netting set): each chunk's cube aggregated where it was computed to
every netting set's values net and gross of collateral and every trade's per-path Euler contributions
(:class:`Book`); then each netting set's CVA, DVA and exposures by the run's estimator, the sums per counterparty
and for the desk with standard errors from the per-path sums (the netting sets share the outer paths), and the
trades' allocations."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cva.engine.estimators import combine
from cva.engine.plan import margin_columns, netting_order
from cva.xva import measures
from cva.xva.collateral import collateral, net_of_collateral
from cva.xva.credit import run_credits
from linalg_gpu._backend import get_array_module

#: The inner sets whose uncollateralized values and trades' contributions a chunk keeps: the whole inner set and its
#: halves (splits 0 and 1), all that the estimates and standard errors of the uncollateralized CVA and exposure and
#: of the allocations read, by any estimator (the plain mean and the correction Y at depth 0,
#: :func:`cva.engine.estimators.combine`).
KEPT_SPLITS = 1
KEPT_SETS = 2 ** (KEPT_SPLITS + 1) - 1


class Book:
    """The run's netting sets (:meth:`cva.io.config.Config.book`) with their counterparties' credit
    (:class:`cva.xva.credit.Counterparty` by name), the plan's contracts and netting order, and each CSA's margin
    columns in the value cube.

    :meth:`aggregate` reduces each chunk's value cube where it was computed (on the GPU for a GPU run) to what the
    measures need, so the cube itself never reaches the host: per netting set its values net of collateral and
    without it at the exposure dates (the latter only for the netting sets under a CSA, :attr:`collateralized`:
    for the others they are the same numbers), and per trade its per-path Euler contributions to the CVA (and DVA)
    of its netting set. The chunk's array (sets, paths, :meth:`width`) holds them side by side, in the run's dtype
    (computed in float64; a float32 run's paths carry float32's precision, and its chunks send, write and hold half
    the bytes); :meth:`netted`, :meth:`uncollateralized` and :meth:`contributions` take them out.

    The netted values are kept for every inner set (the CVA's bias estimates read them all); the uncollateralized
    values and the contributions for the first :data:`KEPT_SETS` only (the whole set and its halves), all that
    their measures read (:meth:`kept_levels`). Those are laid out path by path across the chunk's set rows
    (:meth:`_packed`): with the extrapolated estimator's seven inner sets the desk benchmark's chunk holds 10563
    values per outer path instead of 15680."""

    def __init__(self, cfg, plan, credits, model, own=None):
        self.entries = cfg.book()
        self.plan, self.credits = plan, credits
        self.quantities, self.order = [c.quantity for c in plan.contracts], netting_order(plan)
        grid = cfg.grid_keys() if any(e.csa is not None for e in self.entries) else None     # (once: O(trades))
        self.margins = [None if e.csa is None else margin_columns(cfg, plan.value_index, e.csa.margin_period_of_risk,
                                                                  grid) for e in self.entries]
        self.counterparties = list(dict.fromkeys(e.counterparty for e in self.entries))
        self.set_of = np.empty(len(plan.contracts), dtype=int)                        # each trade's netting set
        for j, e in enumerate(self.entries):
            self.set_of[list(e.members)] = j
        self.estimator, self.dtype = cfg.simulation.estimator, np.dtype(cfg.run.dtype)
        self.collateralized = [j for j, e in enumerate(self.entries) if e.csa is not None]   # netting sets, CSA
        S, C, V = len(self.entries), len(plan.contracts), len(plan.value_index)
        # netting in the netting order (plan.netting_order) per value column; a pad adds 0 x the netting set's
        # first trade (+-0: the same sums, and no other netting set's value can reach it)
        lists = [[[c for c in self.order[k] if c in mine] for k in range(V)]
                 for mine in (set(e.members) for e in self.entries)]
        width = max(1, max(len(m) for row in lists for m in row))
        self._index = np.zeros((width, S, V), dtype=np.int64)
        self._weight = np.zeros((width, S, V), dtype=np.float64)
        for j, row in enumerate(lists):
            self._index[:, j, :] = self.entries[j].members[0] if self.entries[j].members else 0
            for k, members in enumerate(row):
                self._index[:len(members), j, k] = members
                self._weight[:len(members), j, k] = [self.quantities[c] for c in members]
        weights = [measures.exposure_weights(plan.dates, model.rate, credits[e.counterparty], own)
                   for e in self.entries]
        self.sides = [("cva", 1.0, [w for w, _ in weights])]
        if own is not None:
            self.sides.append(("dva", -1.0, [w for _, w in weights]))
        K = len(plan.exposure_index)
        self._netted_columns = S * K
        self._contributions_at = len(self.collateralized) * K       # in a kept set's record, after the gross values
        self._kept_columns = self._contributions_at + len(self.sides) * C                   # per kept inner set

    def width(self, sets):
        """The columns of a chunk of ``sets`` inner sets: the netting sets' values, then the kept sets' records
        (their uncollateralized values and contributions) spread over the ``sets`` rows."""
        return self._netted_columns + self._block(sets)

    def _block(self, sets):
        return -(-min(sets, KEPT_SETS) * self._kept_columns // sets)

    @classmethod
    def of_config(cls, cfg, plan, model):
        """The run's Book: the credit of its counterparties and its own (``own_credit``) from ``cfg``."""
        credits, own = run_credits(cfg, model.rate)
        return cls(cfg, plan, credits, model, own)

    def gross(self, cube):
        """(sets, L, S, V): the netting sets' values at every value date of the cube (sets, L, C, V), no collateral;
        numpy or cupy."""
        xp = get_array_module(cube)
        index, weight = xp.asarray(self._index), xp.asarray(self._weight)
        column = xp.asarray(np.broadcast_to(np.arange(len(self.plan.value_index)), index.shape[1:]))
        P = xp.zeros(cube.shape[:2] + index.shape[1:], dtype=np.float64)
        for m in range(index.shape[0]):
            P += weight[m] * cube[:, :, index[m], column]
        return P

    def exposed(self, P):
        """(sets, L, S, K): the netting sets' values at the exposure dates net of collateral, from :meth:`gross`."""
        xp = get_array_module(P)
        raw = P[..., self.plan.exposure_cols]
        return xp.stack([raw[..., j, :] if e.csa is None else net_of_collateral(P[..., j, :], self.plan, e.csa,
                                                                                  self.margins[j])
                         for j, e in enumerate(self.entries)], axis=-2)

    def aggregate(self, cube, revalue=None, P=None):
        """A chunk's value cube (sets, L, C, V) (numpy or cupy) to its (sets, L, W) array of the netted values and
        the trades' contributions, in the run's dtype; path by path, so the same numbers whatever the chunk.
        (``revalue``, of :func:`cva.engine.nested.chunk_values`, is not needed here; ``P``: :meth:`gross` if
        known.)"""
        xp = get_array_module(cube)
        plan, S, K = self.plan, len(self.entries), len(self.plan.exposure_index)
        cols = plan.exposure_cols
        P = self.gross(cube) if P is None else P                                        # (sets, L, S, V)
        net = self.exposed(P)
        kept = min(cube.shape[0], KEPT_SETS)
        record = []                                                        # the kept sets' (kept, L, columns)
        if self.collateralized:                                             # without the collateral, CSAs only
            raw = P[:kept, :, self.collateralized][..., cols]                            # (kept, L, CSAs, K)
            record.append(raw.reshape(raw.shape[:2] + (len(self.collateralized) * K,)))
        outs = [xp.zeros((kept,) + cube.shape[1:3], dtype=np.float64) for _ in self.sides]   # (kept, L, C) per side
        for j, e in enumerate(self.entries):
            members = list(e.members)
            own = xp.asarray(np.asarray(self.quantities)[members])[:, None] * cube[:kept, :, members][..., cols]
            if e.csa is not None:
                own = own - self._shares(cube[:kept], P[:kept, ..., j, :], members, e.csa, self.margins[j], xp)
            for out, (_, side, weights) in zip(outs, self.sides, strict=True):
                euler_contributions(own, net[:kept], j, weights[j], side, members, out)
        packed = self._packed(xp.concatenate(record + outs, axis=-1), cube.shape[0], xp)
        return xp.concatenate([net.reshape(net.shape[:2] + (S * K,)), packed], axis=-1).astype(self.dtype, copy=False)

    def _packed(self, c, sets, xp):
        """The kept sets' records c (kept, L, X) as (sets, L, :meth:`_block`): path l's kept * X values in order,
        set by set, over its ``sets`` rows (zeros after them). With ``sets`` <= KEPT_SETS it is c itself."""
        kept, L, X = c.shape
        block = self._block(sets)
        flat = xp.zeros((L, sets * block), dtype=c.dtype)
        flat[:, :kept * X] = c.transpose(1, 0, 2).reshape(L, kept * X)
        return flat.reshape(L, sets, block).transpose(1, 0, 2)

    def _shares(self, cube, P, members, csa, margin_cols, xp):
        """Each member's share (sets, L, members, K) of the collateral (Pykhtin & Rosen, :mod:`cva.xva.collateral`)
        from the netted values P (sets, L, V) of its netting set."""
        lag = np.asarray(margin_cols)
        cols = np.where(lag >= 0, lag, 0)
        V_lag = P[..., cols]
        call = xp.where(xp.asarray(lag >= 0), collateral(V_lag, csa) - csa.independent_amount, 0.0)
        q = xp.asarray(np.asarray(self.quantities, dtype=np.float64)[members])
        v_lag = q[:, None] * cube[:, :, members][..., cols]
        safe = xp.where(V_lag != 0, V_lag, 1.0)
        share = xp.where(call[..., None, :] != 0, v_lag / safe[..., None, :], 0.0)
        return call[..., None, :] * share + csa.independent_amount / len(members)

    def netted(self, chunk):
        """(sets, N, S, K): each netting set's values at the exposure dates, net of collateral where a CSA applies."""
        S, K = len(self.entries), len(self.plan.exposure_index)
        return _dates_major(chunk[..., :S * K].reshape(chunk.shape[:-1] + (S, K)))

    def uncollateralized(self, chunk):
        """(kept sets, N, CSAs, K): the values without their collateral of the netting sets under a CSA
        (:attr:`collateralized`, in that order) of a chunk or level (sets, N, W) (numpy), for the first
        :data:`KEPT_SETS` inner sets."""
        K, A = len(self.plan.exposure_index), len(self.collateralized)
        x = self._kept(chunk, 0, A * K)
        return _dates_major(x.reshape(x.shape[:2] + (A, K)))

    def contributions(self, chunk, name="cva"):
        """(kept sets, N, C): each trade's per-path contribution to its netting set's CVA (``name`` "dva": DVA) of
        a chunk or level (sets, N, W) (numpy), for the first :data:`KEPT_SETS` inner sets."""
        i, C = [n for n, _, _ in self.sides].index(name), len(self.plan.contracts)
        return self._kept(chunk, self._contributions_at + i * C, C)

    def _kept(self, chunk, start, count):
        """(kept sets, N, count): the columns start .. start + count - 1 of each kept set's record, from the
        chunk's packed rows (:meth:`_packed`)."""
        sets = chunk.shape[0]
        block, kept = self._block(sets), min(sets, KEPT_SETS)
        at = (np.arange(kept)[:, None] * self._kept_columns + start + np.arange(count)).ravel()   # in a path's record
        out = chunk[at // block, :, self._netted_columns + at % block]                     # (kept count, N)
        return out.reshape(kept, count, chunk.shape[1]).transpose(0, 2, 1)

    def kept_levels(self, lv, values):
        """The levels of ``lv`` (:class:`cva.engine.nested.Levels`) mapped by ``values`` of the kept sets
        (:meth:`uncollateralized`, :meth:`contributions`): as far as their halves (splits at most
        :data:`KEPT_SPLITS`), which is all that an estimate and its standard error read
        (:func:`cva.engine.estimators.combine`)."""
        return [replace(x, splits=min(x.splits, KEPT_SPLITS)) for x in lv.levels(values)]

    def allocations(self, lv) -> list[dict]:
        """Per trade (in the plan's order) its Euler allocation to its netting set's CVA (and DVA) with standard
        errors, by the run's estimator, from the levels of :class:`cva.engine.nested.Levels` of the aggregates:
        (1 - R) sum_k D(t_k) q_k E[(q_i V_i(t_k) - c_i(t_k)) 1{P(t_k) > 0}], c_i the trade's share of the
        collateral (Pykhtin & Rosen, :mod:`cva.xva.collateral`); they add up to the netting set's CVA path by
        path."""
        rows = [{"contract": c.name, "quantity": c.quantity} for c in self.plan.contracts]
        for name, _, _ in self.sides:
            parts = self.kept_levels(lv, lambda x, name=name: self.contributions(x, name))
            for i, row in enumerate(rows):
                a = combine(parts, lambda X, i=i: X[..., i], self.estimator)
                row[f"{name}_allocation"], row[f"{name}_allocation_stderr"] = float(a["estimate"]), float(a["stderr"])
        return rows

    def cva_functional(self, model, own=None):
        """g: the per-path CVA summed over the netting sets, of values (..., S, K)."""
        gs = [measures.cva_functional(self.plan, model, self.credits[e.counterparty], own) for e in self.entries]

        def g(X):
            return sum(gs[j](X[..., j, :]) for j in range(len(gs)))
        return g

    def of(self, counterparty) -> list[int]:
        return [j for j, e in enumerate(self.entries) if e.counterparty == counterparty]


def euler_contributions(x, P, j, w, side, members, out):
    """out[..., members] = sum_k w_k (side x_k) 1{side P_k > 0}: the members' per-path Euler contributions to the
    CVA (side 1) or DVA (side -1) of netting set j, from their values net of collateral x (sets, L, members, K), the
    netting sets' values P (sets, L, S, K) and the exposure weights w (K,); the sum in date order, so the same bits
    whatever the chunk. On the GPU one launch (``cuda/euler_contributions.cu``), else
    :func:`euler_contributions_twin`."""
    if not members:
        return
    if get_array_module(x) is np:
        out[:, :, members] = euler_contributions_twin(x, P[..., j, :], w, side)
        return
    import cupy as cp

    from cva.engine.lsm import CUDA_DIR
    from linalg_gpu._kernels import get_function, grid_blocks

    x, P = cp.ascontiguousarray(x, dtype=np.float64), cp.ascontiguousarray(P, dtype=np.float64)
    R, m, K = x.shape[0] * x.shape[1], x.shape[2], x.shape[3]
    fn = get_function("euler_contributions.cu", "euler_contributions", np.float64, cuda_dir=CUDA_DIR)
    fn((grid_blocks(R * m),), (256,),
       (x, np.uint64(P.data.ptr + j * K * P.itemsize), np.int64(P.shape[-2] * K), cp.asarray(w, dtype=np.float64),
        np.float64(side), cp.asarray(np.asarray(members, dtype=np.int64)), np.int32(m), np.int32(K), out,
        np.int64(out.shape[-1]), np.int64(R)))


def euler_contributions_twin(x, P_j, w, side):
    """numpy twin of ``cuda/euler_contributions.cu``: (sets, L, members), the terms summed in date order, each
    operation rounded on its own."""
    X = side * x * (side * P_j[..., None, :] > 0)                                      # (sets, L, members, K)
    acc = X[..., 0] * w[0]
    for k in range(1, X.shape[-1]):
        acc = acc + X[..., k] * w[k]
    return acc


def _dates_major(a):
    """``a`` (..., K) copied dates first in memory, the layout numpy's indexing of the dates gives a single netting
    set's values (``P[..., cols]``), so that the measures' matrix products give the same bits on both."""
    return np.moveaxis(np.ascontiguousarray(np.moveaxis(a, -1, 0)), 0, -1)


def _estimate(levels, g, estimator, prefix):
    est = combine(levels, g, estimator)
    return {prefix: float(est["estimate"]), f"{prefix}_stderr": float(est["stderr"]),
            f"{prefix}_ci": [float(est["ci_low"]), float(est["ci_high"])]}


def desk_measures(book, model, netted, uncollateralized, estimator, pfe_quantile, own=None):
    """The desk's numbers from the netted levels (sets, N, S, K); ``uncollateralized(j)``: the levels of netting
    set j's values without its collateral (sets, N, K), asked for the netting sets under a CSA.

    Returns ``(total, counterparties, profiles, per_path)``: the desk's ``cva`` (and ``dva``) with standard errors
    and intervals, per counterparty its totals and ``netting_sets`` (cva, dva, EPE, EEPE, collateralized, and the
    uncollateralized CVA where a CSA applies), per netting set its exposure profile (EE, ENE, PFE by the
    estimator, collateral, uncollateralized EE), and the levels of the desk's per-path CVA (sets, N). Each netting
    set's values are taken out once (dates first, the layout of a single netting set's run: the same bits) and
    its per-path CVA and DVA computed once; the sums over netting sets add them in the netting sets' order."""
    plan = book.plan
    sides = [("cva", measures.cva_functional)] + ([("dva", measures.dva_functional)] if own is not None else [])
    mine = [[replace(lv, sets=_dates_major(lv.sets[..., j, :])) for lv in netted] for j in range(len(book.entries))]
    per_path = {}                                                      # side -> levels (sets, N, S)
    for side, functional in sides:
        gs = [functional(plan, model, book.credits[e.counterparty], own) for e in book.entries]
        per_path[side] = [replace(lv, sets=np.stack([np.stack([g(x) for x in levels[li].sets]) for g, levels in
                                                      zip(gs, mine, strict=True)], axis=-1))
                          for li, lv in enumerate(netted)]

    def summed(side, which):                                          # per path, over the netting sets which
        def g(G):
            return sum(G[..., j] for j in which)
        return [replace(lv, sets=np.stack([g(x) for x in lv.sets])) for lv in per_path[side]]

    everything = range(len(book.entries))
    total, cps, profiles = {}, {}, []
    for side, _ in sides:
        total.update(_estimate(summed(side, everything), lambda x: x, estimator, side))
    for name in book.counterparties:
        row = {}
        for side, _ in sides:
            row.update(_estimate(summed(side, book.of(name)), lambda x: x, estimator, side))
        row["netting_sets"] = {}
        cps[name] = row
    for j, e in enumerate(book.entries):
        prof, est, _ = measures.exposures_and_cva(plan, model, book.credits[e.counterparty], mine[j], estimator,
                                                  pfe_quantile, own)
        ns = {"cva": est["cva"], "cva_stderr": est["stderr"], **measures.epe_eepe(prof["date"], prof["EE"]),
              "collateralized": e.csa is not None, "trades": len(e.members)}
        if own is not None:
            ns.update({"dva": est["dva"], "dva_stderr": est["dva_stderr"]})
        if e.csa is not None:
            raw = [replace(lv, sets=_dates_major(lv.sets)) for lv in uncollateralized(j)]
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
    return total, cps, profiles, summed("cva", everything)
