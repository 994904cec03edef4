"""Shared fixtures for the CPU (numpy) tests of ``linalg_gpu.small``.

Every test that needs random numbers takes the ``rng`` fixture. By default (``make test``) its seed is
fixed and recorded: ``BASE_SEED`` below combined with the test's node id (SHA-256, never Python's salted
``hash()``), so each test draws its own inputs and draws the same ones in every run, in any order, alone
or with the rest of the suite. The seed is printed (it shows up under "Captured stdout setup" when a test
fails) and added to the failure report as a section.

- ``LINALG_TEST_SEED=<seed>`` replays one seed (in every test that takes ``rng``);
- ``LINALG_TEST_RANDOM=1`` draws fresh seeds from OS entropy (``make test-random``), to look for rare
  failures; a failure found so prints the seed to replay with ``LINALG_TEST_SEED``.

Hypothesis follows the same switch: the default profile ``"fixed"`` is derandomized (the examples are a
function of the test alone) and uses no example database (so a past failure stored on one machine does not
change what another runs); ``LINALG_TEST_RANDOM=1`` loads ``"random"``, Hypothesis' own random search with
its database. ``HYPOTHESIS_PROFILE=<name>`` picks a profile by name.

The matrix builders (SPD matrices of prescribed condition number, the paper's randomized
Xi_rho and Black-Scholes regression matrices, Wilkinson matrices, an independent truncated
eigen-solve, ...) live in ``small_testlib.py`` and are re-exported here.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

try:                                                                    # (a GPU machine may lack the dev extras)
    from hypothesis import settings
except ImportError:  # pragma: no cover
    settings = None

sys.path.insert(0, str(Path(__file__).parent))                          # for ``import small_testlib``

from small_testlib import *  # noqa: E402,F401,F403  (re-export of the helpers)

# ---------------------------------------------------------------------------------------------
# seeds: fixed and recorded by default, fresh with LINALG_TEST_RANDOM=1

BASE_SEED = 20240917                      # the recorded base seed of the default run; change it deliberately
RANDOM_ENV, SEED_ENV = "LINALG_TEST_RANDOM", "LINALG_TEST_SEED"


def random_seeds() -> bool:
    """True when LINALG_TEST_RANDOM asks for fresh seeds (any value but "", "0", "false", "no")."""
    return os.environ.get(RANDOM_ENV, "").strip().lower() not in ("", "0", "false", "no")


def seed_for(nodeid: str) -> int:
    """The fixed seed of a test: the first 128 bits of SHA-256 of "BASE_SEED:nodeid" (the same on every
    machine and Python, unlike the salted ``hash()``)."""
    digest = hashlib.sha256(f"{BASE_SEED}:{nodeid}".encode()).digest()
    return int.from_bytes(digest[:16], "little")


def rng_seed(nodeid: str) -> int:
    """The seed of a test's ``rng``: LINALG_TEST_SEED if set, else fresh entropy with LINALG_TEST_RANDOM,
    else ``seed_for(nodeid)``."""
    env = os.environ.get(SEED_ENV, "").strip()
    if env:
        return int(env)
    if random_seeds():
        return int(np.random.SeedSequence().entropy)
    return seed_for(nodeid)


# Hypothesis: derandomized unless fresh seeds are asked for
if settings is not None:
    settings.register_profile("fixed", derandomize=True, database=None, print_blob=True)
    settings.register_profile("random", derandomize=False, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("random" if random_seeds() else "fixed"))


def pytest_report_header(config):
    mode = (f"{SEED_ENV}={os.environ[SEED_ENV].strip()}" if os.environ.get(SEED_ENV, "").strip()
            else "fresh seeds (LINALG_TEST_RANDOM)" if random_seeds() else f"fixed seeds (BASE_SEED={BASE_SEED})")
    profile = settings.get_current_profile_name() if settings is not None else "(hypothesis not installed)"
    return f"rng: {mode}; hypothesis profile: {profile}"


# ---------------------------------------------------------------------------------------------
# rng fixture with a reported seed


@pytest.fixture
def rng(request):
    """A ``numpy.random.Generator`` of the test's seed (module docstring); the seed is printed and attached
    to failure reports."""
    seed = rng_seed(request.node.nodeid)
    print(f"rng seed: {seed}  (replay with {SEED_ENV}={seed})")
    request.node.add_report_section("setup", "rng seed", f"{SEED_ENV}={seed}")
    request.node.user_properties.append(("rng_seed", seed))
    return np.random.default_rng(seed)
