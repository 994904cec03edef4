"""Which array module runs the engine: ``cpu`` (numpy), ``gpu`` (cupy) or ``auto``."""

from __future__ import annotations

import numpy as np

from linalg_gpu._backend import cupy_available

BACKENDS = ("auto", "cpu", "gpu")


def check_backend_name(name: str) -> str:
    """``name`` if it is one of :data:`BACKENDS`, else the one-line ValueError."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    return name


def resolve_backend(name: str = "auto"):
    """(array module, description). ``auto`` takes the GPU when CuPy finds one, else the CPU."""
    check_backend_name(name)
    if name == "cpu" or (name == "auto" and not cupy_available()):
        why = " (auto: no CUDA device visible to CuPy)" if name == "auto" else ""
        return np, f"cpu (numpy){why}"
    if not cupy_available():
        raise ValueError("backend 'gpu' asked for, but CuPy finds no CUDA device (install the 'gpu' extra "
                         "and check the driver), or use backend 'cpu'")
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    return cp, f"gpu ({props['name'].decode()})"
