"""The one loader of CUDA sources (``linalg_gpu/cuda``, or an application's folder): CuPy RawModules,
compiled lazily.

A kernel is a template ``name<T, N>`` in ``cuda/<file>``; :func:`get_function` builds the
instantiation for a dtype and a size, compiles it once per (file, instantiation, device) and
caches it. Sources get a ``#line`` directive so that compiler errors point into the ``.cu`` file,
and a hash of the headers (``cuda/*.cuh``): CuPy's on-disk kernel cache is keyed by the source
text it is given, so without the hash a change in a header alone would reuse a stale binary. The
first compilation of each instantiation is timed (``COMPILE_SECONDS``) for the benchmarks.
"""

from __future__ import annotations

import hashlib
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

CUDA_DIR = Path(__file__).resolve().parent / "cuda"
COMPILE_SECONDS: dict[str, float] = {}
_CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
           np.dtype(np.complex64): "cplx<float>", np.dtype(np.complex128): "cplx<double>",   # cplx: common.cuh
           np.dtype(np.uint8): "unsigned char", np.dtype(np.uint16): "unsigned short",        # index types
           np.dtype(np.uint32): "unsigned int", np.dtype(np.int32): "int"}


def _source(file, cuda_dir=CUDA_DIR):
    """The code CuPy compiles for ``cuda/<file>``: the headers' hash, a ``#line`` directive, the file."""
    headers = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(cuda_dir.glob("*.cuh")))).hexdigest()
    path = cuda_dir / file
    return f'// linalg_gpu headers {headers}\n#line 1 "{path}"\n' + path.read_text()


@lru_cache(maxsize=None)
def _function(file, template, dtype, params, cuda_dir, device_id):
    """:func:`get_function`'s kernel, compiled on a cache miss; the key is its arguments as given (building a
    ``Path`` or the instantiation's name per launch cost about 60 us)."""
    import cupy as cp

    expr = f"{template}<{', '.join([ctype(dtype), *map(str, params)])}>"
    cuda_dir = Path(cuda_dir)
    code = _source(file, cuda_dir)
    t0 = time.perf_counter()
    mod = cp.RawModule(code=code, options=("-std=c++17", f"-I{cuda_dir}"), name_expressions=(expr,))
    fn = mod.get_function(expr)                       # compiles here
    COMPILE_SECONDS[f"{file}:{expr}"] = time.perf_counter() - t0
    return fn


def grid_blocks(total, threads=256, cap=65535 * 8) -> int:
    """Blocks of ``threads`` for a grid-stride loop over ``total`` items: enough for one item per thread, at most
    ``cap``, at least one."""
    return int(min(cap, max(1, -(-int(total) // threads))))


def ctype(dtype) -> str:
    """The C type of a NumPy dtype in the kernels' templates (``cplx``: ``common.cuh``)."""
    return _CTYPES[np.dtype(dtype)]


def get_function(file, template, dtype, *params, cuda_dir=CUDA_DIR):
    """The compiled kernel ``template<ctype(dtype), *params>`` from ``<cuda_dir>/<file>`` (default this
    package's ``cuda/``; an application passes its own folder of sources). Looked up per launch (a backward step
    of the desk's Longstaff-Schwartz calls makes about ten), so the cache's key is built from the arguments as
    given."""
    import cupy as cp

    return _function(file, template, np.dtype(dtype), params, cuda_dir, cp.cuda.runtime.getDevice())
