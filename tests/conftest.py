"""Shared fixtures for the CPU (numpy) tests of ``linalg_gpu.small``.

Every test that needs random numbers takes the ``rng`` fixture: a fresh generator seeded from
OS entropy, so each run sees new inputs. The seed is printed (it shows up under "Captured stdout
setup" when a test fails) and added to the failure report as a section; set
``LINALG_TEST_SEED=<seed>`` to replay a failing run.

The matrix builders (SPD matrices of prescribed condition number, the paper's randomized
Xi_rho and Black-Scholes regression matrices, Wilkinson matrices, an independent truncated
eigen-solve, ...) live in ``small_testlib.py`` and are re-exported here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))                          # for ``import small_testlib``

from small_testlib import *  # noqa: E402,F401,F403  (re-export of the helpers)

# ---------------------------------------------------------------------------------------------
# rng fixture with a reported seed


@pytest.fixture
def rng(request):
    """A fresh ``numpy.random.Generator``; its seed is printed and attached to failure reports."""
    env = os.environ.get("LINALG_TEST_SEED")
    seed = int(env) if env else int(np.random.SeedSequence().entropy)
    print(f"rng seed: {seed}  (replay with LINALG_TEST_SEED={seed})")
    request.node.add_report_section("setup", "rng seed", f"LINALG_TEST_SEED={seed}")
    request.node.user_properties.append(("rng_seed", seed))
    return np.random.default_rng(seed)
