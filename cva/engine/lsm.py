"""Longstaff-Schwartz backward induction on a batch of independent path sets.

Longstaff & Schwartz (2001), "Valuing American options by simulation: a simple least-squares
approach", RFS 14(1): at each exercise date, from the last but one backwards, the discounted
future cashflow of each path is regressed on the basis psi(S) over the in-the-money paths; a
path exercises where its exercise value is positive and at least the fitted continuation value.

The batch dimension B holds independent path sets (one per outer path and date in the nested
engine of Abbas-Turki-Graillat, section 2; B = 1 for a plain price). Each date's B regressions are one
batch of p x p normal equations

    A = (1/M) sum_m w_m psi_m psi_m^T,   b = (1/M) sum_m w_m psi_m V_m,   w_m = 1[h(S_m) > 0],

assembled by batched matrix products on the arrays' device (for the affine basis on the GPU, from the
date's slice of S as it lies, without forming psi; for the Laguerre basis by kernels that evaluate psi) and
solved by
:func:`linalg_gpu.solve_small` (method, cond_max, rtol from the config; the solver report of
each date is kept). Like tf-quant-finance's ``least_square_mc``, the algorithm knows neither
model nor product: it takes the paths and two functions.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

import linalg_gpu as lg
from cva.engine.basis import per_group
from linalg_gpu import strided
from linalg_gpu._backend import get_array_module
from linalg_gpu._backend import to_host as _host

CUDA_DIR = Path(__file__).resolve().parent / "cuda"      # the engine's kernels (the loader is linalg_gpu's)


@dataclass
class LSMResult:
    """The outcome of :func:`longstaff_schwartz` for B path sets of M paths.

    Attributes
    ----------
    value : (B,) mean discounted cashflow at t0 (the price estimate of each path set).
    stderr : (B,) its Monte Carlo standard error, std(cashflow) / sqrt(M).
    cashflow : (B, M) discounted cashflow of each path at t0.
    coefficients : per exercise date but the last, the (B, p) regression coefficients (the policy).
    stopping : with ``keep_stopping``, per depth 0 .. s the (B, M) index of each path's exercise date (its first
        exercise, N - 1 for none before the maturity) under that depth's parts' policies (:func:`stopped_cashflows`).
    reports : per exercise date but the last, the :class:`linalg_gpu.SolverReport`.
    conditions : per exercise date but the last, sampled condition numbers (host arrays), if asked.
    exercised : (N,) fraction of all paths whose exercise value is positive and at least the fitted continuation
        value at each date (the payoff positive at the last); with ``exercised_per_set`` (N, B), each set's.
    parts : with ``splits`` = s, per depth 1 .. s the (B, 2^depth) values of the sets' equal parts, each
        part regressed and exercised on its own paths.
    """

    value: object
    cashflow: object
    coefficients: list = field(default_factory=list)
    reports: list = field(default_factory=list)
    conditions: list = field(default_factory=list)
    exercised: np.ndarray | None = None
    parts: list = field(default_factory=list)
    stopping: list = field(default_factory=list)

    @property
    def stderr(self):
        """(B,) std(cashflow) / sqrt(M), formed when asked (the nested engine's inner calls never ask: three
        launches each saved)."""
        V = self.cashflow
        return V.std(axis=1, ddof=1) / np.sqrt(V.shape[1])


def _check(S, times, t0):
    xp = get_array_module(S)
    if S.ndim != 4:
        raise ValueError(f"S must have shape (B, M, N, d), got {S.shape}")
    times = np.asarray(times, dtype=float)
    if times.shape != (S.shape[2],) or np.any(np.diff(times) <= 0) or times[0] < t0:
        raise ValueError(f"times must be {S.shape[2]} increasing exercise dates >= t0 = {t0}, got {times}")
    return xp, times


def longstaff_schwartz(S, times, payoff_fn, basis_fn, rate, *, t0=0.0, solver=None, itm_only=True,
                       memory=None, keys=None, timings=None, condition_sample=0, regression_dtype=None, splits=0,
                       keep_stopping=False, exercised_per_set=False, deferred=None):
    """Price the Bermudan claim with exercise dates ``times`` on each of B path sets.

    Parameters
    ----------
    S : array (B, M, N, d), numpy or cupy
        Asset prices of M paths per set at the N exercise dates (the last is the maturity).
    times : (N,) increasing floats, the exercise dates (absolute times, >= t0).
    payoff_fn : callable, S (..., d) -> exercise value (...).
    basis_fn : callable, (S (..., d), exercise value (...)) -> regressors (..., p).
        A :class:`cva.engine.basis.Basis` whose ``affine`` is true is used on the GPU without forming the
        regressors: the normal equations come from S's slice by strided products, and the fitted values, exercise
        decisions and cashflows of every depth from one kernel per date (``cuda/affine_exercise.cu``); one whose
        ``fused`` is true (Laguerre, d = 1) has them from kernels that evaluate psi (``cuda/laguerre_lsm.cu``).
    rate : float, the flat continuously compounded rate.
    t0 : float, the valuation time (the start of the paths).
    solver : dict, optional
        Keyword arguments of :func:`linalg_gpu.solve_small` (method, cond_max, rtol).
    itm_only : bool, default True
        Regress on the in-the-money paths only (Longstaff & Schwartz's choice).
    memory : linalg_gpu.SolverMemory, optional
        The paper's solver memory; its key per date is ``keys[j]`` (default: the date itself), for the whole
        sets' systems and, with ``splits``, their parts' after them (one solver call per date).
    timings : dict, optional
        Accumulates seconds per stage ("assembly": basis and normal equations, "conditions": the
        condition sample, "solve", "exercise"); on the GPU from CUDA events read at the end (for
        benchmarks and reports).
    condition_sample : int, default 0
        Per date, the 2-norm condition numbers of the first this many regression matrices are
        computed (eigenvalues by LAPACK / cuSOLVER) into ``result.conditions`` (Abbas-Turki-Graillat, Fig. 2).
    regression_dtype : dtype, optional
        The precision of the regression: the regressors (from S cast to it), the normal equations, the
        solves and the continuation values. Default: S's dtype. float64 for float32 paths is for
        bases whose normal equations float32 cannot hold (:func:`cva.engine.basis.regression_dtype`).
    splits : int, default 0
        Also price each set's 2, 4, ..., 2^splits equal parts (paths in order) on their own, into
        ``result.parts`` (the inner sets of :mod:`cva.engine.estimators`): the Gram matrices of the finest parts
        are formed once and averaged for the coarser ones (with a ``fused`` basis each depth's are computed in
        its own pass), the right-hand sides, solves and exercise decisions are each part's own. The reports,
        conditions and coefficients are the whole sets'.
    keep_stopping : bool, default False
        Keep each path's exercise date per depth (``result.stopping``).
    exercised_per_set : bool, default False
        ``result.exercised`` per set, (N, B) (the stacked contracts of :func:`cva.engine.pricing.price`).
    deferred : Deferred, optional
        Leave the call's exercise shares, condition numbers and non-finite check, and its stage times, to
        ``deferred`` (the caller's, read with its other calls' by :meth:`Deferred.read`): on the GPU the call then
        never stops the host.

    Returns
    -------
    LSMResult
    """
    xp, times = _check(S, times, t0)
    clock = StageClock(xp, timings) if deferred is None else deferred.clock
    B, M, N, _ = S.shape
    solver = dict(solver or {})
    keys = list(times) if keys is None else list(keys)
    V = payoff_fn(S[:, :, N - 1])                                                   # (B, M)
    if M % 2 ** splits or M // 2 ** splits < 1:
        raise ValueError(f"splits={splits} needs M a multiple of {2 ** splits}, got M = {M}")
    Vs = [V] * (splits + 1)                                                         # per depth: its parts' cashflows
    decisions = [None] * N          # each date's (B, M) decisions, their shares taken at the end (the affine step
                                    # counts its own: ``counts`` below)
    nonfinite = [None] * (N - 1)                                  # per date: a system had NaN/Inf normal equations
    decisions[N - 1] = V > 0
    coefficients, reports, conditions = [None] * (N - 1), [None] * (N - 1), [None] * (N - 1)
    stop_dtype = np.uint8 if N <= 256 else np.int32
    stopping = [xp.full((B, M), N - 1, dtype=stop_dtype) for _ in Vs] if keep_stopping else []
    clock("exercise")                                                              # (the payoff at maturity)
    affine = xp is not np and getattr(basis_fn, "affine", False)                   # psi from S itself
    fused = xp is not np and getattr(basis_fn, "fused", False) and S.shape[3] == 1  # psi evaluated in the kernels
    if fused and basis_fn.groups > 1:
        raise ValueError("the fused (Laguerre) basis takes one scale for the batch, not one per group")
    rdt = S.dtype if regression_dtype is None else np.dtype(regression_dtype)
    if rdt not in (np.float32, np.float64):
        raise ValueError(f"regression_dtype must be float32 or float64, got {regression_dtype!r}")
    gram_cache, step = {}, None                                   # (gram_cache: what the dates' equations share)
    if affine and N > 1:        # one kernel per date, its exercises counted per date and set; its cashflows are
        planes = _gram_planes(xp, gram_cache, basis_fn, B, M, len(Vs), rdt)    # planes of the Gram's columns
        step = _AffineStep(S, basis_fn, rdt, Vs, stopping,                     # where the regression's dtype is
                           planes[-len(Vs):] if rdt == S.dtype else None)      # theirs
        Vs, stopping = list(step.V), list(step.stop) if keep_stopping else []
        counts = xp.zeros((N, B), dtype=np.uint64)
    disc = [S.dtype.type(np.exp(-rate * (times[j + 1] - times[j]))) for j in range(N - 1)]   # date j + 1 to j
    for j in range(N - 2, -1, -1):
        if step is None:
            Vs = [v * disc[j] for v in Vs]
        elif j == N - 2:                                   # (later dates: the affine step discounted them)
            step.V *= disc[j]
        Sj = S[:, :, j].astype(rdt, copy=False)                                     # (B, M, d)
        h = payoff_fn(Sj)                                                           # (B, M)
        mask = h > 0 if itm_only else None
        Vr = [v.astype(rdt, copy=False) for v in Vs]
        X = None if affine or fused else basis_fn(Sj, h)                            # (B, M, p)
        if fused:                                          # each depth's parts directly: one pass each
            As, bs = map(list, zip(*(_fused_normal_equations(_parts(Sj, 2 ** k), basis_fn, _parts(h, 2 ** k),
                                                             _parts(Vr[k], 2 ** k),
                                                             None if mask is None else _parts(mask, 2 ** k))
                                     for k in range(splits + 1)), strict=True))
        elif xp is not np:                                 # every depth from one Gram of the finest parts, joined
            As, bs = _gram_normal_equations(xp, Sj if affine else X, basis_fn if affine else None, h, Vr, mask,
                                            joined=True, cache=gram_cache)
            As, bs = [As], [bs]
        elif splits:
            As, bs = _split_normal_equations(xp, X, Vr, mask)
        else:
            A, b = _normal_equations(xp, X, Vr[0], mask)                           # (B, p, p), (B, p)
            As, bs = [A], [b]
        A_all, b_all = (As[0], bs[0]) if len(As) == 1 else (xp.concatenate(As), xp.concatenate(bs))
        clock("assembly")
        if condition_sample:                               # (their eigenvalues at the end, in one call)
            conditions[j] = A_all[:min(condition_sample, B)].copy()
            clock("conditions")
        # every depth's systems in one call; the input is checked at the end of the call, with the exercise
        # shares (on the GPU the solver then need not stop the host to read its flags)
        kw = {"memory": memory, "key": keys[j]} if memory is not None else {}
        beta, rep = lg.solve_small(A_all, b_all, return_report=True, assume_symmetric=True, check_finite=False,
                                   **solver, **kw)
        nonfinite[j] = rep.nonfinite                                              # (reduced at the end)
        betas = xp.split(beta, [B * (2 ** depth - 1) for depth in range(1, splits + 1)])   # per depth
        reports[j] = rep if splits == 0 else report_rows(rep, slice(0, B))     # the whole sets' systems
        clock("solve")
        if step is not None:                               # every depth, and the discount to date j - 1
            step(S[:, :, j], h, beta, j, disc[j - 1] if j else None, count=counts[j])
        for depth, C in enumerate(_continuations(Sj, X, basis_fn, h, betas, fused) if step is None else ()):
            ex = (h > 0) & (h >= C)
            decisions[j] = ex if depth == 0 else decisions[j]
            Vs[depth] = xp.where(ex, h.astype(S.dtype, copy=False), Vs[depth])
            if keep_stopping:
                stopping[depth] = xp.where(ex, stopping[depth].dtype.type(j), stopping[depth])
        coefficients[j] = betas[0]
        clock("exercise")
    value, V, parts = _at_t0(Vs, times[0] - t0, rate)
    if step is None:                                                 # (the affine step counted its dates')
        counts = xp.stack(decisions).sum(axis=2, dtype=np.int64)      # (N, B); then (N,): two launches, each
    else:
        counts[N - 1] = decisions[N - 1].sum(axis=1, dtype=np.uint64)
    shares = counts / M if exercised_per_set else counts.sum(axis=1) / (B * M)  # with many outputs or short sums
    clock("exercise")
    conds = _condition_numbers(xp, [c for c in conditions if c is not None])
    clock("conditions")
    result = LSMResult(value=value, cashflow=V, coefficients=coefficients, reports=reports,
                       conditions=conditions, parts=parts, stopping=stopping)
    call = (weakref.ref(result), conditions, shares, xp.stack(nonfinite).any(axis=1) if N > 1 else
            xp.zeros(0, dtype=bool), conds, times, rdt)       # (not the result: its cashflows and reports stay free)
    if deferred is not None:
        deferred.calls.append(call)
        return result
    _read_flags(xp, [call])
    clock("exercise")
    clock.flush()
    return result


class Deferred:
    """What :func:`longstaff_schwartz` calls leave to their caller (``deferred=``): their stage times, recorded by the
    caller's ``clock`` (:class:`StageClock`), and their exercise shares, condition numbers and non-finite checks,
    read for all of them at once by :meth:`read`. On the GPU a read stops the host until the queue has drained, and
    the GPU then waits for the host's next launches: once per call, it cost a desk chunk of 4096 outer paths about
    0.45 s (151 calls; 2.96 s for 2.49 s of kernels on an H200)."""

    def __init__(self, clock):
        self.clock, self.calls = clock, []

    def read(self):
        """The calls' flags in one transfer: each result's ``exercised`` and ``conditions`` filled; the first call
        with non-finite normal equations raises its ValueError."""
        calls, self.calls = self.calls, []
        if calls:
            _read_flags(get_array_module(calls[0][2]), calls)


def _read_flags(xp, calls):
    """The read of the calls [(their result (weakly), its conditions, shares, non-finite per date, condition
    numbers, times, dtype)]."""
    flags = _host(xp.concatenate([x.ravel().astype(np.float64) for _, _, shares, bad, conds, _, _ in calls
                                  for x in (shares, bad, *conds)]))
    at = 0
    for ref, conditions, shares, bad, _, times, rdt in calls:
        nonfinite = flags[at + shares.size:at + shares.size + bad.size]
        if nonfinite.any():
            j = int(np.flatnonzero(nonfinite)[0])
            raise ValueError(f"longstaff_schwartz: the regression at exercise date {times[j]:g} has non-finite "
                             f"normal equations (NaN or Inf in the paths or payoffs, or an overflow of {rdt})")
        result = ref()
        if result is not None:
            result.exercised = flags[at:at + shares.size].reshape(shares.shape)
        at += shares.size + bad.size
        for j, c in enumerate(conditions):
            if c is not None:
                conditions[j], at = flags[at:at + len(c)], at + len(c)


def _condition_numbers(xp, As):
    """The 2-norm condition numbers (float64) of the sampled normal equations ``As`` [(k, p, p) per date], joined,
    from one eigenvalue call (LAPACK / cuSOLVER; a call per date cost the host about 0.7 ms); inf where singular."""
    if not As:
        return []
    w = xp.linalg.eigvalsh(As[0] if len(As) == 1 else xp.concatenate(As))        # (k, p) ascending
    low, high = xp.abs(w[:, 0]), xp.abs(w[:, -1])
    return [xp.where(low > 0, high / xp.where(low > 0, low, 1), xp.inf).astype(np.float64)]


def _at_t0(Vs, dt, rate):
    """From each depth's cashflows (B, M) at the first exercise date, dt before it t0: the sets' values (B,), the
    whole sets' discounted cashflows (B, M) and per depth 1 .. s the parts' values."""
    B, M = Vs[0].shape
    Vs = [v * v.dtype.type(np.exp(-rate * dt)) for v in Vs]                         # (B, M) at t0
    V = Vs[0]
    parts = [Vs[depth].reshape(B, 2 ** depth, M // 2 ** depth).mean(axis=2) for depth in range(1, len(Vs))]
    return V.mean(axis=1), V, parts


def _continuations(Sj, X, basis_fn, h, betas, fused):
    """The fitted continuation values psi beta (B, M) of one date for each depth's coefficients ``betas[depth]``
    (B 2^depth, p) of the sets' 2^depth equal parts: by the Laguerre kernels (fused), else from the formed
    regressors X (the affine basis on the GPU: :class:`_AffineStep`)."""
    B, M = h.shape
    out = []
    for depth, beta in enumerate(betas):
        n = 2 ** depth
        if fused:
            C = _fused_fitted(_parts(Sj, n), basis_fn, _parts(h, n), beta)
        else:
            C = strided.matmul(_parts(X, n), beta[..., None])[..., 0]            # (fixed-order sums)
        out.append(C.reshape(B, M))
    return out


def report_rows(rep, rows):
    """The solver report of the systems ``rows`` (a slice) of a batch."""
    arrays = ("method_code", "residual", "n_discarded", "cond_estimate", "breakdown", "ok", "nonfinite")
    return replace(rep, **{f: getattr(rep, f)[rows] for f in arrays},
                   start_codes=None if rep.start_codes is None else rep.start_codes[rows])


def _parts(a, n):
    """(B, M, ...) as (B n, M / n, ...): each set's n equal parts of consecutive paths (a view where the
    strides allow)."""
    B, M = a.shape[:2]
    return a.reshape((B * n, M // n) + a.shape[2:])


def _split_normal_equations(xp, X, Vs, mask):
    """Per depth 0 .. s the normal equations (B 2^depth, p, p), (B 2^depth, p) of each set's 2^depth parts:
    the finest parts' Gram matrices once, the coarser ones as their means (the Gram matrix of a union of
    paths is the sum of its parts'; each A carries 1 / paths), the right-hand sides from each depth's own
    cashflows ``Vs[depth]``; a part with no regression path gets A = I, b = 0."""
    s = len(Vs) - 1
    n = 2 ** s
    A_f, b_f = _normal_equations(xp, _parts(X, n), _parts(Vs[s], n), None if mask is None else _parts(mask, n),
                                 empty=False)
    B = X.shape[0]
    As, bs = [], []
    for depth in range(s + 1):
        k = 2 ** depth
        mk = None if mask is None else _parts(mask, k)
        if depth == s:
            A, b = A_f, b_f
        else:
            A = A_f.reshape((B * k, n // k) + A_f.shape[1:]).mean(axis=1)
            Z, V = _parts(X, k), _parts(Vs[depth], k)
            w = V if mk is None else V * mk
            b = (w[:, None, :] @ Z)[:, 0] / Z.dtype.type(Z.shape[1])
        A, b = _identity_where_empty(xp, A, b, mk)
        As.append(A)
        bs.append(b)
    return As, bs


class StageClock:
    """Adds each stage's seconds since the last call to ``timings[stage]`` (no-op without ``timings``).

    On the CPU the intervals are host time. On the GPU they are CUDA events recorded on the current stream,
    read when :meth:`flush` is called: the stages are timed on the device's timeline without stopping the host
    between them (a synchronization per stage cost the pipelining of kernel launches), and the stages' sum is
    the device time from the clock's start to the last event."""

    def __init__(self, xp, timings):
        self.xp, self.timings = xp, timings
        self.events = timings is not None and xp is not np
        self.pending = []
        self.t = self._now()

    def _now(self):
        if not self.events:
            return time.perf_counter()
        e = self.xp.cuda.Event()
        e.record()
        return e

    def __call__(self, stage):
        if self.timings is None:
            return
        t = self._now()
        if self.events:
            self.pending.append((stage, self.t, t))
        else:
            self.timings[stage] = self.timings.get(stage, 0.0) + t - self.t
        self.t = t

    def skip(self):
        """Restart the interval without booking it (the time was booked elsewhere)."""
        if self.timings is not None:
            self.t = self._now()

    def flush(self):
        """Book the device intervals recorded so far (waits for the last event)."""
        if self.pending:
            self.pending[-1][2].synchronize()
            for stage, a, b in self.pending:
                self.timings[stage] = self.timings.get(stage, 0.0) + self.xp.cuda.get_elapsed_time(a, b) / 1e3
            self.pending = []


def _normal_equations(xp, X, V, mask, empty=True):
    """The (B, p, p) normal equations of one date (the CPU's; the GPU's are :func:`_gram_normal_equations`); with
    ``empty``, a set with no regression path gets A = I, b = 0."""
    B, M, p = X.shape
    Xw = X if mask is None else X * mask[..., None]                                 # (B, M, p)
    XwT = Xw.transpose(0, 2, 1)                                                     # (B, p, M)
    A = (XwT @ X) / X.dtype.type(M)                                                 # (B, p, p)
    b = (XwT @ V[..., None])[..., 0] / X.dtype.type(M)                             # (B, p)
    return _identity_where_empty(xp, A, b, mask) if empty else (A, b)


def _identity_where_empty(xp, A, b, mask):
    """A = I, b = 0 for the sets with no regression path (no path in the money)."""
    if mask is None:
        return A, b
    empty = ~mask.any(axis=1)                                                       # (B,)
    if xp is not np or empty.any():                       # (the GPU's host does not ask: a stop of the queue)
        A, b = _identity_where(xp, A, b, empty)
    return A, b


def _identity_where(xp, A, b, empty):
    """A = I, b = 0 where ``empty`` (B,)."""
    return (xp.where(empty[:, None, None], xp.eye(A.shape[1], dtype=A.dtype), A),
            xp.where(empty[:, None], b.dtype.type(0), b))


def _gram_normal_equations(xp, Z, basis, h, Vs, mask, joined=False, cache=None):
    """Per depth 0 .. s (``Vs`` the cashflows of each depth) the normal equations (B 2^depth, p, p),
    (B 2^depth, p) of each set's 2^depth equal parts, from one weighted Gram matrix of the finest parts' rows
    (:func:`linalg_gpu.strided.concat_gram`: Z read as it lies, sums in a fixed order, so the same bits whatever
    the chunk): A and b are its blocks, a coarser part's the mean of its finest parts' (the Gram matrix of a union
    of paths is the sum of its parts'); a part with no regression path gets A = I, b = 0. With ``joined`` the
    depths' equations come as one batch in depth order, (B (2^(s+1) - 1), p, p) and (..., p): the solver's;
    ``cache`` (a dict per Longstaff-Schwartz call) keeps what does not change
    with the date (the column of ones, the scale factors, psi's order) and the columns' planes
    (:func:`_gram_planes`): cashflows that already are their planes (the affine step's) are not copied. On the GPU
    the depths' equations are one launch from the Gram matrix (``cuda/gram_equations.cu``; numpy twin
    :func:`gram_equations_twin`).

    ``Z`` is the regressors X (B, M, p), rows (X, V_0, ..., V_s); or, with an affine ``basis``, the slice S
    (B, M, d) of psi = (1, S / scale[, h / c]), rows (S, 1[, h / c], V_0, ..., V_s), without forming psi."""
    B, M, d = Z.shape
    s = len(Vs) - 1
    n = 2 ** s
    cache = {} if cache is None else cache
    extra = _extra_columns(basis)                                                  # psi's columns 1[, h / c]
    P = _gram_planes(xp, cache, basis, B, M, len(Vs), Z.dtype)                     # (extra + s + 1, B, M)
    if extra > 1:
        P[1] = basis.payoff_column(h)
    for k, v in enumerate(Vs):
        if not _same_array(v, P[extra + k]):
            P[extra + k] = v
    F = P.transpose(1, 2, 0)                                                       # (B, M, e), read as it lies
    w = None if mask is None else _parts(mask, n)                # (boolean: read as 0 and 1, no cast)
    v0 = d + extra                                                                 # V_0's column
    G = strided.concat_gram(_parts(Z, n), _parts(F, n), w, alpha=n / M, rows=v0)  # (B n, v0, d + e)
    idx = list(range(d)) if basis is None else [d, *range(d), *range(d + 1, v0)]   # psi's order: 1, x[, h / c]
    key = (d, extra, basis is None, Z.dtype.str)             # (one call's: the same for all its dates)
    if basis is not None and ("scale", key) not in cache:          # psi's factors 1 / scale: (groups, p) rows
        inv = basis.inverse_scale(d)                                               # (d,) or (groups, d)
        rows = np.concatenate([np.ones(inv.shape[:-1] + (1,)), inv, np.ones(inv.shape[:-1] + (extra - 1,))],
                              axis=-1)
        cache["scale", key] = xp.asarray(rows.reshape(-1, len(idx)), dtype=Z.dtype)
    scale = cache["scale", key] if basis is not None else None
    empty_where_zero = mask is not None and basis is not None      # psi's 1: A_00 is the part's weight
    if xp is np:
        A, b = gram_equations_twin(G, idx, v0, s, B, scale, empty_where_zero)
    else:
        if ("idx", key) not in cache:
            cache["idx", key] = xp.asarray(np.asarray(idx, dtype=np.int32))
        A, b = _gram_equations_gpu(G, cache["idx", key], v0, s, B, scale, empty_where_zero)
    if mask is not None and basis is None:                     # the formed regressors: the parts' own masks
        A, b = _identity_where(xp, A, b, xp.concatenate([~_parts(mask, 2 ** k).any(axis=1) for k in range(s + 1)]))
    if joined:
        return A, b
    ends = np.cumsum([B * 2 ** k for k in range(s + 1)])
    return xp.split(A, ends[:-1].tolist()), xp.split(b, ends[:-1].tolist())


def _extra_columns(basis):
    """psi's columns besides the slice in the Gram matrix's further columns: 1[, h / c] (affine), none (formed)."""
    return 0 if basis is None else 1 + bool(basis.payoff_regressor)


def _gram_planes(xp, cache, basis, B, M, depths, dtype):
    """The planes (e, B, M) of the Gram matrix's further columns (psi's 1[, h / c], then V_0 .. V_s) that one
    Longstaff-Schwartz call's dates share (in ``cache``), the 1 written once; the affine step keeps its cashflows
    in the last ``depths`` planes, so the dates copy none."""
    extra = _extra_columns(basis)
    P = cache.get("F")
    if P is None or P.shape != (extra + depths, B, M) or P.dtype != dtype:
        P = cache["F"] = xp.empty((extra + depths, B, M), dtype=dtype)
        if extra:
            P[0] = 1
    return P


def _same_array(a, b):
    """``a`` and ``b`` are the same elements (one memory, shape, strides and dtype): a copy would change nothing."""
    def ptr(x):
        return x.ctypes.data if isinstance(x, np.ndarray) else x.data.ptr
    return a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype and ptr(a) == ptr(b)


def gram_equations_twin(G, idx, v0, s, B, scale=None, empty_where_zero=False):
    """numpy twin of ``cuda/gram_equations.cu``: every depth's normal equations, (B (2^(s+1) - 1), p, p) and
    (..., p) in depth order, from the Gram matrix G (B 2^s, v0, cols) of the finest parts' rows
    (:func:`_gram_normal_equations`): psi's rows and columns ``idx`` of G, depth k's right-hand side its column
    v0 + k, a coarser part's the mean of its finest parts' (the Gram matrix of a union of paths is the sum of its
    parts'), times ``scale``'s factors (groups, p) of the system's group of sets (f_i f_j and f_i); with
    ``empty_where_zero`` A = I, b = 0 where A_00 = 0."""
    xp = get_array_module(G)
    n, p = 2 ** s, len(idx)
    Gp = G[:, idx]                                                                 # (B n, p, cols)
    levels = [Gp.reshape((B * 2 ** k, n // 2 ** k) + Gp.shape[1:]).mean(axis=1) for k in range(s)] + [Gp]
    Ab = xp.concatenate([lv[:, :, idx + [v0 + k]] for k, lv in enumerate(levels)])
    A, b = Ab[:, :, :p], Ab[:, :, p]
    if scale is not None:
        f = xp.concatenate([xp.repeat(scale, B * 2 ** k // scale.shape[0], axis=0) for k in range(s + 1)])
        A, b = A * (f[:, :, None] * f[:, None, :]), b * f
    if empty_where_zero:
        A, b = _identity_where(xp, A, b, A[:, 0, 0] == 0)
    return A, b


def _gram_equations_gpu(G, idx, v0, s, B, scale, empty_where_zero):
    """``cuda/gram_equations.cu``: :func:`gram_equations_twin` in one launch (``idx`` int32 on the device)."""
    import cupy as cp

    from linalg_gpu._kernels import get_function, grid_blocks

    p = idx.size
    systems = B * (2 ** (s + 1) - 1)
    A, b = cp.empty((systems, p, p), dtype=G.dtype), cp.empty((systems, p), dtype=G.dtype)
    G = cp.ascontiguousarray(G)
    if systems:
        fn = get_function("gram_equations.cu", "gram_equations", G.dtype, cuda_dir=CUDA_DIR)
        fn((grid_blocks(systems * p * (p + 1)),), (256,),
           (G, np.int32(G.shape[1]), np.int32(G.shape[2]), idx, np.int32(p),
            np.int32(v0), np.int32(s), np.uint64(0) if scale is None else scale,
            np.int32(1 if scale is None else scale.shape[0]), np.int32(empty_where_zero), A, b, np.int64(B)))
    return A, b


def _fused_kernel(name, S, basis):
    """The kernel ``name`` of ``cuda/laguerre_lsm.cu`` for S's dtype and the basis size p: (kernel, p, the
    arguments of S: its pointer and strides in elements, the arguments of the basis: 1 / scale and 1 / the payoff
    column's scale)."""
    from linalg_gpu._kernels import get_function

    dt = S.dtype
    p = 5 if basis.payoff_regressor else 4
    fn = get_function("laguerre_lsm.cu", name, dt, p, cuda_dir=CUDA_DIR)
    s_args = (np.uint64(S.data.ptr), np.int64(S.strides[0] // dt.itemsize), np.int64(S.strides[1] // dt.itemsize))
    return fn, p, s_args, (dt.type(basis.inverse_scale(1)[0]), dt.type(1.0 / np.mean(basis.scale)))


def _fused_normal_equations(S, basis, h, V, mask):
    """:func:`_normal_equations` of the Laguerre basis (with ``empty``) from the slice S (B, M, 1) as it lies:
    psi evaluated and summed in one pass per set (``cuda/laguerre_lsm.cu``; a set with no regression path gets
    A = I, b = 0 there, without a host check)."""
    import cupy as cp

    B, M, _ = S.shape
    dt = S.dtype
    fn, p, s_args, b_args = _fused_kernel("laguerre_normal_equations", S, basis)
    A, b = cp.empty((B, p, p), dtype=dt), cp.empty((B, p), dtype=dt)
    fn((B,), (256,), (*s_args, cp.ascontiguousarray(h, dtype=dt), cp.ascontiguousarray(V, dtype=dt),
                      np.uint64(0) if mask is None else cp.ascontiguousarray(mask), *b_args, A, b, np.int32(M),
                      dt.type(1.0 / M)))
    return A, b


def _fused_fitted(S, basis, h, beta):
    """psi beta (B, M) of the Laguerre basis from the slice S (B, M, 1) as it lies (``cuda/laguerre_lsm.cu``)."""
    import cupy as cp

    from linalg_gpu._kernels import grid_blocks

    B, M, _ = S.shape
    dt = S.dtype
    fn, _, s_args, b_args = _fused_kernel("laguerre_fitted", S, basis)
    out = cp.empty((B, M), dtype=dt)
    fn((grid_blocks(B * M),), (256,), (*s_args, cp.ascontiguousarray(h, dtype=dt), cp.ascontiguousarray(beta, dtype=dt),
                                      *b_args, out, np.int64(B), np.int32(M)))
    return out


def _affine_fitted(S, basis, h, betas):
    """psi beta (B, M) of the affine basis from the slice S (B, M, d) as it lies, for each depth's coefficients
    ``betas[depth]`` (B 2^depth, p) of the sets' 2^depth equal parts: one pass over S for all depths
    (:func:`linalg_gpu.strided.matmul` of the finest parts with one column per depth)."""
    B, M, d = S.shape
    xp = get_array_module(S)
    n = 2 ** (len(betas) - 1)
    inv = xp.asarray(basis.inverse_scale(d), dtype=S.dtype)                       # (d,) or (groups, d)

    def finest(beta):                                     # (B n, p): each finest part's coefficients
        k = beta.shape[0] // B
        return xp.repeat(beta.reshape(B, k, -1), n // k, axis=1).reshape(B * n, -1)

    bf = xp.stack([finest(beta) for beta in betas], axis=-1)                       # (B n, p, depths)
    slopes = bf[:, 1:d + 1] * inv[:, None] if inv.ndim == 1 else per_group(bf[:, 1:d + 1], inv[:, :, None])
    C = strided.matmul(_parts(S, n), slopes) + bf[:, None, 0]                      # (B n, M / n, depths)
    if basis.payoff_regressor:
        C += bf[:, None, d + 1] * basis.payoff_column(_parts(h, n))[..., None]
    return [C[..., i].reshape(B, M) for i in range(len(betas))]


class _AffineStep:
    """One date's exercise for every depth with the affine basis on the GPU (``cuda/affine_exercise.cu``; numpy
    twin :func:`affine_exercise_twin`): the depths' cashflows ``V`` (depths, B, M) and exercise dates ``stop``
    (depths, B, M), updated in place, the fitted values, decisions and the next date's discount in one launch.
    ``out``: where to keep ``V`` (contiguous (depths, B, M) of S's dtype; the Gram matrix's planes)."""

    def __init__(self, S, basis, rdt, V, stop, out=None):
        import cupy as cp

        from linalg_gpu._kernels import ctype, get_function

        self.V = cp.empty((len(V),) + V[0].shape, dtype=S.dtype) if out is None else out
        self.V[...] = V[0]                                         # (the depths start from the same cashflows)
        self.stop = cp.stack(stop) if stop else None
        d, self.basis = S.shape[3], basis
        inv = basis.inverse_scale(d)
        self.inv = cp.asarray(inv.reshape(-1, d), dtype=rdt)                     # (groups, d)
        scale = np.asarray(basis.scale, dtype=float)
        self.c = cp.asarray(np.atleast_1d(np.mean(scale) if scale.ndim == 1 else scale.mean(axis=1)), dtype=rdt)
        st = np.uint8 if self.stop is None else self.stop.dtype
        self.fn = get_function("affine_exercise.cu", "affine_exercise", S.dtype, ctype(rdt), ctype(st),
                               cuda_dir=CUDA_DIR)
        self.st, self.it, self.rdt = np.dtype(st).type, S.dtype.itemsize, np.dtype(rdt)

    def __call__(self, Sj, h, beta, j, disc, count=None):
        """The date j of the slice Sj (B, M, d) of the paths (their dtype), the payoff h (B, M) and the solver's
        coefficients ``beta`` (every depth's systems, in order); ``disc`` the next date's discount (None: none).
        Returns the exercise decisions of depth 0 (B, M); with ``count`` (B,) uint64 adds each set's number of them
        to it instead (returns None)."""
        import cupy as cp

        from linalg_gpu._kernels import grid_blocks

        depths, B, M = self.V.shape
        d = Sj.shape[2]
        if d > 1 and Sj.strides[2] != self.it:                        # (the kernel reads a path's assets in a row)
            Sj = cp.ascontiguousarray(Sj)
        ex = cp.empty((B, M), dtype=bool) if count is None else None
        self.fn((grid_blocks(B * M),), (256,), (
            np.uint64(Sj.data.ptr), np.int64(Sj.strides[0] // self.it), np.int64(Sj.strides[1] // self.it),
            np.int32(d), cp.ascontiguousarray(h, dtype=self.rdt), cp.ascontiguousarray(beta, dtype=self.rdt),
            np.int32(beta.shape[1]), self.inv,
            self.c, np.int32(self.inv.shape[0]), np.int32(self.basis.payoff_regressor), np.int32(depths), self.V,
            np.uint64(0) if self.stop is None else self.stop, self.st(0 if self.stop is None else j),
            self.V.dtype.type(disc or 0),
            np.int32(disc is not None), np.uint64(0) if ex is None else ex, np.uint64(0) if count is None else count,
            np.int64(B), np.int32(M)))
        return ex


def affine_exercise_twin(Sj, basis, h, betas, V, stop, j, disc):
    """numpy twin of ``cuda/affine_exercise.cu`` (and what the GPU computed before it, kernel by kernel): every
    depth's fitted values (:func:`_affine_fitted`), exercise, cashflows ``V`` (depths, B, M) and exercise dates
    ``stop`` (depths, B, M or None) updated in place, the cashflows then discounted by ``disc`` (None: not); the
    decisions of depth 0. ``Sj`` in the paths' dtype, h and betas in the regressions'."""
    xp = get_array_module(V)
    rdt = h.dtype
    first = None
    for depth, C in enumerate(_affine_fitted(Sj.astype(rdt, copy=False), basis, h, betas)):
        ex = (h > 0) & (h >= C)
        first = ex if depth == 0 else first
        V[depth] = xp.where(ex, h.astype(V.dtype, copy=False), V[depth])
        if stop is not None:
            stop[depth] = xp.where(ex, stop.dtype.type(j), stop[depth])
        if disc is not None:
            V[depth] = V[depth] * V.dtype.type(disc)
    return first


def apply_policy(S, times, coefficients, payoff_fn, basis_fn, rate, *, t0=0.0):
    """Discounted cashflows (B, M) of the exercise policy ``coefficients`` on new paths S.

    The policy estimated by :func:`longstaff_schwartz` applied to an independent path set is
    a low-biased estimator of the price (Longstaff & Schwartz 2001, section 3).
    """
    xp, times = _check(S, times, t0)
    B, M, N, _ = S.shape
    if len(coefficients) != N - 1:
        raise ValueError(f"coefficients must have one entry per exercise date but the last ({N - 1})")
    V = payoff_fn(S[:, :, N - 1])
    affine = xp is not np and getattr(basis_fn, "affine", False)                   # as longstaff_schwartz
    for j in range(N - 2, -1, -1):
        V = V * S.dtype.type(np.exp(-rate * (times[j + 1] - times[j])))
        Sj = S[:, :, j].astype(coefficients[j].dtype, copy=False)                   # the regression's dtype
        h = payoff_fn(Sj)
        C = (_affine_fitted(Sj, basis_fn, h, [coefficients[j]])[0] if affine
             else (basis_fn(Sj, h) @ coefficients[j][..., None])[..., 0])
        V = xp.where((h > 0) & (h >= C), h.astype(S.dtype, copy=False), V)
    return V * S.dtype.type(np.exp(-rate * (times[0] - t0)))


def stopped_cashflows(S, times, stopping, payoff_fn, rate, *, t0=0.0, regression_dtype=None, timings=None,
                      vanilla=None):
    """The claim on paths S (B, M, N, d) exercised at given dates: ``stopping`` per depth 0 .. s the (B, M) index
    of each path's exercise date (:attr:`LSMResult.stopping`), each depth's cashflows discounted to t0 as
    :func:`longstaff_schwartz` discounts them. An :class:`LSMResult` of the values, standard errors, cashflows and
    (s > 0) the parts' values, without regressions.

    On paths of a bumped market (the same random numbers) with the base market's exercise dates it is the pathwise
    estimator with the exercise time held fixed (Piterbarg 2004, "Computing deltas of callable LIBOR exotics in
    forward LIBOR models", J. Comput. Finance; Glasserman 2004, section 7.2): the base's rule is (close to)
    optimal, so holding it moves the price only to second order in the bump, and no regression of the bumped
    paths adds its own noise. On S itself it gives the base's results bit for bit (the same operations, with
    ``regression_dtype`` the base's).

    ``vanilla`` = (strikes, calls), one per set, says that ``payoff_fn`` is the call or put max(+-(S_0 - K), 0) of
    S's single asset (:func:`cva.instruments.products.stacked_payoff`): on the GPU one kernel then gives every
    depth's cashflows (``cuda/stopped_cashflows.cu``, the same bits) instead of a pass per date.
    """
    xp, times = _check(S, times, t0)
    clock = StageClock(xp, timings)
    B, M, N, _ = S.shape
    if any(tau.shape != (B, M) for tau in stopping):
        raise ValueError(f"stopping must hold (B, M) = {(B, M)} exercise indices per depth")
    rdt = S.dtype if regression_dtype is None else np.dtype(regression_dtype)
    disc = [S.dtype.type(np.exp(-rate * (times[j + 1] - times[j]))) for j in range(N - 1)]
    if vanilla is not None and xp is not np and S.shape[3] == 1:
        Vs = _stopped_vanilla(S, stopping, vanilla, disc, rdt)
    else:
        Vs = [payoff_fn(S[:, :, N - 1])] * len(stopping)
        for j in range(N - 2, -1, -1):
            Vs = [v * disc[j] for v in Vs]
            h = payoff_fn(S[:, :, j].astype(rdt, copy=False)).astype(S.dtype, copy=False)
            Vs = [xp.where(tau == j, h, v) for tau, v in zip(stopping, Vs, strict=True)]
    value, V, parts = _at_t0(Vs, times[0] - t0, rate)
    clock("exercise")
    clock.flush()
    return LSMResult(value=value, cashflow=V, parts=parts)


_INDEX_DTYPES = (np.uint8, np.uint16, np.uint32, np.int32)           # the exercise indices the kernel takes as they are


def _stopped_vanilla(S, stopping, vanilla, disc, rdt):
    """:func:`stopped_cashflows`' per-depth cashflows (B, M) of calls and puts on S's one asset, by one kernel."""
    import cupy as cp

    from linalg_gpu._kernels import ctype, get_function, grid_blocks

    B, M, N, _ = S.shape
    strikes, calls = vanilla
    tau = cp.stack([cp.asarray(t) for t in stopping])                                 # (depths, B, M)
    if tau.dtype not in _INDEX_DTYPES:
        tau = tau.astype(np.int32)
    fn = get_function("stopped_cashflows.cu", "stopped_cashflows", S.dtype, ctype(rdt), ctype(tau.dtype),
                      cuda_dir=CUDA_DIR)
    it = S.dtype.itemsize
    out = cp.empty((len(stopping), B, M), dtype=S.dtype)
    fn((grid_blocks(B * M),), (256,), (S, np.int64(S.strides[0] // it), np.int64(S.strides[1] // it),
                                       np.int64(S.strides[2] // it), cp.ascontiguousarray(tau),
                                       np.int32(len(stopping)), cp.asarray(strikes, dtype=np.float64),
                                       cp.asarray(calls, dtype=bool), cp.asarray(np.array(disc, dtype=S.dtype)),
                                       np.int32(N), out, np.int64(B), np.int32(M)))
    return list(out)


def report_summary(reports) -> list[dict]:
    """Per date: systems, method counts, worst residual, discarded eigenvalues, failures."""
    rows = []
    for j, rep in enumerate(reports):
        if rep is None:
            continue
        res = np.asarray(_host(rep.residual), dtype=float)
        cond = np.asarray(_host(rep.cond_estimate), dtype=float)
        rows.append({"date_index": j, "systems": int(res.size), **rep.counts(),
                     "max_residual": float(np.nanmax(res)) if res.size else float("nan"),
                     "max_cond": float(np.nanmax(cond)) if cond.size else float("nan"),
                     "discarded": int(_host(rep.n_discarded).sum()), "failed": int((~_host(rep.ok)).sum())})
    return rows
