"""Regression diagnostics: the singular values of a sample of the LSM design matrices (the regressors of the paths
that enter a regression), by the one-sided Jacobi SVD of ``linalg_gpu.jacobi`` (high relative accuracy, so
that small singular values are right and the effective rank can be trusted). Per valuation date the report gives
the smallest effective rank (singular values above sigma_max / sqrt(cond_max): those the truncated eigen-solve of
the normal equations keeps) against the basis size p, and the condition number of the normal equations, kappa(X)^2,
which the robust solver's methods see. They explain the solver mix and the condition plot: a design matrix of
effective rank below p (few in-the-money paths, regressors that are nearly collinear on them) is where LDL^T
breaks down or loses accuracy and the eigen fallback takes over."""

from __future__ import annotations

import numpy as np

from linalg_gpu.jacobi import jacobi_svdvals

DESIGN_SAMPLE = 4          # outer paths (the first, whatever the chunking) whose design matrices are analysed
#: LSM calls analysed per valuation date: the first in the plan's order (of a stack of contracts, its first). A
#: desk of 400 trades spent 31 s of a 56 s CPU engine (54 s of 165 s on an H200) in the analysis of every call.
DESIGN_STACKS = 4


def analyse(Xs, cond_max) -> list[dict]:
    """The diagnostics of each design matrix X (m, p), m >= 1, of a list: its singular values, effective rank at
    ``cond_max`` and kappa(X)^2 (inf where X is singular). Those of one basis size p go through one stacked
    Jacobi call (``jacobi_svdvals``; rows of zeros pad them to a common height, which leaves the singular values
    as they are)."""
    out = [None] * len(Xs)
    for p in sorted({X.shape[1] for X in Xs}):
        idx = [i for i, X in enumerate(Xs) if X.shape[1] == p]
        m = max(p, *(Xs[i].shape[0] for i in idx))
        stack = np.zeros((len(idx), m, p))
        for k, i in enumerate(idx):
            stack[k, :Xs[i].shape[0]] = Xs[i]
        for i, s in zip(idx, np.asarray(jacobi_svdvals(stack), dtype=np.float64), strict=True):
            top = s.max(initial=0.0)
            rank = int(np.sum(s > top / np.sqrt(cond_max))) if top > 0 else 0
            with np.errstate(over="ignore"):                              # (beyond float64: inf, as for s = 0)
                cond2 = float((top / s.min()) ** 2) if s.min() > 0 else float("inf")
            out[i] = {"singular_values": s, "rank": rank, "p": p, "cond2": cond2}
    return out


def sample(S, payoff, psi, itm_only, n) -> list:
    """The design matrices (host float64, the regression's paths only) of the first ``n`` path sets of S
    (B, M, N, d) at the first regression date (the nearest the valuation date, where the inner paths have spread
    least and the regressors are most nearly collinear) and the last (of N - 1): a list of (date index, X). With
    eight paths at every date, one matrix at a time, the analysis took 4 s of bench_cva's 5 s engine on an H100."""
    from linalg_gpu._backend import to_host

    out = []
    S = np.asarray(to_host(S[:n]), dtype=np.float64)
    for j in sorted({0, S.shape[2] - 2}) if S.shape[2] >= 2 else []:
        Sj = S[:, :, j]
        h = np.asarray(payoff(Sj), dtype=np.float64)
        X = np.asarray(psi(Sj, h), dtype=np.float64)                  # (n, M, p)
        keep = h > 0 if itm_only else np.ones(h.shape, dtype=bool)
        out.extend((j, X[i][keep[i]]) for i in range(X.shape[0]) if keep[i].any())
    return out
