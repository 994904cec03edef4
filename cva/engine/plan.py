"""The plan of a run: the simulation grid and its exposure and exercise dates, the contracts, the levels of
the estimator, the memory per outer path and the chunk size, and the run's cost before it starts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from cva.engine import basis
from cva.instruments.products import Contract
from cva.io.config import grid_key

CPU_CHUNK_BYTES = 256 << 20
#: The share of the GPU's free memory a chunk may take (by :func:`bytes_per_outer_path`, which bench_cva's chunk of
#: 8192 outer paths held to 0.7 of: 23.6 GiB of CuPy's pool on an H100).
GPU_MEMORY_FRACTION = 0.5


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
    value_index: np.ndarray           # (V,) grid indices valued: the exposure dates and the CSA's margin dates
    exposure_cols: np.ndarray         # (K,) each exposure date's column of the value cube
    margin_cols: np.ndarray | None    # (K,) the column of t_k - MPR, -1 where it is not after 0; None: no CSA
    keeps_exercise_times: bool = False  # bumped markets exercise the inner paths when the base did (sensitivities)
    date_schedules: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # per number of
    # assets, cva.engine.nested.date_schedule's, made on first use (a plan made by dataclasses.replace starts empty)

    @property
    def dates(self) -> np.ndarray:
        return self.grid[self.exposure_index]


def build_plan(cfg) -> Plan:
    """The plan of a validated config (its grid's size and distinct dates are checked by :mod:`cva.io.config`)."""
    contracts = [Contract.from_config(c) for c in cfg.portfolio]
    keys, T = cfg.grid_keys()                                      # dates equal to 12 digits relative to T
    grid = keys * T

    def index(t):
        return np.searchsorted(keys, grid_key(t, T))

    exposure_index = index(cfg.exposure_times())
    value_index = np.unique(np.concatenate([exposure_index, index(cfg.margin_times())])).astype(int)
    exposure_cols = np.searchsorted(value_index, exposure_index)
    margin_cols = None if cfg.csa is None else margin_columns(cfg, value_index, cfg.csa.margin_period_of_risk)
    return Plan(grid=grid, exposure_index=exposure_index, value_index=value_index, exposure_cols=exposure_cols,
                margin_cols=margin_cols, contracts=contracts,
                exercise_index=[index(c.exercise_times()) for c in contracts],
                closed_form=[c.is_european and (c.underlying == "asset" or cfg.d == 1) for c in contracts],
                outer_paths=cfg.simulation.outer_paths, inner_paths=cfg.simulation.inner_paths_for(),
                basis=cfg.simulation.basis, payoff_regressor=cfg.simulation.payoff_regressor,
                keeps_exercise_times=_keeps_exercise_times(cfg))


def _keeps_exercise_times(cfg) -> bool:
    """Whether a chunk keeps its inner paths' exercise dates for bumped markets (:mod:`cva.xva.sensitivities`)."""
    s = cfg.sensitivities
    return s is not None and s.exercise_policy == "base" and any(h is not None for h in (s.spot, s.vol, s.rate))


def inner_valuations(plan) -> int:
    """The (contract, grid date) pairs valued by inner paths: a contract without a closed form, at each value date
    and exercise date before its maturity."""
    values = set(int(g) for g in plan.value_index)
    return sum(len(values.union(int(j) for j in ix).intersection(range(int(ix[-1]))))
               for ix, closed in zip(plan.exercise_index, plan.closed_form, strict=True) if not closed)


def exercise_code_dtype(N, depths) -> np.dtype:
    """The fewest bytes of unsigned integer that hold sum_k i_k N^k over ``depths`` indices i_k < N (the packed
    exercise dates of :class:`cva.engine.nested.ExerciseTimes`)."""
    return np.dtype(next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64)
                         if N ** depths - 1 <= np.iinfo(t).max))


def margin_columns(cfg, value_index, mpr, grid=None) -> np.ndarray:
    """(K,) the value cube's column of each t_k - mpr, -1 where it is not after 0 (the dates are on the grid:
    :meth:`cva.io.config.Config.margin_times`; ``grid``: its :meth:`~cva.io.config.Config.grid_keys` if known)."""
    keys, T = cfg.grid_keys() if grid is None else grid
    lag = cfg.exposure_times() - mpr
    g = np.searchsorted(keys, grid_key(np.where(lag > 0, lag, lag[-1]), T))
    return np.where(lag > 0, np.searchsorted(value_index, g), -1)


def bytes_per_outer_path(plan, d, itemsize) -> int:
    """The memory estimate per outer path of a chunk: the inner paths of the first date (G d values per inner path)
    and what their regressions hold at once, about twice that again; two value cubes (float64, up to 7
    estimator sets per contract and value date: the base's and a bumped market's, :mod:`cva.xva.sensitivities`);
    with ``keeps_exercise_times``, per inner path and inner valuation the bytes of three depths' exercise dates
    (:func:`exercise_code_dtype`: two for up to 40 dates)."""
    p = basis.basis_size(plan.basis, d, plan.payoff_regressor)
    cube = 2 * 7 * 8 * len(plan.contracts) * len(plan.value_index)
    width = exercise_code_dtype(max((len(ix) for ix in plan.exercise_index), default=1), 3).itemsize
    valuations = inner_valuations(plan)
    kept = width * plan.inner_paths * valuations if plan.keeps_exercise_times else 0
    inner = plan.inner_paths * itemsize * (3 * len(plan.grid) * d + 4 * p + 8) if valuations else 0  # (else none drawn)
    return inner + cube + kept


#: Inner asset-steps per second, regressions included, as measured here: the quickstart on a 2-core CPU
#: (7.1e7 steps in 7.1 s) and bench_cva on an H100 (2.2e10 float32 steps of d = 29 in 0.8 s). An estimate's
#: order of magnitude, not a promise.
STEP_RATES = {"cpu": 1.0e7, "gpu": 2.0e10}
#: Runs estimated to take longer than this are refused unless confirmed (``cva run --yes``, ``confirm=True``).
COST_LIMIT_SECONDS = 4 * 3600


def run_cost(cfg, backend: str) -> dict:
    """What a run will cost before it starts: inner asset-steps (the paths of every level and inner-set part,
    with ``outer_paths`` on each level of ``mlmc`` as a bound on its allocation, and the valuations of the bumped
    markets of ``sensitivities``: :func:`bumped_valuations`), the memory of a chunk's first date per outer path,
    and a time estimate from :data:`STEP_RATES` on ``backend`` ("cpu" | "gpu")."""
    plan = build_plan(cfg)
    steps = _inner_steps(plan, range(len(plan.contracts)))
    steps += sum(_inner_steps(plan, trades) for trades in bumped_valuations(cfg, plan))
    specs = level_specs(cfg)
    outer = cfg.simulation.outer_paths
    per_path = sum(m * (1 + 0.4 * splits) for m, splits in specs)
    asset_steps = float(outer) * per_path * steps * cfg.d
    seconds = asset_steps / STEP_RATES[backend]
    itemsize = np.dtype(cfg.run.dtype).itemsize
    return {"inner_asset_steps": asset_steps, "seconds": seconds, "backend": backend,
            "bytes_per_outer_path": bytes_per_outer_path(plan, cfg.d, itemsize), "grid_dates": len(plan.grid)}


def _inner_steps(plan, contracts) -> int:
    """The inner paths' steps per inner path of one outer path that ``contracts`` (indices) need: at each grid
    date where one of them is valued by inner paths, as far as the last of their maturities."""
    exposure = set(int(k) for k in plan.value_index)
    steps = 0
    for g in range(len(plan.grid)):
        needs = [int(plan.exercise_index[ci][-1]) for ci in contracts if not plan.closed_form[ci]
                 and g < int(plan.exercise_index[ci][-1]) and (g in exposure or g in plan.exercise_index[ci])]
        steps += max(needs) - g if needs else 0
    return steps


def bumped_valuations(cfg, plan) -> list[list[int]]:
    """The contracts (indices) of each valuation of a bumped market that ``sensitivities`` asks for, as
    :class:`cva.xva.sensitivities.BumpedDesk` values them: per spot and vol bump direction one valuation of the
    one-asset contracts and, per asset, one of the contracts on several assets; per rate bump direction one of
    every contract (a vol below its bump, bumped one way only there, is counted both ways)."""
    bumps = cfg.sensitivities
    if bumps is None:
        return []
    single = [i for i, c in enumerate(plan.contracts) if c.underlying == "asset"]
    several = [i for i, c in enumerate(plan.contracts) if c.underlying != "asset"]
    out = []
    for key in ("spot", "vol"):
        if getattr(bumps, key) is not None:
            for _ in (1, -1):
                out += ([single] if single else []) + ([several] * cfg.d if several else [])
    if bumps.rate is not None:
        out += [list(range(len(plan.contracts)))] * 2
    return out


def describe_cost(cost) -> str:
    """One line: the inner asset-steps, the memory per outer path and the time estimate."""
    t = cost["seconds"]
    when = ("under a second" if t < 0.5 else f"{t:.0f} s" if t < 120 else f"{t / 60:.0f} min" if t < 7200
            else f"{t / 3600:.1f} h" if t < 172800 else f"{t / 86400:.0f} days")
    return (f"about {cost['inner_asset_steps']:.2g} inner asset-steps, {cost['bytes_per_outer_path'] / 2**20:.3g} MiB "
            f"per outer path of a chunk, of the order of {when} on the {cost['backend']}")


def device_free_bytes(cp) -> int:
    """The GPU's free memory for a chunk: the device's free bytes and those CuPy's memory pool holds unused."""
    free, _ = cp.cuda.runtime.memGetInfo()
    return int(free + cp.get_default_memory_pool().free_bytes())


def memory_bytes(xp, free_bytes=None) -> int | None:
    """The memory a chunk can have at most: this machine's physical memory (``xp`` numpy), the GPU's free memory
    (:func:`device_free_bytes`), or ``free_bytes`` where given (a cluster's GPUs); None where unknown."""
    if free_bytes is not None:
        return int(free_bytes)
    if xp is np:
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None
    return device_free_bytes(xp) if xp is not None else None


def chunk_size(plan, d, itemsize, xp, workers=None, free_bytes=None) -> int:
    """Outer paths per chunk: as many as the memory the inner paths of the first date need allows, with ``xp``
    numpy a CPU's budget, else the GPU of this process (``xp`` cupy) or, given ``free_bytes`` (``xp`` may then be
    None), the least free memory of a cluster's GPUs (not fewer: a chunk's cost has a part that does not shrink
    with its paths, the solver calls per contract and date, which dominates a desk of many Bermudan trades); at
    least 2 (a chunk of one path rounds a basket's average differently, and its values would depend on the
    chunking). The outer paths are then shared equally among the chunks that number needs (a last chunk of a
    few paths would cost as many kernel launches as a full one), and on a cluster of ``workers`` the number of
    chunks is a multiple of theirs, so that each worker gets as many: on two H200s the desk benchmark at 65536
    outer paths in 3 chunks of 21846 took 26.2 s, in 4 of 16384 19.8 s."""
    if xp is np:
        budget = CPU_CHUNK_BYTES
    else:
        budget = GPU_MEMORY_FRACTION * (device_free_bytes(xp) if free_bytes is None else free_bytes)
    N = plan.outer_paths
    n = max(2, min(N, budget // bytes_per_outer_path(plan, d, itemsize)))
    count = -(-N // n)
    if workers:
        count = -(-count // workers) * workers
    return int(max(2, -(-N // count)))                                   # equal chunks: no small last one


def level_specs(cfg) -> list[tuple[int, int]]:
    """(inner paths, splits) per level of the config's estimator (:mod:`cva.engine.estimators`)."""
    sim = cfg.simulation
    if sim.estimator == "mlmc":
        return [(m, 0 if i == 0 else 1) for i, m in enumerate(sim.mlmc_levels())]
    return [(sim.inner_paths_for(), 1 if sim.estimator == "plain" else 2)]


def netting_order(plan) -> list[list[int]]:
    """Per value date, the contracts alive there in the order their values were summed before the value cube
    existed (those valued at the node first, then those valued by inner paths, each by index), so that the
    netting of :meth:`cva.xva.desk.Book.gross` gives those sums bit for bit."""
    order = []
    for g in (int(i) for i in plan.value_index):
        first, later = [], []
        for ci, ix in enumerate(plan.exercise_index):
            if g > int(ix[-1]):
                continue
            (first if g == int(ix[-1]) or plan.closed_form[ci] else later).append(ci)
        order.append(first + later)
    return order
