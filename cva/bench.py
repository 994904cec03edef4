"""``cva bench``: time the nested CVA of a configuration on this machine, stage by stage.

Each run is a full :func:`cva.runner.run` into a temporary directory (the report is written,
timed and removed). On the GPU the first run also compiles the CUDA kernels and CuPy's own
kernels for the run's sizes; it is marked so, and the later runs are the steady state.
"""

from __future__ import annotations

import tempfile
import time

import pandas as pd

from cva.engine.nested import STAGES
from cva.io.config import load_config
from cva.runner import run as nested_run


def with_paths(config, outer=None, inner=None):
    """``config`` (path, dict or Config) with ``simulation.outer_paths`` / ``inner_paths`` replaced,
    validated again (a ``ConfigError`` names the key)."""
    cfg = load_config(config)
    if outer is None and inner is None:
        return cfg
    data = cfg.to_dict()
    if outer is not None:
        data["simulation"]["outer_paths"] = outer
    if inner is not None:
        data["simulation"]["inner_paths"] = inner
    return load_config(data)


def bench(config, backend=None, outer=None, inner=None, repeat=3) -> pd.DataFrame:
    """Time ``repeat`` runs of the nested CVA of ``config``; one row per run.

    Columns: run, first (the GPU run that compiled the kernels), seconds (end to end, with the
    report), engine_seconds, one ``<stage>_seconds`` per stage of ``cva.engine.nested.STAGES``,
    outer_paths_per_s (over the engine time), systems (regressions solved),
    solve_systems_per_s (over the solve stage), cva, stderr. ``attrs``: name (run.name), device,
    backend, dtype, outer_paths, inner_paths, chunk, method_mix (of the last run).
    """
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be an integer >= 1, got {repeat!r}")
    cfg = with_paths(config, outer, inner)
    rows, summary = [], None
    for i in range(repeat):
        with tempfile.TemporaryDirectory(prefix="cva-bench-") as tmp:
            t0 = time.perf_counter()
            result = nested_run(cfg, out=tmp, backend=backend, progress=False, log=lambda msg: None)
            seconds = time.perf_counter() - t0
        summary = result.summary
        engine = summary["elapsed_seconds"]
        stages = summary["runtime_seconds"]
        systems = summary["solver"]["systems"]
        rows.append({"run": i + 1, "first": i == 0 and summary["backend"] == "gpu",
                     "seconds": seconds, "engine_seconds": engine,
                     **{f"{s}_seconds": stages.get(s, 0.0) for s in STAGES},
                     "outer_paths_per_s": summary["outer_paths"] / engine, "systems": systems,
                     "solve_systems_per_s": systems / stages["solve"] if stages.get("solve") else float("nan"),
                     "cva": result.cva, "stderr": result.stderr})
    df = pd.DataFrame(rows)
    df.attrs.update({"name": cfg.run.name, "device": summary["device"], "backend": summary["backend"],
                     "dtype": summary["dtype"], "outer_paths": summary["outer_paths"],
                     "inner_paths": summary["inner_paths"], "chunk": summary["chunk"],
                     "method_mix": summary["solver"]["method_mix"]})
    return df
