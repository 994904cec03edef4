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

from linalg_gpu.jacobi import jacobi_svd

DESIGN_SAMPLE = 8          # outer paths (the first, whatever the chunking) whose design matrices are analysed
#: LSM calls analysed per valuation date: the first in the plan's order (of a stack of contracts, its first). A
#: desk of 400 trades spent 31 s of a 56 s CPU engine (54 s of 165 s on an H200) in the analysis of every call.
DESIGN_STACKS = 4


def design_rows(X, cond_max) -> dict:
    """The diagnostics of one design matrix X (m, p), m >= 1: its singular values, effective rank at
    ``cond_max`` and kappa(X)^2 (inf where X is singular)."""
    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] < X.shape[1]:                                       # fewer paths than regressors: rank <= m
        X = np.vstack([X, np.zeros((X.shape[1] - X.shape[0], X.shape[1]))])
    s = np.asarray(jacobi_svd(X, compute_uv=False), dtype=np.float64)
    top = s.max(initial=0.0)
    rank = int(np.sum(s > top / np.sqrt(cond_max))) if top > 0 else 0
    cond2 = float((top / s.min()) ** 2) if s.min() > 0 else float("inf")
    return {"singular_values": s, "rank": rank, "p": X.shape[1], "cond2": cond2}


def sample(S, payoff, psi, itm_only, n, cond_max):
    """The diagnostics of the design matrices of the first ``n`` path sets of S (B, M, N, d) at each regression
    date (all but the last): a list of (date index, diagnostics), host float64."""
    from linalg_gpu._backend import to_host

    out = []
    S = np.asarray(to_host(S[:n]), dtype=np.float64)
    for j in range(S.shape[2] - 1):
        Sj = S[:, :, j]
        h = np.asarray(payoff(Sj), dtype=np.float64)
        X = np.asarray(psi(Sj, h), dtype=np.float64)                  # (n, M, p)
        keep = h > 0 if itm_only else np.ones(h.shape, dtype=bool)
        for i in range(X.shape[0]):
            if keep[i].any():
                out.append((j, design_rows(X[i][keep[i]], cond_max)))
    return out
