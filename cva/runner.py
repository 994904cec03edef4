"""``cva.run``: a run from its config to its run directory. The plan and the engine's levels of per-path values
(:mod:`cva.engine`), the estimate and the measures (:mod:`cva.xva`), the files (:mod:`cva.io`)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from cva.backend import check_backend_name, resolve_backend
from cva.engine.cluster import Executor, connected, is_client, workers, workers_backend
from cva.engine.nested import STAGES, DateStats, Levels, sample_levels
from cva.engine.plan import (
    COST_LIMIT_SECONDS,
    build_plan,
    bytes_per_outer_path,
    chunk_size,
    describe_cost,
    level_specs,
    memory_bytes,
    run_cost,
)
from cva.engine.pricing import price
from cva.io import desk_report, report, rundir
from cva.io.config import load_config, whole_number
from cva.io.report import RunResult
from cva.market.model import BlackScholes
from cva.xva.aggregation import Aggregation
from cva.xva.control import european_twin
from cva.xva.credit import Counterparty, run_credits, shifted
from cva.xva.measures import cva_functional


def _progress(total, initial, enabled):
    if enabled and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, unit="chunk", desc="outer chunks")
    return None


def run(config, out=None, backend=None, resume=False, chunk=None, progress=True, log=None, overwrite=False,
        keep_chunks=False, confirm=False, write=True, cluster=None) -> RunResult:
    """Run the nested Monte Carlo CVA of ``config`` and write the run directory (:mod:`cva.io.rundir`).

    The estimator (``simulation.estimator``, :mod:`cva.engine.estimators`) removes the bias of the finite inner
    sample and says how much remains; its interval accounts for it.

    Parameters
    ----------
    config : path to a YAML file, a dict or a :class:`cva.io.config.Config`.
    out : run directory (default ``output.dir`` of the config, else ``reports/<run.name>``).
    backend : "auto" | "cpu" | "gpu" (default ``run.backend``); ``auto`` says which it took.
    resume : continue the run in ``out`` from its last finished chunk, or finish its report (same config but
        for the keys of :data:`cva.io.rundir.UNHASHED`, chunk size, backend and dtype; else a
        :class:`~cva.io.rundir.ResumeError` names what changed); the result is bitwise the uninterrupted one.
    chunk : outer paths per chunk, >= 2 (default ``simulation.chunk``, else with ``resume`` the interrupted
        run's, else from free memory).
    progress : a bar over the chunks on a terminal, else a log line per chunk; False prints nothing.
    log : callable for the log lines (default: print to stderr).
    overwrite : replace the earlier run in a non-empty ``out`` (else a :class:`~cva.io.rundir.RunDirectoryError`).
    keep_chunks : keep the chunk files after the run is complete (default: removed).
    confirm : run even when :func:`run_cost` estimates more than :data:`COST_LIMIT_SECONDS` (else a ValueError).
    write : False computes the result without a run directory (no files, no resume; ``result.out_dir`` None).
    cluster : run the outer chunks as tasks on dask.distributed (default ``run.cluster``): ``"local"``,
        ``"local:N"``, ``"local-cuda"``, a scheduler address, or a ``distributed.Client``
        (:mod:`cva.engine.cluster`); the values are bitwise those of one process.
    """
    _check_arguments(out=out, log=log, cluster=cluster, resume=resume, progress=progress, overwrite=overwrite,
                     keep_chunks=keep_chunks, confirm=confirm, write=write)
    chunk = None if chunk is None else whole_number(chunk, "chunk", 2)
    if log is None:
        log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else (lambda msg: None)
    cfg = load_config(config)
    if isinstance(cluster, str):                          # checked as run.cluster is (one line naming it)
        data = cfg.to_dict()
        load_config({**data, "run": {**data.get("run", {}), "cluster": cluster}})
    name = backend or cfg.run.backend
    spec = cluster if cluster is not None else cfg.run.cluster
    if spec is None:
        xp, device = resolve_backend(name)
        kind = "cpu" if xp is np else "gpu"
    else:            # the workers resolve it (below); the client's arrays are numpy's, and it needs no GPU
        xp, device = np, None
        kind = "cpu" if check_backend_name(name) == "cpu" else "gpu"        # (auto: checked again with the workers')
    model = BlackScholes.from_market(cfg.market)
    credits, own = run_credits(cfg, model.rate)              # (before the run starts: a curve that cannot be met)
    plan = build_plan(cfg)
    dtype = np.dtype(cfg.run.dtype)
    cost = _check_run(cfg, plan, kind, confirm)
    if not write and (resume or keep_chunks):
        raise ValueError("write=False keeps no run directory: it cannot resume or keep chunks")
    out_dir = Path(out or cfg.output.dir or f"reports/{cfg.run.name}") if write else None
    if resume and not (out_dir / rundir.MANIFEST).exists():
        rundir.read_manifest(out_dir / rundir.MANIFEST)                      # the one-line "does not exist"
    if write:
        out_dir.mkdir(parents=True, exist_ok=True)
    with rundir.locked(out_dir) if write else contextlib.nullcontext(), connected(spec) as client:
        executor, n_workers = None, None
        if client is not None:
            found, device = workers_backend(client, name)
            if found != kind:                                                # auto on workers without GPUs
                kind = found
                cost = _check_run(cfg, plan, kind, confirm)
            executor, n_workers = Executor(client, cfg, kind), workers(client)
            log(f"cluster: {n_workers} workers ({client.scheduler.address})")
        old = rundir.read_manifest(out_dir / rundir.MANIFEST) if resume else None
        on_workers = executor is not None and kind == "gpu"               # (sized by the workers' GPUs)
        free = executor.free_device_bytes() if on_workers else None
        source = ("chunk" if chunk else "simulation.chunk" if cfg.simulation.chunk else
                  "the interrupted run's chunk (run.json)" if (old or {}).get("chunk") else None)
        chunk = int(chunk or cfg.simulation.chunk or (old or {}).get("chunk")           # the interrupted run's
                    or chunk_size(plan, model.d, dtype.itemsize, None if on_workers else xp, n_workers, free))
        if executor is None or on_workers:                    # (a CPU cluster's workers' memory is theirs to know)
            _check_memory(cfg, plan, model.d, dtype.itemsize, chunk, memory_bytes(None if on_workers else xp, free),
                          kind, on_workers, source)
        manifest = {"config_hash": rundir.config_hash(cfg), "chunk": chunk, "estimator": cfg.simulation.estimator,
                    "backend": kind, "dtype": dtype.name, "config": rundir.hashed_config(cfg),
                    "chunk_values": rundir.CHUNK_VALUES}
        if resume:
            rundir.check_resumable(out_dir, old, manifest)
            if rundir.read_summary_status(out_dir) == "complete":
                raise rundir.ResumeError(f"cannot resume {out_dir}: the run is complete (summary.json); use "
                                         f"--overwrite to run it again")
        elif write:
            rundir.start_fresh(out_dir, report.OUTPUTS + desk_report.OUTPUTS, overwrite)
            (out_dir / rundir.CHUNKS).mkdir(exist_ok=True)
            rundir.write_text(out_dir / rundir.MANIFEST, json.dumps(manifest, indent=2))
        specs = level_specs(cfg)
        log(f"cva run {cfg.run.name}: backend {device}; estimator {cfg.simulation.estimator}, inner paths "
            f"{'/'.join(str(m) for m, _ in specs)}, {len(plan.grid)} grid dates, chunks of {chunk} outer paths"
            + (f"; resuming {out_dir}" if resume else "") + f"; {describe_cost(cost)}")
        stats, timings = DateStats(len(plan.grid)), {s: 0.0 for s in STAGES}
        t_start = time.perf_counter()
        bar = _progress(None, 0, progress)
        # its book built by the first chunk, or on a cluster's client once the first chunks are submitted
        aggregate = Aggregation(cfg, plan, model, None if executor is None else executor.config_json)
        if cfg.is_desk:
            def values(chunk):                                              # the netting sets' (sets, N, S, K)
                return aggregate.book.netted(chunk)

            desk_cva = functools.cache(lambda: aggregate.book.cva_functional(model, own))

            def g(X):                                                       # the desk's per-path CVA (for mlmc)
                return desk_cva()(X)
        else:
            counterparty = credits["counterparty"]
            g = cva_functional(plan, model, counterparty, own)

            def values(chunk):                                              # the one netting set's (sets, N, K)
                return aggregate.book.netted(chunk)[..., 0, :]

        with Levels(cfg, plan, model, xp, out_dir, manifest, chunk, stats, timings, log, bar, resume, executor,
                    aggregate) as lv:                # (its chunk files written, also on an error: --resume)
            try:
                notes = sample_levels(cfg, lv, g, log, values)
            finally:
                if bar is not None:
                    bar.close()
            elapsed = time.perf_counter() - t_start           # the values; their chunk files may still be written
            book, bumped = aggregate.build()
            netted = lv.levels(values)
            sens = None
            if cfg.sensitivities is not None:
                def functional(c, m, name, shift):                              # counterparty name's CVA g
                    cps = {x.name: x for x in c.counterparties} if c.is_desk else {"counterparty": c.counterparty}
                    cp = Counterparty.from_config(cps[name], m.rate)
                    me = None if c.own_credit is None else Counterparty.from_config(c.own_credit, m.rate)
                    g = cva_functional(plan, m, shifted(cp, shift) if shift else cp, me)
                    if not c.is_desk:
                        return g
                    which = book.of(name)
                    return lambda X: sum(g(X[..., j, :]) for j in which)

                floors = {name: float(np.min(cp.curve.rates)) for name, cp in credits.items()}
                sens = bumped.result(lv.levels(), netted, lambda name, shift: functional(cfg, model, name, shift),
                                     floors)
                if not cfg.is_desk:
                    sens = sens["counterparty"]
            if cfg.is_desk:
                log(f"pricing the {len(plan.contracts)} trades at t = 0 ({cfg.simulation.pricing_paths} paths each)")
                prices = price(cfg, backend=kind) if executor is None else executor.price()
                lv.finish()                                                     # the chunk files, before the summary
                result = desk_report.finish(cfg, plan, model, book, lv, netted, stats, timings, out_dir,
                                            device=device, chunk=chunk, elapsed=elapsed, manifest=manifest, own=own,
                                            sensitivities=sens, prices=prices, warnings=notes)
            else:
                trades = book.allocations(lv)
                twin = european_twin(cfg, plan, model, [c.quantity for c in plan.contracts], netted) \
                    if cfg.simulation.control_variate else None
                lv.finish()
                result = report.finish(cfg, plan, model, counterparty, netted, stats, timings, out_dir,
                                       device=device, chunk=chunk, elapsed=elapsed, manifest=manifest, trades=trades,
                                       own=own, sensitivities=sens, twin=twin, warnings=notes)
            if write and not keep_chunks:
                rundir.remove_chunks(out_dir)
    return result


def _check_arguments(*, out, log, cluster, **flags):
    """:func:`run`'s arguments of the wrong type or value: a TypeError or ValueError naming the argument (a
    string "no" is not False); ``chunk`` is checked where it is taken (:func:`cva.io.config.whole_number`)."""
    for name, v in flags.items():
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {v!r}")
    if out is not None:
        if not isinstance(out, (str, os.PathLike)):
            raise TypeError(f"out must be a directory's path, got {out!r}")
        if Path(out).exists() and not Path(out).is_dir():
            raise rundir.RunDirectoryError(f"out: {out} is a file, not a directory")
    if log is not None and not callable(log):
        raise TypeError(f"log must be a function of one string, got {log!r}")
    if cluster is not None and not isinstance(cluster, str) and not is_client(cluster):
        raise TypeError(f"cluster must be local, local:N, local-cuda, a scheduler address or a distributed.Client, "
                        f"got {cluster!r}")


def _check_memory(cfg, plan, d, itemsize, chunk, memory, kind, on_workers, source):
    """A ValueError (one line, naming what to change) where a chunk's memory (:func:`bytes_per_outer_path` per
    outer path, for the paths a chunk can hold: at most the outer paths asked for) exceeds ``memory`` (None:
    unknown, not checked) even at the share of the estimate a chunk was seen to hold (0.7: bench_cva's chunk on an
    H100): a run that could only fail, or be killed, later. ``source``: where the chunk size came from (None:
    sized by the memory)."""
    sim = cfg.simulation
    paths = min(chunk, max(sim.level_paths) if sim.level_paths else sim.outer_paths)
    need = paths * bytes_per_outer_path(plan, d, itemsize)
    if memory is None or 0.7 * need <= memory:
        return
    where = ("free on the workers' GPUs" if on_workers else "free on the GPU" if kind == "gpu"
             else "of this machine's memory")
    if source is None or paths <= 2:
        what, fix = (f"simulation.inner_paths: {plan.inner_paths} inner paths on {len(plan.grid)} dates need, in a "
                     f"chunk of {paths} outer paths,", "use fewer inner paths or dates")
    else:
        what, fix = f"{source}: {paths} outer paths need", ("run again with --overwrite and a smaller chunk"
                                                            if source.startswith("the interrupted") else
                                                            "give a smaller chunk")
    raise ValueError(f"{what} about {need / 2**30:.3g} GiB, more than the {memory / 2**30:.3g} GiB {where}: {fix}")


def _check_run(cfg, plan, kind, confirm) -> dict:
    """The run's cost (:func:`run_cost`) on ``kind`` ("cpu" or "gpu"): a ValueError where it is over the limit and not
    confirmed, or where a GPU regression has more regressors than the GPU solver takes."""
    if kind == "gpu":
        _check_gpu_regressions(cfg, plan)
    cost = run_cost(cfg, kind)
    if cost["seconds"] > COST_LIMIT_SECONDS and not confirm:
        raise ValueError(f"the run would take {describe_cost(cost)}, over the limit of {COST_LIMIT_SECONDS / 3600:g} "
                         f"h: confirm with --yes (confirm=True), or lower simulation.outer_paths or inner_paths")
    return cost


def _check_gpu_regressions(cfg, plan) -> None:
    """One line where a contract's LSM regression has more regressors than the GPU solver takes."""
    from cva.engine.basis import basis_size
    from linalg_gpu.small._gpu import MAX_N

    for i, c in enumerate(plan.contracts):
        if c.is_european or (c.underlying == "asset" and cfg.d > 1):       # no regression, or on its own asset
            continue
        p = basis_size(plan.basis, cfg.d, plan.payoff_regressor)
        if p > MAX_N:
            raise ValueError(f"{'.'.join(map(str, cfg.contract_loc(i)))}: the {c.style} {c.underlying} contract's "
                             f"regression on d = {cfg.d} assets has {p} regressors (simulation.basis: {plan.basis}), "
                             f"above the GPU solver's {MAX_N}: use backend cpu, or fewer assets in its underlying")

