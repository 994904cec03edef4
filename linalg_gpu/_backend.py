"""Array-module and dtype policy: the only place that decides between numpy and cupy.

numpy in gives numpy out, computed on the CPU; cupy in gives cupy out, computed on the GPU.
Only float32 and float64 are computed; other dtypes are refused with a ``TypeError`` that
names the argument, as ``cupy.linalg``'s ``linalg_common_type`` does.
"""

from __future__ import annotations

import numpy as np

try:  # CuPy is an optional extra (`pip install .[gpu]`); everything imports without it.
    import cupy as _cupy
except Exception:  # pragma: no cover - depends on the machine
    _cupy = None

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def cupy_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    if _cupy is None:
        return False
    try:
        return _cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def is_cupy_array(x) -> bool:
    return _cupy is not None and isinstance(x, _cupy.ndarray)


def get_array_module(*arrays):
    """``cupy`` if any argument is a cupy array, else ``numpy``."""
    if any(is_cupy_array(a) for a in arrays):
        return _cupy
    return np


def as_array(x, name: str, xp=None):
    """``x`` as an array of the module ``xp`` (numpy by default); lists are accepted like numpy does,
    and a non-native byte order (e.g. ``>f8`` read from a file) becomes the native one."""
    xp = xp or get_array_module(x)
    if xp is np and is_cupy_array(x):  # pragma: no cover - mixed inputs are refused earlier
        raise TypeError(f"{name} is a cupy array but the other arguments are numpy arrays")
    try:
        a = xp.asarray(x)
    except Exception as exc:
        raise TypeError(f"{name} must be an array of real numbers, got {type(x).__name__}") from exc
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def check_dtype(x, name: str) -> np.dtype:
    """Refuse anything but float32/float64 with a message naming ``name``."""
    dt = np.dtype(x.dtype)
    if dt in SUPPORTED_DTYPES:
        return dt
    if dt.kind == "c":
        raise TypeError(f"{name} has complex dtype {dt}; only float32 and float64 are supported")
    if dt.kind in "biu":
        raise TypeError(
            f"{name} has integer/bool dtype {dt}; pass float32 or float64 (e.g. {name}.astype(float))"
        )
    raise TypeError(f"{name} has dtype {dt}; only float32 and float64 are supported")


def common_dtype(*named_arrays) -> np.dtype:
    """The compute dtype of several float arrays: float64 if any is float64, else float32."""
    dts = [check_dtype(a, n) for n, a in named_arrays]
    return np.dtype(np.float64) if np.dtype(np.float64) in dts else np.dtype(np.float32)


def to_host(a) -> np.ndarray:
    """A numpy array of ``a`` (copied from the device for cupy)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def to_pinned_host(a) -> np.ndarray:
    """:func:`to_host` into page-locked host memory for cupy (``cupyx.empty_pinned``: CuPy's pinned-memory pool,
    returned to the pool when the array is freed, and kept there): the copy runs at the bus's speed, where a
    pageable destination is copied through the driver's staging buffers and faulted in as it goes. For arrays
    handed on soon (a cluster task's result), not for what a run keeps."""
    if not hasattr(a, "get"):
        return np.asarray(a)
    import cupy
    import cupyx

    a = cupy.ascontiguousarray(a)
    out = cupyx.empty_pinned(a.shape, a.dtype)
    a.get(out=out)
    return out


def eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def boolean_flags(*names):
    """A decorator: the function's arguments ``names`` must be True or False (numpy's bools too), else a TypeError
    naming the argument; a truthy string such as "no" would otherwise read as True. (Positions found once: about a
    microsecond a call.)"""
    import functools
    import inspect

    def wrap(fn):
        params = list(inspect.signature(fn).parameters.values())
        where = [(n, next((k for k, q in enumerate(params) if q.name == n and q.kind == q.POSITIONAL_OR_KEYWORD), None))
                 for n in names]

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            for name, k in where:
                v = kwargs[name] if name in kwargs else args[k] if k is not None and k < len(args) else False
                if not isinstance(v, (bool, np.bool_)):
                    raise TypeError(f"{name} must be True or False; got {v!r}")
            return fn(*args, **kwargs)
        return checked
    return wrap
