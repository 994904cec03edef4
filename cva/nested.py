"""The nested Monte Carlo engine of paper 001, section 2: exposures of a netting set with
Bermudan contracts, and the CVA.

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

Every random number is keyed by (seed, outer path, date, inner path, asset) (:mod:`cva.rng`),
so the per-path numbers do not depend on the chunking; the solver memory is per outer path
(keyed by contract and regression date, see :func:`chunk_values`), so neither does the method
chosen for a path's regressions, and a resumed run is bitwise the uninterrupted one.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import linalg_gpu as lg
from cva import basis, measures, rundir
from cva.analytic import black_scholes_array
from cva.backend import resolve_backend
from cva.config import grid_key, load_config
from cva.credit import Counterparty
from cva.lsm import StageClock, longstaff_schwartz
from cva.model import BlackScholes
from cva.products import Contract
from cva.rundir import ResumeError, RunDirectoryError  # noqa: F401  (re-exported)
from linalg_gpu._backend import to_host as _host

STAGES = ("outer_paths", "closed_form", "inner_paths", "assembly", "conditions", "solve", "exercise", "statistics",
          "io")
COND_SAMPLE = 256          # outer paths (the first, whatever the chunking) whose regression matrices' condition
                           # numbers are computed per (contract, date) (cuSOLVER's syevj on 256 matrices per call
                           # was ~40% of the assembly stage when done in every chunk of bench_cva on an H100)
CPU_CHUNK_BYTES = 256 << 20
GPU_MEMORY_FRACTION = 0.25


@dataclass
class Plan:
    """The static layout of a run: grid, exposure dates, contracts, path counts."""

    grid: np.ndarray                  # (G,) grid times on (0, T]
    exposure_index: np.ndarray        # (K,) grid index of each exposure date
    contracts: list                   # [Contract]
    exercise_index: list              # per contract: grid indices of its exercise dates (last = maturity)
    closed_form: list                 # per contract: valued by Black-Scholes (European on one asset)
    outer_paths: int
    inner_paths: int
    basis: str
    payoff_regressor: bool

    @property
    def dates(self) -> np.ndarray:
        return self.grid[self.exposure_index]


def build_plan(cfg) -> Plan:
    """The plan of a validated config (its grid's size and distinct dates are checked by :mod:`cva.config`)."""
    contracts = [Contract.from_config(c) for c in cfg.portfolio]
    keys, T = cfg.grid_keys()                                      # dates equal to 12 digits relative to T
    grid = keys * T

    def index(t):
        return np.searchsorted(keys, grid_key(t, T))

    return Plan(grid=grid, exposure_index=index(cfg.exposure_times()), contracts=contracts,
                exercise_index=[index(c.exercise_times()) for c in contracts],
                closed_form=[c.is_european and (c.underlying == "asset" or cfg.d == 1) for c in contracts],
                outer_paths=cfg.simulation.outer_paths, inner_paths=cfg.simulation.inner_paths_for(),
                basis=cfg.simulation.basis, payoff_regressor=cfg.simulation.payoff_regressor)


def bytes_per_outer_path(plan, d, itemsize) -> int:
    """The memory estimate per outer path of a chunk: the inner paths of the first date and their regressions."""
    p = basis.basis_size(plan.basis, d, plan.payoff_regressor)
    return plan.inner_paths * itemsize * (5 * len(plan.grid) * d + 4 * p + 8)


def chunk_size(plan, d, itemsize, xp) -> int:
    """Outer paths per chunk from the memory the inner paths of the first date need (at least 2: a chunk of
    one path rounds a basket's average differently, and its values would depend on the chunking)."""
    if xp is np:
        budget = CPU_CHUNK_BYTES
    else:
        free, _ = xp.cuda.runtime.memGetInfo()
        budget = GPU_MEMORY_FRACTION * (free + xp.get_default_memory_pool().free_bytes())
    return int(max(2, min(plan.outer_paths, budget // bytes_per_outer_path(plan, d, itemsize))))


class DateStats:
    """Solver statistics per grid date (the valuation date of the inner problems): ``regressions`` counts the
    (contract, exercise date) regressions, each solved once per outer path (``systems``), whatever the chunks."""

    def __init__(self, G):
        self.rows = [{"systems": 0, "ldlt": 0, "householder_pcr": 0, "eig_truncate": 0, "none": 0,
                      "max_residual": 0.0, "discarded": 0, "failed": 0, "regressions": 0} for _ in range(G)]
        self.cond = [[] for _ in range(G)]

    def add(self, g, result):
        row = self.rows[g]
        for rep, cond in zip(result.reports, result.conditions, strict=False):
            if rep is None:
                continue
            res = _host(rep.residual)
            row["systems"] += int(res.size)
            row["regressions"] += 1
            for k, v in rep.counts().items():
                row[k] += v
            fin = res[np.isfinite(res)]
            row["max_residual"] = max(row["max_residual"], float(fin.max()) if fin.size else 0.0)
            row["discarded"] += int(_host(rep.n_discarded).sum())
            row["failed"] += int((~_host(rep.ok)).sum())
            if cond is not None:
                self.cond[g].extend(np.asarray(cond, dtype=float).tolist())

    def to_json(self):
        return {"rows": self.rows, "cond": self.cond}

    def merge_json(self, state):
        for g, (row, cond) in enumerate(zip(state["rows"], state["cond"], strict=False)):
            mine = self.rows[g]
            for k, v in row.items():
                mine[k] = max(mine[k], v) if k in ("max_residual", "regressions") else mine[k] + v
            self.cond[g].extend(cond)


def chunk_values(cfg, plan, model, xp, l0, Lc, stats, timings):
    """Netting-set values P (Lc, K) on outer paths l0 .. l0 + Lc - 1 (host, float64).

    The solver memory is per system (``SolverMemory(per_system=True)``) and keyed by contract and
    regression date: each outer path's regression at exercise date t_j starts, at the next
    valuation date, with the method it needed at the previous one (the paper's "next time").
    Per path, it is path-local history, so the values do not depend on the chunking.
    """
    dtype = np.dtype(cfg.run.dtype)
    sim, seed = cfg.simulation, cfg.run.seed
    solver = {"method": cfg.regression.method, "cond_max": cfg.regression.cond_max, "rtol": cfg.regression.rtol}
    rdt = cfg.regression_dtype()
    G, K = len(plan.grid), len(plan.exposure_index)
    grid0 = np.concatenate([[0.0], plan.grid])
    exposure_pos = -np.ones(G, dtype=int)
    exposure_pos[plan.exposure_index] = np.arange(K)
    clock = StageClock(xp, timings)
    S_out = model.sample(grid0, 1, seed=seed, purpose="outer", dtype=dtype, xp=xp, outer=(l0, Lc))[:, 0]  # (Lc, G, d)
    clock("outer_paths")
    P = xp.zeros((Lc, K), dtype=np.float64)
    alive = [xp.ones(Lc, dtype=bool) for _ in plan.contracts]
    memory = lg.SolverMemory(per_system=True)
    for g in range(G):
        t, k = plan.grid[g], exposure_pos[g]
        values, inner = {}, []
        for ci, c in enumerate(plan.contracts):
            ex_idx = plan.exercise_index[ci]
            if g > ex_idx[-1] or (k < 0 and g not in ex_idx):
                continue
            if g == ex_idx[-1]:
                values[ci] = (c.payoff_value(S_out[:, g]), None)                        # at maturity: the payoff
            elif plan.closed_form[ci]:
                a = c.asset if c.underlying == "asset" else 0
                values[ci] = (black_scholes_array(S_out[:, g, a], c.strike, c.maturity - t, model.rate,
                                                  model.dividend[a], model.vol[a], c.payoff), None)
                clock("closed_form")
            else:
                inner.append(ci)
        if inner:
            g_max = max(int(plan.exercise_index[ci][-1]) for ci in inner)
            S_in = model.sample(grid0[g + 1:g_max + 2], plan.inner_paths, seed=seed, purpose="inner", dtype=dtype,
                                xp=xp, start=S_out[:, g], outer=(l0, Lc), date=g, step0=g + 1,
                                antithetic=sim.antithetic)                            # (Lc, M, g_max - g, d)
            clock("inner_paths")
            for ci in inner:
                c = plan.contracts[ci]
                later = plan.exercise_index[ci][plan.exercise_index[ci] > g]
                psi = basis.make_basis(plan.basis, model.spot, plan.payoff_regressor, c.symmetric_in_assets)
                S_c = _steps(S_in, later - g - 1)
                clock("inner_paths")
                res = longstaff_schwartz(
                    S_c, plan.grid[later], c.payoff_value, psi,
                    model.rate, t0=t, solver=solver, itm_only=sim.itm_only, memory=memory,
                    keys=[f"c{ci}:r{int(j)}" for j in later], timings=timings,
                    condition_sample=max(0, min(Lc, COND_SAMPLE - l0)),
                    regression_dtype=rdt)
                S_c = None
                clock.skip()                                                           # booked by the LSM
                stats.add(g, res)
                clock("statistics")
                C = res.value                                                          # (Lc,) continuation
                if g in plan.exercise_index[ci]:
                    h = c.payoff_value(S_out[:, g])
                    ex = (h > 0) & (h >= C)
                    values[ci] = (xp.where(ex, h, C), ex)
                else:
                    values[ci] = (C, None)
            S_in = None
            clock("exercise")
        for ci, (v, ex) in values.items():
            if k >= 0:
                P[:, k] += plan.contracts[ci].quantity * xp.where(alive[ci], v, 0).astype(np.float64)
            if g == plan.exercise_index[ci][-1]:
                alive[ci] = xp.zeros(Lc, dtype=bool)
            elif ex is not None:
                alive[ci] = alive[ci] & ~ex
        clock("exercise")
    P = _host(P)
    clock("io")                                                                        # (to the host)
    return P


def _steps(S, idx):
    """S[:, :, idx] for increasing step indices: a view where they are consecutive (a contract exercisable
    on every later grid date), else a copy (of the inner paths: 3.9 GB per chunk and date in bench_cva's
    float32 configuration)."""
    if idx.size and idx[-1] - idx[0] == idx.size - 1:
        return S[:, :, int(idx[0]):int(idx[-1]) + 1]
    return S[:, :, idx]


# ---------------------------------------------------------------------------------------------
# the run: chunks, resume, measures


@dataclass
class RunResult:
    """What ``cva.run`` returns (the numbers of ``summary.json`` plus the per-path values)."""

    cva: float
    stderr: float
    ci: tuple
    exposures: pd.DataFrame
    solver_stats: pd.DataFrame
    summary: dict
    out_dir: Path
    values: np.ndarray = field(repr=False)            # (L, K) netting-set value per outer path and date
    contributions: np.ndarray = field(repr=False)     # (L,) per-path CVA contributions


def _progress(total, initial, enabled):
    if enabled and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, unit="chunk", desc="outer chunks")
    return None


def run(config, out=None, backend=None, resume=False, chunk=None, progress=True, log=None, overwrite=False,
        keep_chunks=False) -> RunResult:
    """Run the nested Monte Carlo CVA of ``config`` and write the run directory (:mod:`cva.rundir`).

    Parameters
    ----------
    config : path to a YAML file, a dict or a :class:`cva.config.Config`.
    out : run directory (default ``output.dir`` of the config, else ``reports/<run.name>``).
    backend : "auto" | "cpu" | "gpu" (default ``run.backend``); ``auto`` says which it took.
    resume : continue the run in ``out`` from its last finished chunk, or finish its report (same config but
        for the keys of :data:`cva.rundir.UNHASHED`, chunk size, backend and dtype; else a
        :class:`~cva.rundir.ResumeError` names what changed); the result is bitwise the uninterrupted one.
    chunk : outer paths per chunk, >= 2 (default ``simulation.chunk``, else with ``resume`` the interrupted
        run's, else from free memory).
    progress : a bar over the chunks on a terminal, else a log line per chunk; False prints nothing.
    log : callable for the log lines (default: print to stderr).
    overwrite : replace the earlier run in a non-empty ``out`` (else a :class:`~cva.rundir.RunDirectoryError`).
    keep_chunks : keep the chunk files after the run is complete (default: removed).
    """
    from cva import report

    if log is None:
        log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else (lambda msg: None)
    cfg = load_config(config)
    cp_cfg = cfg.require_counterparty()
    xp, device = resolve_backend(backend or cfg.run.backend)
    model = BlackScholes.from_market(cfg.market)
    counterparty = Counterparty.from_config(cp_cfg, model.rate)
    plan = build_plan(cfg)
    dtype = np.dtype(cfg.run.dtype)
    if chunk is not None and int(chunk) < 2:
        raise ValueError(f"chunk must be >= 2, got {chunk}")
    out_dir = Path(out or cfg.output.dir or f"reports/{cfg.run.name}")
    if resume and not (out_dir / rundir.MANIFEST).exists():
        rundir.read_manifest(out_dir / rundir.MANIFEST)                      # the one-line "does not exist"
    out_dir.mkdir(parents=True, exist_ok=True)
    with rundir.locked(out_dir):
        old = rundir.read_manifest(out_dir / rundir.MANIFEST) if resume else None
        chunk = int(chunk or cfg.simulation.chunk or (old or {}).get("chunk")           # the interrupted run's
                    or chunk_size(plan, model.d, dtype.itemsize, xp))
        L = plan.outer_paths
        n_chunks = -(-L // chunk)
        manifest = {"config_hash": rundir.config_hash(cfg), "chunk": chunk, "outer_paths": L, "chunks": n_chunks,
                    "backend": "cpu" if xp is np else "gpu", "dtype": dtype.name, "config": rundir.hashed_config(cfg)}
        stats, timings, parts = DateStats(len(plan.grid)), {s: 0.0 for s in STAGES}, []
        if resume:
            rundir.check_resumable(out_dir, old, manifest)
            if rundir.read_summary_status(out_dir) == "complete":
                raise rundir.ResumeError(f"cannot resume {out_dir}: the run is complete (summary.json); use "
                                         f"--overwrite to run it again")
            for P, meta in rundir.load_chunks(out_dir, manifest):
                parts.append(P)
                stats.merge_json(meta["stats"])
                _add_timings(timings, meta["timings"])
            log(f"resuming {out_dir}: {len(parts)} of {n_chunks} chunks done")
        else:
            rundir.start_fresh(out_dir, report.OUTPUTS, overwrite)
            (out_dir / rundir.CHUNKS).mkdir(exist_ok=True)
            rundir.write_text(out_dir / rundir.MANIFEST, json.dumps(manifest, indent=2))
        log(f"cva run {cfg.run.name}: backend {device}; {L} outer x {plan.inner_paths} inner paths, "
            f"{len(plan.grid)} grid dates, {n_chunks} chunk(s) of {chunk}")
        t_start = time.perf_counter()
        bar = _progress(n_chunks, len(parts), progress)
        try:
            for i in range(len(parts), n_chunks):
                l0 = i * chunk
                Lc = min(chunk, L - l0)
                t0 = time.perf_counter()
                chunk_stats, chunk_timings = DateStats(len(plan.grid)), {s: 0.0 for s in STAGES}
                try:
                    P = chunk_values(cfg, plan, model, xp, l0, Lc, chunk_stats, chunk_timings)
                except MemoryError as exc:
                    need = bytes_per_outer_path(plan, model.d, dtype.itemsize) * Lc / 2**30
                    fix = "simulation.inner_paths" + ("" if Lc <= 2 else " or the chunk (--chunk, simulation.chunk)")
                    raise MemoryError(f"out of memory in chunk {i + 1} of {n_chunks} ({Lc} outer x "
                                      f"{plan.inner_paths} inner paths, about {need:,.1f} GiB by the chunk "
                                      f"estimate): {exc}; lower {fix}") from exc
                t_io = time.perf_counter()
                rundir.save_chunk(out_dir, i, P, {"l0": l0, "stats": chunk_stats.to_json(),
                                                  "timings": chunk_timings}, manifest["config_hash"])
                chunk_timings["io"] += time.perf_counter() - t_io
                stats.merge_json(chunk_stats.to_json())
                _add_timings(timings, chunk_timings)
                parts.append(P)
                if bar is not None:
                    bar.update(1)
                elif progress:
                    log(f"chunk {i + 1}/{n_chunks}: outer paths {l0}..{l0 + Lc - 1} in "
                        f"{time.perf_counter() - t0:.2f} s")
        finally:
            if bar is not None:
                bar.close()
        elapsed = time.perf_counter() - t_start
        values = np.concatenate(parts, axis=0)                                           # (L, K)
        result = report.finish(cfg, plan, model, counterparty, values, stats, timings, out_dir,
                               device=device, chunk=chunk, elapsed=elapsed, manifest=manifest)
        if not keep_chunks:
            rundir.remove_chunks(out_dir)
    return result


def _add_timings(total, part):
    for k, v in part.items():
        total[k] = total.get(k, 0.0) + v


def exposures_and_cva(plan, model, counterparty, values):
    """The exposure profile (DataFrame), the CVA estimate and the per-path contributions."""
    dates = plan.dates
    q = counterparty.curve.default_probabilities(dates)
    contrib = measures.cva_contributions(values, dates, model.rate, q, counterparty.recovery)
    prof = measures.exposure_profile(values, dates)
    prof["discount"] = np.exp(-model.rate * dates)
    prof["survival"] = counterparty.curve.survival(dates)
    prof["default_prob"] = q
    prof["cva_contribution"] = (1 - counterparty.recovery) * prof["discount"] * prof["EE"] * q
    return prof, measures.cva_estimate(contrib), contrib
