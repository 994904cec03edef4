"""Pivot orderings of a Jacobi sweep: the steps of a sweep as sets of disjoint pivot pairs.

- ``round_robin``: the chess tournament (Torun, Yilmaz & Akansu, Torun et al., section III; the
  Brent-Luk parallel ordering of Acosta-Quinonez): n players (a dummy added for odd n) on a circle of
  seats, seat k playing seat n - 1 - k, n - 1 rounds; after each round the first player stays
  and the others move one seat.
- ``modified_modulus``: Novakovic & Singer's strategy (Novakovic-Singer HSVD, section 2 and Fig. 1): in step r
  the pairs (i, j) with i + j = r (mod n), starting on the antidiagonal r = n - 1; for even
  n = 2q the two indices left alone in an even step, r/2 and r/2 + q, are paired with each other,
  so a quasi-sweep has n steps of q pairs and annihilates the pairs (i, i + q) twice.
- ``row_cyclic``: the sequential order (0, 1), (0, 2), ..., (n - 2, n - 1), one pair per step.

Each function returns a list of int64 arrays of shape (k, 2) with i < j in every row; within a
step no index appears twice, and one sweep (quasi-sweep) covers every pair i < j.
"""

from __future__ import annotations

import numpy as np

ORDERINGS = ("round_robin", "modified_modulus", "row_cyclic")


def _check(n):
    if int(n) != n or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    return int(n)


def _as_steps(steps):
    return [np.array(sorted((min(i, j), max(i, j)) for i, j in s), dtype=np.int64).reshape(-1, 2)
            for s in steps if s]


def round_robin(n) -> list[np.ndarray]:
    """The chess-tournament steps: n - 1 rounds of n/2 pairs (n rounds of (n - 1)/2 for odd n)."""
    n = _check(n)
    if n < 2:
        return []
    m = n + (n % 2)                                      # a dummy player n for odd n
    seats = list(range(m))
    steps = []
    for _ in range(m - 1):
        steps.append([(seats[k], seats[m - 1 - k]) for k in range(m // 2)
                      if seats[k] < n and seats[m - 1 - k] < n])
        seats = [seats[0], seats[-1]] + seats[1:-1]       # the first stays, the others move one seat
    return _as_steps(steps)


def modified_modulus(n) -> list[np.ndarray]:
    """The (modified) modulus steps, starting on the antidiagonal; n steps."""
    n = _check(n)
    if n < 2:
        return []
    q = n // 2
    steps = []
    for s in range(n):
        r = (n - 1 + s) % n
        pairs = [(i, (r - i) % n) for i in range(n) if i < (r - i) % n]
        if n % 2 == 0 and r % 2 == 0:
            pairs.append((r // 2, r // 2 + q))           # the two indices with 2i = r (mod n)
        steps.append(pairs)
    return _as_steps(steps)


def row_cyclic(n) -> list[np.ndarray]:
    """One pair per step, row by row: (0, 1), (0, 2), ..., (n - 2, n - 1)."""
    n = _check(n)
    return _as_steps([[(i, j)] for i in range(n) for j in range(i + 1, n)])


def sweep(n, ordering="round_robin") -> list[np.ndarray]:
    """The steps of one sweep of ``ordering`` (one of ``ORDERINGS``)."""
    if ordering not in ORDERINGS:
        raise ValueError(f"ordering must be one of {ORDERINGS}, got {ordering!r}")
    return {"round_robin": round_robin, "modified_modulus": modified_modulus, "row_cyclic": row_cyclic}[ordering](n)
