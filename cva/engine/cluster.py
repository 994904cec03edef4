"""Outer chunks as tasks on ``dask.distributed``: the cluster a run uses (``run.cluster``, ``cva run --cluster``) and
the task that computes one chunk on a worker, the same function as in one process
(:func:`cva.engine.nested.chunk_values`), so the per-path values are bitwise those of a single-process run.

``local`` starts a ``LocalCluster`` of worker processes (one thread each; ``local:N`` for N workers),
``local-cuda`` a ``dask_cuda.LocalCUDACluster`` (one worker per visible GPU, pinned), and ``tcp://HOST:PORT``
connects to a running scheduler (started by ``dask-jobqueue`` on Slurm, by Dask-Kubernetes, or by hand). The
workers resolve the run's backend on their own machines (:func:`workers_backend`) and price a desk's trades at
t = 0 (:func:`price_task`), so the client needs no GPU.
"""

from __future__ import annotations

import contextlib
import functools
import json
import uuid

from cva.engine.nested import timed_chunk

TIMEOUT = "20s"            # connecting to a scheduler
# The workers of local-cuda hold a task's result only until the client takes it (the chunk's arrays live in
# CuPy's pool, not in Dask's store): no memory limits, so no spilling, and the results are kept in a plain dict.
# With dask-cuda's defaults a worker wrote chunk results of 110-440 MB to its disk before sending them (two
# H200s, 0.15-0.2 s each, and a slower send).
LOCAL_CUDA_OPTIONS = {"memory_limit": None, "device_memory_limit": None}
# The client of a local cluster takes each result from its worker directly (Dask's default sends it through the
# scheduler: two transfers; two H200s, a 220 MB desk chunk reached the client 0.6-0.7 s after its task ended).
# A remote cluster keeps Dask's setting, distributed.client.direct-to-workers: the client may not reach the workers.
LOCAL_CLIENT_OPTIONS = {"direct_to_workers": True}


class ClusterError(ValueError):
    """The cluster cannot be started or reached (one line, naming the address)."""


def is_client(obj) -> bool:
    return type(obj).__name__ == "Client" and type(obj).__module__.startswith("distributed")


@contextlib.contextmanager
def connected(spec):
    """A ``distributed.Client`` for ``spec`` (a string above, or a Client, used as is and left open)."""
    if spec is None or is_client(spec):
        yield spec
        return
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as exc:                                      # pragma: no cover - a dependency
        raise ClusterError(f"run.cluster {spec!r} needs dask[distributed]: {exc}") from None
    cluster = None
    try:
        if spec == "local-cuda":
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError as exc:
                raise ClusterError(f"run.cluster local-cuda needs dask-cuda (the gpu extra): {exc}") from None
            cluster = LocalCUDACluster(dashboard_address=None, **LOCAL_CUDA_OPTIONS)
            client = Client(cluster, **LOCAL_CLIENT_OPTIONS)
        elif spec == "local" or spec.startswith("local:"):
            n = int(spec.split(":", 1)[1]) if ":" in spec else None
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
            client = Client(cluster, **LOCAL_CLIENT_OPTIONS)
        else:
            try:
                client = Client(spec, timeout=TIMEOUT)
            except (OSError, TimeoutError) as exc:
                raise ClusterError(f"cannot reach the Dask scheduler at {spec}: {exc}") from None
    except ClusterError:
        raise
    except Exception as exc:
        if cluster is not None:
            cluster.close()
        raise ClusterError(f"cannot start the Dask cluster {spec!r}: {exc}") from None
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def workers(client) -> int:
    return len(client.scheduler_info().get("workers", {}))


@functools.lru_cache(maxsize=8)
def run_inputs(config_json):
    """The config, plan and model of the configuration ``config_json`` (:meth:`cva.io.config.Config.to_json`),
    built once per worker process (for its chunk tasks and :func:`cva.xva.aggregation.aggregation_of`)."""
    from cva.engine.plan import build_plan
    from cva.io.config import load_config
    from cva.market.model import BlackScholes

    cfg = load_config(json.loads(config_json))
    return cfg, build_plan(cfg), BlackScholes.from_market(cfg.market)


@functools.lru_cache(maxsize=8)
def _setup(config_json, backend):
    """The config, plan, model and array module of a worker, once per process, configuration and backend (the
    compiled kernels are cached by :mod:`linalg_gpu._kernels`)."""
    from cva.backend import resolve_backend

    return (*run_inputs(config_json), resolve_backend(backend)[0])


def _worker_backend(name):
    """A worker's description of backend ``name`` (:func:`cva.backend.resolve_backend`, on the worker)."""
    from cva.backend import resolve_backend

    return resolve_backend(name)[1]


def workers_backend(client, name):
    """("cpu" or "gpu", description) of backend ``name`` as the cluster's workers resolve it, each on its own
    machine: the client needs no GPU to drive a GPU cluster, and ``auto`` means the workers' GPUs if they have
    them. One line (:class:`ClusterError`) where a worker cannot run it, where they disagree, or where the cluster
    has no workers yet (a ``cpu`` run does not ask: its tasks wait for workers)."""
    if name == "cpu":
        return "cpu", "cpu (numpy) on the cluster's workers"
    try:
        found = client.run(_worker_backend, name)
    except Exception as exc:
        raise ClusterError(f"backend {name}: a worker of the cluster cannot run it ({exc})") from None
    if not found:
        raise ClusterError(f"backend {name}: the cluster has no workers yet to run it (its chunks are sized by "
                           f"their GPUs): start them first, or use backend cpu")
    devices = sorted(set(found.values()))
    kinds = {d.split(" ", 1)[0] for d in devices}
    if len(kinds) > 1:
        raise ClusterError(f"backend {name}: the cluster's workers disagree ({', '.join(devices)}): give every "
                           f"worker a GPU, or use backend cpu")
    return kinds.pop(), f"{'; '.join(devices)} on {len(found)} workers"


def _free_device_bytes():
    """A worker's free GPU memory (:func:`cva.engine.plan.device_free_bytes`)."""
    import cupy as cp

    from cva.engine.plan import device_free_bytes

    return device_free_bytes(cp)


def price_task(config_json, backend):
    """Each contract's t = 0 price on a worker (:func:`cva.engine.pricing.price`; a desk's report has them)."""
    from cva.engine.pricing import price

    return price(json.loads(config_json), backend=backend)


def chunk_task(config_json, backend, l0, Lc, inner_paths, splits, cond_sample, aggregate=None):
    """One chunk on a worker, :func:`cva.engine.nested.timed_chunk` (``l0`` the chunk's first outer key;
    ``aggregate`` reduces the cube on the worker, so only its result travels (a run's
    :class:`cva.xva.aggregation.Aggregation` travels as its configuration); a GPU's result comes to page-locked
    memory, which returns to CuPy's pool once the client has it)."""
    cfg, plan, model, xp = _setup(config_json, backend)
    return timed_chunk(cfg, plan, model, xp, l0, Lc, inner_paths, splits, cond_sample, aggregate, pinned=True)


class Executor:
    """Submits a run's chunks to the cluster of ``client`` (:meth:`cva.engine.nested.Levels.ensure`): each task
    carries the configuration (plain data) and recomputes it where a worker died (Dask's retries)."""

    RETRIES = 3

    def __init__(self, client, cfg, backend):
        self.client, self.backend = client, backend
        self.config_json = cfg.to_json()
        self.run_key = uuid.uuid4().hex[:12]

    def submit(self, li, i, l0, Lc, inner_paths, splits, cond_sample, aggregate=None):
        return self.client.submit(chunk_task, self.config_json, self.backend, l0, Lc, inner_paths, splits,
                                  cond_sample, aggregate, key=f"cva-chunk-{self.run_key}-{li}-{i}-{l0}", pure=False,
                                  retries=self.RETRIES)

    def price(self):
        """The t = 0 prices (:func:`price_task`) on a worker: the client may have no GPU."""
        return self.client.submit(price_task, self.config_json, self.backend, key=f"cva-price-{self.run_key}",
                                  pure=False, retries=self.RETRIES).result()

    def free_device_bytes(self) -> int | None:
        """The least free GPU memory of the workers (a GPU run's chunk fits each worker's GPU, not the client's);
        None while the cluster has no workers (a GPU run starts with some: :func:`workers_backend`)."""
        try:
            free = self.client.run(_free_device_bytes)
        except Exception as exc:
            raise ClusterError(f"backend gpu: the cluster's workers cannot give their free GPU memory ({exc}); "
                               f"give them GPUs and the gpu extra, or use backend cpu") from None
        return min(free.values()) if free else None

    def completed(self, futures):
        """(future, result) as the tasks finish."""
        from dask.distributed import as_completed

        return as_completed(futures, with_results=True)
