"""GPU tests: run on the device machine (`python -m pytest tests/gpu`); skipped where CuPy sees no GPU."""

from pathlib import Path

import pytest

from linalg_gpu._backend import cupy_available

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    if cupy_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device visible to CuPy")
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)
