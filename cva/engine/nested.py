"""The nested Monte Carlo engine (Abbas-Turki & Graillat, section 2): the per-path values of a netting set
with Bermudan contracts, chunk by chunk, and the levels of the estimators (:mod:`cva.engine.estimators`).

Outer paths of the d-asset model run on the simulation grid (the union of the exposure dates
and every contract's exercise dates). At each grid date t_g where a live contract is needed
(an exposure date, or one of its exercise dates) and for each outer path l, M inner paths
start from S_{t_g}^{(l)} and run over the later grid dates; Longstaff-Schwartz on them (one
regression per later exercise date, the L outer paths of a chunk batched into one
``solve_small`` call per date) gives the contract's continuation value at the node. European
contracts on one asset use the Black-Scholes formula instead; other European contracts the
inner mean. Along the outer path, the holder exercises at an exercise date when the payoff is
positive and at least the inner-estimated continuation value; the contract then pays once and
has no exposure after. The netting-set value is P = sum_c quantity_c * value_c.

Every random number is keyed by (seed, outer path, date, inner path, asset) (:mod:`cva.market.rng`),
so the per-path numbers do not depend on the chunking; the solver memory is per outer path
(keyed by contract and regression date, see :func:`chunk_values`), so neither does the method
chosen for a path's regressions, and a resumed run is bitwise the uninterrupted one.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

import linalg_gpu as lg
from cva.engine import basis, diagnostics
from cva.engine.diagnostics import DESIGN_SAMPLE, DESIGN_STACKS
from cva.engine.estimators import Level, allocate, combine, level_table
from cva.engine.lsm import CUDA_DIR, Deferred, StageClock, longstaff_schwartz, stopped_cashflows
from cva.engine.plan import bytes_per_outer_path, exercise_code_dtype, level_specs
from cva.instruments.analytic import black_scholes_columns
from cva.instruments.products import stacked_payoff
from cva.io import rundir
from cva.io.config import MLMC_LEVEL_PATHS
from linalg_gpu._backend import get_array_module, to_pinned_host
from linalg_gpu._backend import to_host as _host

STAGES = ("outer_paths", "closed_form", "inner_paths", "assembly", "conditions", "solve", "exercise", "statistics",
          "aggregation", "io")
SAVE_THREADS = 2           # chunk files are written in these threads while the next chunks are computed or
                           # received (the oldest write is waited for before more are queued)
COND_SAMPLE = 256          # outer paths (the first, whatever the chunking) whose regression matrices' condition
                           # numbers are computed per (contract, date) (cuSOLVER's syevj on 256 matrices per call
                           # was ~40% of the assembly stage when done in every chunk of bench_cva on an H100)

class DateStats:
    """Solver statistics per grid date (the valuation date of the inner problems): ``regressions`` counts the
    (contract, exercise date) regressions, each solved once per outer path (``systems``), whatever the chunks."""

    def __init__(self, G):
        self.rows = [{"systems": 0, "ldlt": 0, "householder_pcr": 0, "eig_truncate": 0, "none": 0,
                      "max_residual": 0.0, "discarded": 0, "failed": 0, "regressions": 0} for _ in range(G)]
        self.cond = [[] for _ in range(G)]
        self.design = [[] for _ in range(G)]          # (effective rank, p, kappa^2) of sampled design matrices
        self._pending = []                             # (g, systems, regressions, reduced report on the device)
        self._conditions = []                          # (g, a call's sampled condition numbers per date)

    def add(self, g, result, contracts=1):
        """A Longstaff-Schwartz result of ``contracts`` contracts stacked in its batch: its reports reduced where
        they are (:func:`solver_stats`) and kept there, read with the others' in one transfer by :meth:`to_state`
        (a read per call would stop the GPU's queue)."""
        reps = [rep for rep in result.reports if rep is not None]
        self._conditions.append((g, result.conditions))     # (filled by the call's read: lsm.Deferred)
        if not reps:
            return
        systems = sum(int(rep.residual.size) for rep in reps)
        self._pending.append((g, systems, contracts * len(reps), solver_stats(reps)))

    def _collect(self):
        """The reductions kept by :meth:`add`, read in one transfer into the rows, and the calls' condition numbers
        (read with their calls)."""
        for g, conditions in self._conditions:
            for cond in conditions:
                if cond is not None:
                    self.cond[g].extend(np.asarray(cond, dtype=float).tolist())
        self._conditions = []
        if not self._pending:
            return
        xp = get_array_module(self._pending[0][3])
        values = _host(xp.stack([v for *_, v in self._pending]))                          # (calls, 7) uint64
        for (g, systems, regressions, _), v in zip(self._pending, values, strict=True):
            row = self.rows[g]
            row["systems"] += systems
            row["regressions"] += regressions
            for k, name in enumerate(lg.SolverReport.CODES):
                row[name] += int(v[k])
            row["max_residual"] = max(row["max_residual"], float(v[6:7].view(np.float64)[0]))
            row["discarded"] += int(v[4])
            row["failed"] += int(v[5])
        self._pending = []

    def add_design(self, g, rows):
        self.design[g].extend([int(r["rank"]), int(r["p"]), r["cond2"]] for _, r in rows)

    #: The keys of :meth:`to_state` that are arrays (a chunk file's own members, :func:`cva.io.rundir.save_chunk`).
    ARRAYS = ("cond", "cond_counts", "design", "design_counts")

    def to_state(self):
        """The statistics as a chunk sends and keeps them: ``rows`` (plain data, a chunk file's JSON) and the sampled
        condition numbers and design rows as arrays with each date's count (:data:`ARRAYS`). (As JSON text, the
        10^5 condition numbers of a desk chunk's first 256 outer paths took 0.06 s on an H200's host, holding the
        GIL, in the thread writing the chunk's file, while the run's last result waited for it.)"""
        self._collect()
        return {"rows": self.rows,
                "cond": np.array([c for cs in self.cond for c in cs], dtype=np.float64),
                "cond_counts": np.array([len(cs) for cs in self.cond], dtype=np.int64),
                "design": np.array([r for rs in self.design for r in rs], dtype=np.float64).reshape(-1, 3),
                "design_counts": np.array([len(rs) for rs in self.design], dtype=np.int64)}

    def merge_state(self, state):
        """Add a chunk's :meth:`to_state` (the sampled values after this run's, in the order of the chunks)."""
        self._collect()
        for g, row in enumerate(state["rows"]):
            mine = self.rows[g]
            for k, v in row.items():
                mine[k] = max(mine[k], v) if k in ("max_residual", "regressions") else mine[k] + v
        for g, part in enumerate(np.split(state["cond"], np.cumsum(state["cond_counts"])[:-1])):
            self.cond[g].extend(part.tolist())
        for g, part in enumerate(np.split(state["design"], np.cumsum(state["design_counts"])[:-1])):
            self.design[g].extend([int(rank), int(p), cond2] for rank, p, cond2 in part.tolist())


def solver_stats(reports):
    """The statistics of a Longstaff-Schwartz call's solver reports, where they are: (7,) uint64, the systems per
    method code 0 .. 3 (:attr:`linalg_gpu.SolverReport.CODES`), the eigenvalues discarded, the systems not ok, and
    the bits of the largest finite residual (a non-negative float64; 0 where none is finite). On the GPU one launch
    per report (``cuda/solver_stats.cu``) into one zeroed array, else :func:`solver_stats_twin`."""
    xp = get_array_module(reports[0].residual)
    if xp is np:
        return solver_stats_twin(reports)
    from linalg_gpu._kernels import get_function, grid_blocks

    out = xp.zeros(7, dtype=np.uint64)
    fn = get_function("solver_stats.cu", "solver_stats", reports[0].residual.dtype, cuda_dir=CUDA_DIR)
    for rep in reports:
        n = rep.residual.size
        if n:
            fn((grid_blocks(n),), (256,), (xp.ascontiguousarray(rep.residual), xp.ascontiguousarray(rep.method_code),
                                           xp.ascontiguousarray(rep.n_discarded, dtype=np.int32),
                                           xp.ascontiguousarray(rep.ok), np.int64(n), out))
    return out


def solver_stats_twin(reports):
    """numpy twin of ``cuda/solver_stats.cu`` (:func:`solver_stats`)."""
    res = np.concatenate([np.asarray(rep.residual, dtype=np.float64).ravel() for rep in reports])
    code = np.concatenate([np.asarray(rep.method_code).ravel() for rep in reports])
    out = np.zeros(7, dtype=np.uint64)
    out[:4] = [(code == k).sum() for k in range(4)]
    out[4] = sum(int(np.asarray(rep.n_discarded).sum()) for rep in reports)
    out[5] = sum(int((~np.asarray(rep.ok, dtype=bool)).sum()) for rep in reports)
    finite = res[np.isfinite(res)]
    worst = float(finite.max()) if finite.size else 0.0
    out[6:7] = np.array([worst if worst > 0 else 0.0]).view(np.uint64)
    return out


class ExerciseTimes:
    """The exercise dates of a chunk's inner paths in the base market, for its bumped markets
    (:mod:`cva.xva.sensitivities`, ``exercise_policy: base``): per contract and grid date, each inner path's
    exercise date under every depth's policies (:attr:`cva.engine.lsm.LSMResult.stopping`), the depths' indices
    i_k < N packed into one integer sum_k i_k N^k of the fewest bytes (N^3 <= 65536: two bytes for three depths)."""

    def __init__(self):
        self._kept = {}                                  # (contract, grid date) -> (packed (Lc, M), N, depths)

    def add(self, members, g, stopping, Lc, N):
        """The exercise dates of a call of N exercise dates whose batch stacks the contracts ``members``."""
        dtype = exercise_code_dtype(N, len(stopping)).type
        packed = stopping[-1].astype(dtype)                            # (N itself may not fit with one depth)
        for tau in reversed(stopping[:-1]):
            packed = packed * dtype(N) + tau.astype(dtype)
        for pos, ci in enumerate(members):
            self._kept[ci, g] = (packed[pos * Lc:(pos + 1) * Lc], N, len(stopping))

    def stacked(self, contracts, g):
        """Per depth the (sets, M) exercise dates of ``contracts`` at grid date g, stacked as one call's batch in
        that order."""
        per = [self._kept[ci, g] for ci in contracts]
        xp = get_array_module(per[0][0])
        packed = per[0][0] if len(per) == 1 else xp.concatenate([p for p, _, _ in per])
        _, N, depths = per[0]
        if depths == 1:
            return [packed]
        return [(packed // packed.dtype.type(N ** k)) % packed.dtype.type(N) for k in range(depths)]


def chunk_values(cfg, plan, model, xp, l0, Lc, stats, timings, *, inner_paths=None, splits=0, cond_sample=0,
                 aggregate=None, check_finite=False, pinned=False):
    """The value cube on outer paths l0 .. l0 + Lc - 1 (keys of :mod:`cva.market.rng`; host, float64): the array
    (2^(splits + 1) - 1, Lc, C, K) of each contract's value (one unit, 0 once exercised or matured) at each
    exposure date, from ``inner_paths`` inner paths (default the plan's), then from each half of the same
    inner paths, each quarter, ... (``splits`` times halved; the antithetic multilevel corrections of
    :mod:`cva.engine.estimators`), each with its own exercise decisions, at every value date (the exposure
    dates and the CSAs' margin dates). With ``aggregate(cube, revalue)`` (a run's: :meth:`cva.xva.desk.Book.aggregate`,
    ORE's aggregation of its NPV cube) the cube is reduced on the device where it was computed, before it leaves,
    and the aggregate is returned instead; ``revalue(plan, model, trades)`` gives the aggregate the cube of the same
    chunk for other contracts (``trades``, their indices in ``plan``) or another market (the bumped markets of
    :mod:`cva.xva.sensitivities`), with the base market's inner exercise dates (:class:`ExerciseTimes`) where
    ``sensitivities.exercise_policy`` is ``base``. With ``check_finite``, (values, whether all are finite), checked
    before they leave the device; with ``pinned``, a GPU's values come to page-locked host memory
    (:func:`linalg_gpu._backend.to_pinned_host`: a cluster task's, sent on and freed).

    The solver memory is per system (``SolverMemory(per_system=True)``) and keyed by contract and
    regression date: each outer path's regression at exercise date t_j starts, at the next
    valuation date, with the method it needed at the previous one (the paper's "next time").
    Per path, it is path-local history, so the values do not depend on the chunking. ``stats`` gets the
    regressions of the whole inner set, with the condition numbers of the first ``cond_sample`` paths.
    """
    M = plan.inner_paths if inner_paths is None else int(inner_paths)
    if M % 2 ** splits or M // 2 ** splits < 2:
        raise ValueError(f"{M} inner paths cannot be split {splits} times into equal parts of >= 2 paths")
    kept = ExerciseTimes() if aggregate is not None and plan.keeps_exercise_times else None
    V = _cube(cfg, plan, model, xp, l0, Lc, stats, timings, M, splits, cond_sample, keep=kept)
    clock = StageClock(xp, timings)
    if aggregate is not None:
        def revalue(p, m, trades):               # the same chunk, a plan's contracts in the market m (on the device)
            clock("aggregation")
            cube = _cube(cfg, p, m, xp, l0, Lc, DateStats(len(p.grid)), timings, M, splits, 0,
                         frozen=None if kept is None else (kept, trades))
            clock.skip()                                                   # booked by the cube's own clock
            return cube

        V = aggregate(V, revalue)
        clock("aggregation")
    finite = bool(xp.isfinite(V).all()) if check_finite else None          # (where computed: a GPU's is quick)
    V = to_pinned_host(V) if pinned else _host(V)
    clock("io")                                                                        # (to the host)
    clock.flush()
    return (V, finite) if check_finite else V


def _cube(cfg, plan, model, xp, l0, Lc, stats, timings, M, splits, cond_sample, keep=None, frozen=None):
    """:func:`chunk_values`' value cube, on the device of ``xp``; ``keep`` (:class:`ExerciseTimes`) gets the
    inner paths' exercise dates; with ``frozen`` = (times, trades) the inner problems are not regressed: each inner
    path exercises at the date kept for its contract in ``trades`` (this plan's contracts' indices in the plan
    that kept them)."""
    dtype = np.dtype(cfg.run.dtype)
    sim, seed = cfg.simulation, cfg.run.seed
    solver = {"method": cfg.regression.method, "cond_max": cfg.regression.cond_max, "rtol": cfg.regression.rtol}
    rdt = cfg.regression_dtype()
    K = len(plan.value_index)
    nv = 2 ** (splits + 1) - 1                                                         # the whole set and its parts
    grid0 = np.concatenate([[0.0], plan.grid])
    clock = StageClock(xp, timings)
    S_out = outer_paths(cfg, plan, model, l0, Lc, xp)                                 # (Lc, G, d)
    clock("outer_paths")
    V = xp.zeros((nv, Lc, len(plan.contracts), K), dtype=np.float64)                   # the value cube
    alive = xp.ones((nv, Lc, len(plan.contracts)), dtype=bool)                       # not exercised, not ended
    memory = lg.SolverMemory(per_system=True)
    deferred = Deferred(clock)                  # the LSM calls' flags and stage times, read once at the chunk's end
    sampled = []                              # the first paths' inner paths for the design matrices: (g, S, ...)
    for g, (k, mature, closed, inner, stacks) in enumerate(date_schedule(plan, model.d)):
        t = plan.grid[g]
        # the date's values in blocks of contracts: (contracts, values broadcast to (nv, Lc, contracts), their
        # exercise decisions or None), written into the cube with a few launches
        blocks = []
        if mature:
            blocks.append((mature, _payoff_columns([plan.contracts[ci] for ci in mature], S_out[:, g], xp)[None],
                           None))
        if closed:                                                    # one batch of Black-Scholes prices
            cs = [plan.contracts[ci] for ci in closed]
            a = [c.asset if c.underlying == "asset" else 0 for c in cs]
            P = black_scholes_columns(S_out[:, g][:, a], [c.strike for c in cs], [c.maturity - t for c in cs],
                                      model.rate, [float(model.dividend[i]) for i in a],
                                      [float(model.vol[i]) for i in a], [c.payoff == "call" for c in cs])
            blocks.append((closed, P[None], None))
            clock("closed_form")
        if inner:
            g_max = max(int(plan.exercise_index[ci][-1]) for ci in inner)
            S_in = model.sample(grid0[g + 1:g_max + 2], M, seed=seed, purpose="inner", dtype=dtype,
                                xp=xp, start=S_out[:, g], outer=(l0, Lc), date=g, step0=g + 1,
                                antithetic=sim.antithetic)                            # (Lc, M, g_max - g, d)
            clock("inner_paths")
            designed = 0
            for members, later, now, later_only in stacks:
                c = plan.contracts[members[0]]
                if c.underlying == "asset" and model.d > 1:          # Markov in its own asset: regress on it alone
                    assets = [plan.contracts[ci].asset for ci in members]
                    S_c = _asset_steps(S_in, later - g - 1, assets, xp)          # (members Lc, M, N, 1)
                    S_a = S_c[:Lc]                                                 # the first member's
                    payoff = stacked_payoff([plan.contracts[ci] for ci in members], Lc, xp)
                    scale = (np.asarray(model.spot, dtype=float)[assets][:, None] if len(set(assets)) > 1
                             else model.spot[assets[0]:assets[0] + 1])          # each member's own asset's scale
                    psi = basis.make_basis(plan.basis, scale, plan.payoff_regressor, False)
                else:
                    S_a = None
                    S_c, payoff = _steps(S_in, later - g - 1), c.payoff_value
                    psi = basis.make_basis(plan.basis, model.spot, plan.payoff_regressor, c.symmetric_in_assets)
                clock("inner_paths")
                if frozen is not None:                                  # the kept exercise dates: no regressions
                    times, trades = frozen
                    cs = [plan.contracts[ci] for ci in members]
                    vanilla = None if any(x.underlying != "asset" for x in cs) else (
                        np.repeat([float(x.strike) for x in cs], Lc), np.repeat([x.payoff == "call" for x in cs], Lc))
                    res = stopped_cashflows(S_c, plan.grid[later], times.stacked([trades[ci] for ci in members], g),
                                            payoff, model.rate, t0=t, regression_dtype=rdt, timings=timings,
                                            vanilla=vanilla)
                    clock.skip()                                                       # booked by the cashflows
                else:
                    key = "c" + "+".join(map(str, members))
                    res = longstaff_schwartz(S_c, plan.grid[later], payoff, psi, model.rate, t0=t,
                                             solver=solver, itm_only=sim.itm_only, memory=memory, timings=timings,
                                             keys=[f"{key}:r{int(j)}" for j in later], regression_dtype=rdt,
                                             condition_sample=max(0, min(Lc, cond_sample)), splits=splits,
                                             keep_stopping=keep is not None, deferred=deferred)
                    stats.add(g, res, len(members))
                    if keep is not None:
                        keep.add(members, g, res.stopping, Lc, len(later))
                n_design = max(0, min(Lc, cond_sample - COND_SAMPLE + DESIGN_SAMPLE))
                if n_design and designed < DESIGN_STACKS:            # the design matrices of the first paths
                    ci = members[0]
                    one = plan.contracts[ci].payoff_value if S_a is None else stacked_payoff([plan.contracts[ci]],
                                                                                              Lc, xp)
                    psi1 = psi if psi.groups == 1 else replace(psi, scale=psi.scale[0])
                    S_n = (S_c if S_a is None else S_a)[:n_design].copy()        # (read at the chunk's end)
                    sampled.append((g, S_n, one, psi1, n_design))
                    designed += 1
                clock("statistics")
                C_all = xp.concatenate([res.value[None]] + [p.T for p in res.parts])    # (nv, members Lc)
                C_all = C_all.reshape(nv, len(members), Lc).transpose(0, 2, 1)          # (nv, Lc, members)
                if now:                                                  # exercisable at g: payoff or continuation
                    h = _payoff_columns([plan.contracts[members[pos]] for pos in now], S_out[:, g], xp)[None]
                    C = C_all if len(now) == len(members) else C_all[:, :, now]
                    ex = (h > 0) & (h >= C)
                    blocks.append(([members[pos] for pos in now], xp.where(ex, h, C), ex))
                if later_only:
                    blocks.append(([members[pos] for pos in later_only],
                                   C_all if not now else C_all[:, :, later_only], None))
                S_c = S_a = None
            S_in = None
            clock("exercise")
        cis = [ci for cb, _, _ in blocks for ci in cb]          # the date's contracts at once: a few launches
        if cis and k >= 0:
            v = xp.concatenate([xp.broadcast_to(vb, (nv, Lc, len(cb))) for cb, vb, _ in blocks], axis=-1)
            V[:, :, cis, k] = xp.where(alive[:, :, cis], v, 0)
        if mature:
            alive[:, :, mature] = False
        exercised = [(cb, eb) for cb, _, eb in blocks if eb is not None]          # (none of them at maturity)
        if exercised:
            alive[:, :, [ci for cb, _ in exercised for ci in cb]] &= ~xp.concatenate([eb for _, eb in exercised],
                                                                                      axis=-1)
        clock("exercise")
    deferred.read()
    designs = [(g, j, X) for g, S_n, one, psi1, n in sampled               # to the host once the queue has drained
               for j, X in diagnostics.sample(S_n, one, psi1, sim.itm_only, n)]
    if designs:                                                        # analysed together: one stacked call
        rows = diagnostics.analyse([X for _, _, X in designs], cfg.regression.cond_max)
        for (g, j, _), r in zip(designs, rows, strict=True):
            stats.add_design(g, [(j, r)])
        clock("statistics")
    clock.flush()
    return V


def _payoff_columns(contracts, S, xp):
    """(L, n) exercise values of ``contracts`` on a date's slice S (L, d) of the outer paths: one-asset contracts
    in one pass (:func:`cva.instruments.products.stacked_payoff`, the same operations), others one by one."""
    if len(contracts) > 1 and all(c.underlying == "asset" for c in contracts):
        L = S.shape[0]
        U = xp.ascontiguousarray(S[:, [c.asset for c in contracts]].T).reshape(-1, 1, 1)     # (n L, 1, 1)
        return stacked_payoff(contracts, L, xp)(U).reshape(len(contracts), L).T
    return xp.stack([c.payoff_value(S) for c in contracts], axis=-1)


def outer_paths(cfg, plan, model, key0, n, xp=np):
    """The outer paths of keys key0 .. key0 + n - 1 on the plan's grid, (n, G, d) in the run's dtype (the keys of
    :mod:`cva.market.rng`: the same numbers for any chunking, and for :mod:`cva.xva.control`'s draw again)."""
    grid0 = np.concatenate([[0.0], plan.grid])
    return model.sample(grid0, 1, seed=cfg.run.seed, purpose="outer", dtype=np.dtype(cfg.run.dtype), xp=xp,
                        outer=(key0, n), outer_antithetic=cfg.simulation.outer_antithetic)[:, 0]


def timed_chunk(cfg, plan, model, xp, key0, Lc, inner_paths, splits, cond_sample, aggregate=None, pinned=False):
    """:func:`chunk_values` of the outer keys key0 .. key0 + Lc - 1 with its own statistics and stage times:
    (values, stats (:meth:`DateStats.to_state`), timings, seconds, whether every value is finite), as a run keeps a
    chunk (here or on a cluster worker: the check is the worker's, not the client's)."""
    t0 = time.perf_counter()
    stats, timings = DateStats(len(plan.grid)), {s: 0.0 for s in STAGES}
    values, finite = chunk_values(cfg, plan, model, xp, key0, Lc, stats, timings, inner_paths=inner_paths,
                                  splits=splits, cond_sample=cond_sample, aggregate=aggregate, check_finite=True,
                                  pinned=pinned)
    return values, stats.to_state(), timings, time.perf_counter() - t0, finite


def date_schedule(plan, d):
    """Per grid date g of ``plan`` on a market of d assets: (its column in the value cube or -1, the contracts at
    their maturity (valued by their payoff), those valued in closed form, those valued by inner paths, and these in
    their stacks (:func:`_stacks`) as (members, their later exercise dates, the members' positions exercisable at g,
    the others')). The same for every chunk: computed once per plan and d, kept in ``plan.date_schedules``
    (0.05-0.08 s per chunk of the desk benchmark's host time, 400 contracts on 72 dates, on a 2-CPU machine, when it
    was done per chunk)."""
    kept = plan.date_schedules
    if d in kept:
        return kept[d]
    column = -np.ones(len(plan.grid), dtype=int)
    column[plan.value_index] = np.arange(len(plan.value_index))
    rows = []
    for g in range(len(plan.grid)):
        k = int(column[g])
        mature, closed, inner = [], [], []
        for ci, ix in enumerate(plan.exercise_index):
            if g > ix[-1] or (k < 0 and g not in ix):
                continue
            (mature if g == ix[-1] else closed if plan.closed_form[ci] else inner).append(ci)
        stacks = []
        for members in (_stacks(plan, inner, g, d) if inner else []):
            ix = plan.exercise_index[members[0]]
            here = [g in plan.exercise_index[ci] for ci in members]
            stacks.append((members, ix[ix > g], [p for p, h in enumerate(here) if h],
                           [p for p, h in enumerate(here) if not h]))
        rows.append((k, mature, closed, inner, stacks))
    kept[d] = rows
    return rows


def _stacks(plan, inner, g, d):
    """The contracts valued by inner paths at grid date g, in stacks that share one Longstaff-Schwartz call: on a
    market of d > 1 assets, the one-asset contracts with the same later exercise dates, whatever their asset (each
    regressed on its own asset with its own basis scale, bit for bit as alone), as many as
    :func:`stack_size` allows; every other contract alone. Fewer, larger calls: a call's cost is mostly
    fixed (its kernels and the host's reads per exercise date), not its paths'."""
    groups, out = {}, []
    for ci in inner:
        c = plan.contracts[ci]
        if c.underlying == "asset" and d > 1:
            ix = plan.exercise_index[ci]
            groups.setdefault(tuple(int(j) for j in ix[ix > g]), []).append(ci)
        else:
            out.append([ci])
    for later, members in groups.items():
        n = stack_size(len(plan.grid), d, len(later))
        k = -(-len(members) // n)                                    # stacks of equal size: no small last one
        n = -(-len(members) // k)
        out += [members[i:i + n] for i in range(0, len(members), n)]
    return sorted(out)


def stack_size(G, d, N) -> int:
    """The most one-asset contracts of N exercise dates stacked in one call: their slices of the inner paths
    (N dates each) and the call's arrays per path (about 12 of a date's size) take at most twice the inner paths
    of the first date (G d per path) within :func:`cva.engine.plan.bytes_per_outer_path`'s estimate, less the
    assets' own slices (d N); at least d."""
    return max(d, (2 * G * d - d * N) // (N + 12))


def _asset_steps(S, idx, assets, xp):
    """The slices S[:, :, idx, a] (L, M, N) of the assets ``assets`` (one per stacked contract) as one batch
    (len(assets) L, M, N, 1). On the GPU a view of the date-major copy (N, len(assets) L, M) (``cuda/asset_steps.cu``:
    one launch, a path's assets read together), each date's slice contiguous for the Longstaff-Schwartz kernels (a
    desk chunk of 4096 outer paths on an H200: 1.68 -> 1.51 s, the gathers 0.19 -> 0.04 s, the payoffs and
    exercises 0.45 -> 0.39 s; the same bits). On the CPU :func:`asset_steps_twin`'s values, path-major; so too on
    the GPU where a block's 32 paths' assets would not fit its shared memory (d of 384 or more in float32, 192 in
    float64)."""
    L, M, _, d = S.shape
    it, pitch = S.itemsize, d | 1                          # (a path's row in the block's tile: 32 x pitch values)
    if xp is np or 32 * pitch * it > 48 * 1024:
        return asset_steps_twin(S, idx, assets)
    import cupy as cp

    from linalg_gpu._kernels import get_function

    C, N = len(assets), idx.size
    out = cp.empty((N, C, L, M), dtype=S.dtype)
    if out.size:
        index = cp.asarray(np.concatenate([idx, assets]).astype(np.int32))         # (the dates', then the assets')
        get_function("asset_steps.cu", "asset_steps", S.dtype, cuda_dir=CUDA_DIR)(
            (L * -(-M // 32),), (256,),
            (S, *(np.int64(st // it) for st in S.strides), index, index[N:], np.int32(N), np.int32(C), np.int32(d),
             np.int32(pitch), np.int64(L), np.int32(M), out), shared_mem=32 * pitch * it)
    return out.reshape(N, C * L, M, 1).transpose(1, 2, 0, 3)


def asset_steps_twin(S, idx, assets):
    """numpy twin of ``cuda/asset_steps.cu`` (its values; path-major): S[:, :, idx, a] for each a of ``assets``,
    (len(assets) L, M, N, 1), in one gather after one of the dates where they are not consecutive."""
    xp = get_array_module(S)
    if len(assets) == 1:
        return _steps(S[..., assets[0]:assets[0] + 1], idx)
    L, M = S.shape[:2]
    by_asset = xp.moveaxis(_steps(S, idx), -1, 0)                           # (d, L, M, N), a view
    return by_asset[list(assets)].reshape(len(assets) * L, M, idx.size, 1)


def _steps(S, idx):
    """S[:, :, idx] for increasing step indices: a view where they are consecutive (a contract exercisable
    on every later grid date), else a copy (of the inner paths: 3.9 GB per chunk and date in bench_cva's
    float32 configuration)."""
    if idx.size and idx[-1] - idx[0] == idx.size - 1:
        return S[:, :, int(idx[0]):int(idx[-1]) + 1]
    return S[:, :, idx]


# ---------------------------------------------------------------------------------------------
# the run: chunks, resume, measures


class Levels:
    """The levels' per-path values, grown chunk by chunk: computed (and saved), or read back on resume.

    Level l's outer path i has the key l * MLMC_LEVEL_PATHS + i, so the levels are independent and a
    level's paths do not depend on how many the others have. A chunk holds ``chunk`` paths or the rest of a
    request; the requests are a deterministic function of the values, so a resumed run asks for the same
    chunks as the uninterrupted one.
    """

    def __init__(self, cfg, plan, model, xp, out_dir, manifest, chunk, stats, timings, log, bar, resume,
                 executor=None, aggregate=None):
        self.cfg, self.plan, self.model, self.xp, self.executor = cfg, plan, model, xp, executor
        self.aggregate = aggregate                      # applied to each chunk's cube (:func:`chunk_values`)
        self.out_dir, self.hash, self.chunk = out_dir, manifest["config_hash"], chunk
        self.stats, self.timings, self.log, self.bar = stats, timings, log, bar
        self.specs = level_specs(cfg)
        self.cond_level = len(self.specs) - 1                          # the configured finest level
        self.parts = [[] for _ in self.specs]           # per level, its values: chunks, joined by levels()
        self.value_bytes = 0                            # the chunks' values as they came (the run's dtype or float64)
        self.chunks = [0 for _ in self.specs]           # per level, the chunks so far (the next chunk's index)
        self.seconds = [0.0] * len(self.specs)
        self.loaded = {}
        self._saver, self._saves, self._lock = None, [], threading.Lock()        # the chunk files being written
        if resume:
            for li in range(len(self.specs)):
                self.loaded[li] = rundir.load_chunks(out_dir, self.hash, li)

    def add_level(self):
        m, _ = self.specs[-1]
        self.specs.append((2 * m, 1))
        self.parts.append([])
        self.chunks.append(0)
        self.seconds.append(0.0)
        self.loaded[len(self.specs) - 1] = (rundir.load_chunks(self.out_dir, self.hash, len(self.specs) - 1)
                                            if self.loaded else [])

    def have(self, li) -> int:
        return sum(p.shape[1] for p in self.parts[li])

    def ensure(self, li, n):
        """Level ``li`` has at least ``n`` outer paths (:meth:`ensure_all`)."""
        self.ensure_all({li: n})

    def ensure_all(self, wants):
        """Each level ``li`` of ``wants`` {li: n} has at least ``n`` outer paths: the chunks still missing are read
        back (resume), computed here one after the other, level by level, or computed on the cluster of
        ``executor`` (:mod:`cva.engine.cluster`) as tasks, every level's at once (so that no worker waits for a
        level's last chunks while another level's could run), and taken in order; either way the same values."""
        plans = {}
        for li, n in wants.items():
            if n > MLMC_LEVEL_PATHS:
                raise ValueError(f"level {li} of the estimator needs {n} outer paths, more than {MLMC_LEVEL_PATHS}: "
                                 f"ask for a larger simulation.target_rmse or fewer outer paths")
            requests, l0 = [], self.have(li)
            while l0 < n:
                Lc = min(self.chunk, n - l0)
                requests.append((self.chunks[li] + len(requests), l0, Lc))
                l0 += Lc
            plans[li] = requests
        todo = [(li, i, l0, Lc) for li, requests in plans.items() for i, l0, Lc in requests
                if i >= len(self.loaded.get(li, []))]
        done = self._distributed(todo) if self.executor is not None and todo else {}
        for li, requests in plans.items():
            self._take(li, requests, done)

    def _take(self, li, requests, done):
        """Level ``li``'s chunks ``requests`` [(index, l0, Lc)] in order: read back, taken from ``done`` {(li,
        index): chunk} (the cluster's), or computed here."""
        saved = self.loaded.get(li, [])
        for i, l0, Lc in requests:
            if i < len(saved):
                values, meta = saved[i]
                if meta.get("l0") != l0 or values.shape[1] != Lc:
                    raise rundir.ResumeError(f"cannot resume {self.out_dir}: {rundir.chunk_path(self.out_dir, li, i)} "
                                             f"holds outer paths {meta.get('l0')}.. ({values.shape[1]}), this run "
                                             f"asks for {l0}.. ({Lc}); run without --resume")
                self.stats.merge_state({"rows": meta["stats"], **meta["arrays"]})
                with self._lock:                                   # (a background write may book its io)
                    _add_timings(self.timings, meta["timings"])
                self.seconds[li] += meta["seconds"]
                self.parts[li].append(values)
                self.value_bytes += values.nbytes
                self.chunks[li] += 1
                self._tick()
                continue
            values, stats, timings, seconds = done[li, i] if (li, i) in done else self._compute(li, l0, Lc)
            if self.executor is None:
                self._save_later(li, i, l0, values, stats, timings, seconds)
            self.stats.merge_state(stats)
            with self._lock:
                _add_timings(self.timings, timings)
            self.seconds[li] += seconds
            self.parts[li].append(values)
            self.value_bytes += values.nbytes
            self.chunks[li] += 1
            if self.executor is None:
                self._tick(f"level {li} ({self.specs[li][0]} inner paths): outer paths {l0}..{l0 + Lc - 1} in "
                           f"{seconds:.2f} s")

    def _cond_sample(self, li, l0):
        return COND_SAMPLE - l0 if li == self.cond_level else 0

    def _compute(self, li, l0, Lc):
        """One chunk in this process: (values, stats, timings, seconds)."""
        M, splits = self.specs[li]
        try:
            out = timed_chunk(self.cfg, self.plan, self.model, self.xp, li * MLMC_LEVEL_PATHS + l0, Lc, M, splits,
                              self._cond_sample(li, l0), self.aggregate)
        except MemoryError as exc:
            need = bytes_per_outer_path(self.plan, self.model.d, np.dtype(self.cfg.run.dtype).itemsize) * Lc / 2**30
            fix = "simulation.inner_paths" + ("" if Lc <= 2 else " or the chunk (--chunk, simulation.chunk)")
            raise MemoryError(f"out of memory in level {li} ({Lc} outer x {M} inner paths, outer paths {l0}.."
                              f"{l0 + Lc - 1}, about {need:,.1f} GiB by the chunk estimate): {exc}; lower {fix}"
                              ) from exc
        self._check_finite(out[4], li, l0, Lc)
        return out[:4]

    def _check_finite(self, finite, li, l0, Lc):
        if not finite:
            raise ValueError(f"the netting-set values are not finite (level {li}, outer paths {l0}..{l0 + Lc - 1}): "
                             f"an input overflows {self.cfg.run.dtype} (spot, strike, quantity or vol too large)")

    def _save(self, li, i, l0, values, stats, timings, seconds):
        t_io = time.perf_counter()
        rundir.save_chunk(self.out_dir, li, i, values, {"l0": l0, "stats": stats["rows"], "timings": timings,
                                                        "seconds": seconds}, self.hash,
                          {k: stats[k] for k in DateStats.ARRAYS})
        with self._lock:
            self.timings["io"] = self.timings.get("io", 0.0) + time.perf_counter() - t_io

    def _save_later(self, li, i, l0, values, stats, timings, seconds):
        """A chunk's file written in the background (``SAVE_THREADS`` threads) while the next chunks are computed or
        received; at most ``SAVE_THREADS`` writes queued. A failed write stops the run at the next chunk if it has
        ended by then, at the latest once ``SAVE_THREADS`` more chunks have come."""
        if self.out_dir is None:
            return
        if self._saver is None:
            self._saver = ThreadPoolExecutor(max_workers=SAVE_THREADS)
        while self._saves and (self._saves[0].done() or len(self._saves) >= SAVE_THREADS):
            self._saves.pop(0).result()
        self._saves.append(self._saver.submit(self._save, li, i, l0, values, stats, timings, seconds))

    def finish(self):
        """Wait for the chunk files still being written (a failed write raises its error); the run's summary comes
        after them. Also on an interrupted run: the chunks computed are written for ``--resume``. Every write is
        waited for; the first failure is raised."""
        saves, self._saves = self._saves, []
        try:
            failed = None
            for save in saves:
                try:
                    save.result()
                except Exception as exc:                                       # the first one is raised
                    failed = failed or exc
            if failed is not None:
                raise failed
        finally:
            if self._saver is not None:
                self._saver.shutdown(wait=True)
                self._saver = None

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        if kind is None:
            self.finish()
        else:                                             # the run's error, not a write's: the chunks computed are
            with contextlib.suppress(Exception):          # still written (for --resume)
                self.finish()

    def _distributed(self, todo) -> dict:
        """The chunks ``todo`` [(level, index, l0, Lc)] as cluster tasks, submitted at once: each saved as it arrives
        (:meth:`_save_later`; a resume takes each level's finished prefix), returned by (level, index); an interrupt
        cancels the rest (the chunks received are still written: :meth:`finish`)."""
        futures = {self.executor.submit(li, i, li * MLMC_LEVEL_PATHS + l0, Lc, *self.specs[li],
                                        self._cond_sample(li, l0), self.aggregate): (li, i, l0, Lc)
                   for li, i, l0, Lc in todo}
        build = getattr(self.aggregate, "build", None)              # the client's own aggregation (its book), built
        if build is not None:                                       # while the workers compute
            build()
        done = {}
        try:
            for future, (values, stats, timings, seconds, finite) in self.executor.completed(list(futures)):
                li, i, l0, Lc = futures[future]
                self._check_finite(finite, li, l0, Lc)
                self._save_later(li, i, l0, values, stats, timings, seconds)
                done[li, i] = (values, stats, timings, seconds)
                self._tick(f"level {li} ({self.specs[li][0]} inner paths): outer paths {l0}..{l0 + Lc - 1} in "
                           f"{seconds:.2f} s (cluster task)")
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return done

    def _tick(self, line=None):
        if self.bar is not None:
            self.bar.update(1)
        elif line:
            self.log(line)

    def levels(self, values=None) -> list[Level]:
        """The levels so far; with ``values``, each level's sets mapped by it (the chunks' values, the value cube or
        its aggregate, to the netted values).
        A level's chunks are joined once, in float64 (a float32 run's are kept in float32: :class:`cva.xva.desk.Book`),
        and kept joined (the cube is not copied again by the next call)."""
        out = []
        for li, (m, splits) in enumerate(self.specs):
            if len(self.parts[li]) > 1 or self.parts[li][0].dtype != np.float64:
                self.parts[li] = [np.concatenate(self.parts[li], axis=1, dtype=np.float64)]
            sets = self.parts[li][0]
            out.append(Level(li, m, splits, sets if values is None else values(sets), self.seconds[li],
                             paired=self.cfg.simulation.outer_antithetic))
        return out


def sample_levels(cfg, lv, g, log, values=None) -> list[str]:
    """Grow the levels to the estimator's plan: ``outer_paths`` on the one level of ``plain`` and
    ``extrapolated``; for ``mlmc`` the fixed ``level_paths``, else the MLMC allocation (Giles 2008) for the
    target variance, iterated on the measured variances from ``pilot_paths`` per level on, at most
    :data:`MLMC_ITERATIONS` times; with ``target_rmse``, levels are added (rounds of their own, as far as
    ``max_inner_paths``) while the remaining bias exceeds target / sqrt(2). ``g`` is taken of the levels' sets
    mapped by ``values`` (:meth:`Levels.levels`). Returns the warnings of a target not met (also logged)."""
    sim = cfg.simulation
    if sim.estimator != "mlmc":
        lv.ensure(0, sim.outer_paths)
        return []
    if sim.level_paths is not None:
        lv.ensure_all(dict(enumerate(sim.level_paths)))
        return []
    pilot = min(sim.pilot_paths, sim.outer_paths)
    lv.ensure_all({li: pilot for li in range(len(lv.specs))})
    rounds, warnings = 0, []
    while True:
        levels = lv.levels(values)
        rows = level_table(levels, g, "mlmc")
        res = combine(levels, g, "mlmc")
        if not all(np.isfinite([r["variance"] for r in rows] + [res["estimate"]])):
            raise ValueError(f"the run's results are not finite (cva = {res['estimate']}): an input overflows "
                             f"{cfg.run.dtype} (spot, strike, quantity or vol too large)")
        short = None
        if sim.target_rmse is None:                       # the outer-sampling error of a plain run of outer_paths
            target_variance = rows[-1]["fine_variance"] / sim.outer_paths
        else:
            eps = _absolute_rmse(sim.target_rmse, res["estimate"])
            rem = abs(res["remaining_bias"]) + res["remaining_stderr"]
            if rem > eps / math.sqrt(2):
                if 2 * lv.specs[-1][0] <= sim.max_inner_paths:
                    lv.add_level()
                    lv.ensure(len(lv.specs) - 1, pilot)
                    log(f"mlmc: remaining bias {rem:.3g} > target / sqrt(2) = {eps / math.sqrt(2):.3g}: "
                        f"level {len(lv.specs) - 1} with {lv.specs[-1][0]} inner paths added")
                    continue
                short = (f"simulation.target_rmse: not met: the remaining bias and its error ({rem:.3g}) exceed "
                         f"target / sqrt(2) = {eps / math.sqrt(2):.3g}, and the finest level's {lv.specs[-1][0]} "
                         f"inner paths cannot double within max_inner_paths ({sim.max_inner_paths})")
            target_variance = eps ** 2 / 2
        weights = [r["weight"] for r in rows]
        want = allocate([r["variance"] for r in rows], [r["cost_per_path"] for r in rows], weights,
                        max(target_variance, 1e-300))
        if sim.outer_antithetic:
            want = [n + n % 2 for n in want]                                           # whole pairs
        done = all(lv.have(li) >= n for li, n in enumerate(want))
        if done or rounds == MLMC_ITERATIONS:
            if not done:
                warnings.append(f"the MLMC allocation still asked for more outer paths after {rounds} "
                                f"round{'' if rounds == 1 else 's'} ("
                                + ", ".join(f"{lv.have(li)} -> {n}" for li, n in enumerate(want))
                                + "): the variance target is not met")
            warnings += [short] if short else []
            for w in warnings:
                log(f"warning: {w}")
            return warnings
        rounds += 1
        log("mlmc: outer paths per level " + ", ".join(f"{lv.have(li)} -> {max(n, lv.have(li))}"
                                                     for li, n in enumerate(want)))
        lv.ensure_all(dict(enumerate(want)))


MLMC_ITERATIONS = 6        # rounds of the MLMC allocation on the variances measured so far


def _absolute_rmse(target, estimate) -> float:
    if isinstance(target, str):
        return abs(estimate) * float(target.strip()[:-1]) / 100 or 1e-300
    return float(target)


def _add_timings(total, part):
    for k, v in part.items():
        total[k] = total.get(k, 0.0) + v


