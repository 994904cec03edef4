"""The pivot orderings of ``linalg_gpu.jacobi.orderings``: valid steps and full coverage of a sweep.

Every step must be a set of disjoint pairs i < j (so that its rotations commute and can be
applied at once), and one sweep must visit every pair: exactly once for round_robin and
row_cyclic; for modified_modulus (Novakovic-Singer HSVD, section 2) n steps of n/2 pairs for even n with
the pairs (i, i + n/2) twice and the rest once, and each pair once for odd n.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from linalg_gpu.jacobi.orderings import ORDERINGS, modified_modulus, round_robin, row_cyclic, sweep

SIZES = tuple(range(41)) + (63, 64, 100, 101, 128)
FUNCS = {"round_robin": round_robin, "modified_modulus": modified_modulus, "row_cyclic": row_cyclic}


def _pair_counts(steps):
    return Counter((int(i), int(j)) for step in steps for i, j in step)


def _all_pairs(n):
    return {(i, j) for i in range(n) for j in range(i + 1, n)}


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize("n", SIZES)
def test_steps_are_disjoint_ordered_pairs(ordering, n):
    steps = FUNCS[ordering](n)
    assert isinstance(steps, list)
    for step in steps:
        assert isinstance(step, np.ndarray) and step.dtype == np.int64
        assert step.ndim == 2 and step.shape[1] == 2 and step.shape[0] >= 1
        assert (step[:, 0] < step[:, 1]).all(), step
        assert step.min() >= 0 and step.max() < n
        assert len(np.unique(step)) == step.size, f"an index appears twice in one step: {step}"


@pytest.mark.parametrize("ordering", ["round_robin", "row_cyclic"])
@pytest.mark.parametrize("n", SIZES)
def test_every_pair_exactly_once(ordering, n):
    counts = _pair_counts(FUNCS[ordering](n))
    assert set(counts) == _all_pairs(n)
    assert set(counts.values()) <= {1}


@pytest.mark.parametrize("n", SIZES)
def test_round_robin_shape(n):
    steps = round_robin(n)
    if n < 2:
        assert steps == []
    elif n % 2 == 0:                                   # n - 1 rounds, each a perfect matching
        assert len(steps) == n - 1
        for step in steps:
            assert sorted(step.ravel().tolist()) == list(range(n))
    else:                                              # n rounds of (n - 1) / 2 (one player rests)
        assert len(steps) == n
        assert all(len(step) == (n - 1) // 2 for step in steps)
        rests = [next(iter(set(range(n)) - set(step.ravel().tolist()))) for step in steps]
        assert sorted(rests) == list(range(n))         # each player rests exactly once


@pytest.mark.parametrize("n", SIZES)
def test_row_cyclic_order(n):
    steps = row_cyclic(n)
    assert [tuple(s[0]) for s in steps] == [(i, j) for i in range(n) for j in range(i + 1, n)]
    assert all(len(s) == 1 for s in steps)


@pytest.mark.parametrize("n", SIZES)
def test_modified_modulus_coverage(n):
    steps = modified_modulus(n)
    counts = _pair_counts(steps)
    assert set(counts) == _all_pairs(n)
    if n < 2:
        assert steps == []
        return
    assert len(steps) == n
    if n % 2 == 0:
        q = n // 2
        assert all(len(step) == q for step in steps)
        for (i, j), c in counts.items():
            assert c == (2 if j == i + q else 1), ((i, j), c)
    else:
        assert all(len(step) == (n - 1) // 2 for step in steps)
        assert set(counts.values()) == {1}


@pytest.mark.parametrize("n", [k for k in SIZES if k >= 2])
def test_modified_modulus_steps_are_antidiagonals(n):
    """Step s holds the pairs with i + j = r (mod n), r = n - 1 + s, starting on the antidiagonal;
    for even n and even r also (r/2, r/2 + n/2)."""
    steps = modified_modulus(n)
    first = {(int(i), int(j)) for i, j in steps[0]}
    assert first == {(i, n - 1 - i) for i in range(n) if i < n - 1 - i}
    q = n // 2
    for s, step in enumerate(steps):
        r = (n - 1 + s) % n
        pairs = {(int(i), int(j)) for i, j in step}
        expected = {(i, (r - i) % n) for i in range(n) if i < (r - i) % n}
        if n % 2 == 0 and r % 2 == 0:
            expected.add((r // 2, r // 2 + q))
        assert pairs == expected, (s, r)


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize("n", [0, 1, 2, 7, 16, 33])
def test_sweep_dispatches(ordering, n):
    got, want = sweep(n, ordering), FUNCS[ordering](n)
    assert len(got) == len(want)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_sweep_default_is_round_robin():
    assert all(np.array_equal(a, b) for a, b in zip(sweep(12), round_robin(12), strict=True))


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize("bad", [-1, -10, 2.5, 3.0000001])
def test_bad_n_raises(ordering, bad):
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        FUNCS[ordering](bad)
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        sweep(bad, ordering)


def test_integral_float_n_accepted():
    assert len(round_robin(6.0)) == 5


@pytest.mark.parametrize("bad", ["chess", "", None, "ROUND_ROBIN"])
def test_bad_ordering_raises(bad):
    with pytest.raises(ValueError, match="ordering must be one of"):
        sweep(8, bad)
