"""The robust strategy for many small symmetric systems (Abbas-Turki-Graillat, sections 1 and 6).

``solve_small(method="auto")``: LDL^T first (section 3); the systems whose factorization broke
down or whose relative residual ||Ax - b|| / (||A|| ||x|| + ||b||) exceeds ``rtol`` are solved
again by Householder + PCR (section 4); those still above ``rtol`` by the eigen-decomposition
A = N D N^T with the eigenvalues |lambda| <= max |lambda| / cond_max discarded, and the negative ones within
sqrt(eps) max |lambda| (section 5, step 3: its positive semidefinite normal equations have no negative eigenvalues
but those of rounding, which this discards; an indefinite system keeps its negative eigenvalues):
x = N_k D_k^{-1} N_k^T b. Only the failing systems take a later stage's results: a later stage runs on them,
gathered, or on the GPU for small n and batches (``WHOLE_BATCH_MAX_N``) on the whole batch, so that the host
reads no counts.

``SolverMemory`` is the paper's "next time": per key (an exercise date in the CVA engine) it
remembers what the systems needed, so that a later batch with that key starts with LDL^T when
they were well conditioned, or goes straight to the truncated eigen-solve when they were not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .._backend import boolean_flags, get_array_module, to_host
from . import _common as C
from . import _gpu
from .householder import _apply_reflectors_bl, _symmetrize_lower_bl, _tridiagonalize_bl
from .ldlt import _ldlt_solve_bl
from .pcr import _pcr_bl
from .tridiag_eigh import _tridiag_eigh_bl

__all__ = ["solve_small", "ldlt_solve", "SolverReport", "SolverMemory", "METHODS"]

METHODS = ("auto", "ldlt", "householder_pcr", "eig_truncate")
STAGES = ("ldlt", "householder_pcr", "eig_truncate")
# The GPU runs solve_small's later stages on the whole batch (_later_stages_whole) instead of on the gathered
# systems that need them for n <= 2, and for n <= WHOLE_BATCH_MAX_N in batches of at most WHOLE_BATCH_MAX_SYSTEMS:
# there the fallback kernels' work on every system costs less than the host's two reads of counts per call.
# benchmarks/tools/measure_whole_batch.py on an H200 (2026-11-28, float32, a per-system memory's batch with 4 %
# singular and 1 % near-singular systems, ms per call, gathered / whole): 4096 systems, n = 2, 3, 5, 8: 3.12 / 1.03,
# 3.04 / 1.04, 2.96 / 1.02, 2.93 / 1.02; 2^20 systems: n = 2 3.01 / 1.01, n = 3 2.92 / 3.85, n = 5 3.06 / 7.98,
# n = 8 3.02 / 3.18. (2^17, between the two batch sizes measured, is a choice, not a measured crossing.)
WHOLE_BATCH_MAX_N = 8
WHOLE_BATCH_MAX_SYSTEMS = 2**17
_NAMES = np.array(STAGES + ("none",))          # code 3: the input of that system was not finite


def _counts(codes):
    """{method name: number of systems} from host method codes."""
    found = np.bincount(np.asarray(codes, dtype=np.intp).ravel(), minlength=len(_NAMES))
    return {str(nm): int(c) for nm, c in zip(_NAMES, found, strict=True)}


@dataclass
class SolverReport:
    """Per-system outcome of :func:`solve_small`; arrays have the batch shape of A.

    Attributes
    ----------
    method_code : int8 array, index into ("ldlt", "householder_pcr", "eig_truncate", "none").
    residual : relative residual ||Ax - b||_inf / (||A||_inf ||x||_inf + ||b||_inf), max over columns.
    n_discarded : eigenvalues discarded by the truncated solve (0 for the other methods).
    cond_estimate : max/min pivot of the factorization that produced x (LDL^T: D; Householder +
        PCR: the final PCR pivots), or |lambda|_max / |lambda|_min for the eigen-solve. A coarse
        number for Householder + PCR: rounding moves its pivots far more than x (float32, n = 64:
        by a few per cent under a perturbation of A by 4 eps).
    breakdown : the LDL^T factorization broke down (non-positive, tiny or non-finite pivot).
    ok : the solution meets the criterion of its method (always True for ``auto`` on finite input).
    nonfinite : the input of the system held a NaN or an Inf (``check_finite=False``).
    start_method : the first stage tried (from the ``SolverMemory`` for ``auto``); "per-system"
        when a per-system memory chose it system by system (then ``start_codes`` holds the codes).
    rtol, cond_max : the thresholds used.
    """

    #: the names of the method codes 0 .. 3 (``method_code``)
    CODES: ClassVar[tuple] = STAGES + ("none",)

    method_code: np.ndarray
    residual: np.ndarray
    n_discarded: np.ndarray
    cond_estimate: np.ndarray
    breakdown: np.ndarray
    ok: np.ndarray
    nonfinite: np.ndarray
    start_method: str
    rtol: float
    cond_max: float
    key: object = None
    extra: dict = field(default_factory=dict)
    start_codes: object = None

    @property
    def method(self):
        """Per-system method names (a numpy array of str)."""
        return _NAMES[_host(self.method_code)]

    def counts(self):
        """Number of systems per method, e.g. {"ldlt": 990, "householder_pcr": 8, ...}."""
        return _counts(_host(self.method_code))

    @staticmethod
    def count_codes(codes):
        """:meth:`counts` of host method codes (e.g. several reports' ``method_code`` read at once)."""
        return _counts(codes)

    def __repr__(self):
        res = _host(self.residual)
        fin = res[np.isfinite(res)]
        worst = f"{fin.max():.2e}" if fin.size else "n/a"
        return (f"SolverReport(systems={res.size}, start={self.start_method!r}, counts={self.counts()}, "
                f"max_residual={worst}, discarded={int(_host(self.n_discarded).sum())}, "
                f"failed={int((~_host(self.ok)).sum())})")


class SolverMemory:
    """What the systems of each key needed last time (the paper's "next time").

    Parameters
    ----------
    threshold : float, default 0.5
        A key whose last batch needed the truncated eigen-solve for at least this fraction of
        its systems starts the next batch there; one that needed any fallback for at least this
        fraction starts with Householder + PCR; otherwise it starts with LDL^T.

    A system started directly on the eigen-solve counts as needing it only if eigenvalues
    were discarded (the eigenvalues say so exactly), so a key goes back to LDL^T once its
    systems become well conditioned; a system solved by Householder + PCR counts as needing it
    (whether LDL^T would have done is not known when it was not tried).

    per_system : bool, default False
        Remember each system's need instead of the batch's: the next batch under the key (the
        same systems, in the same order) sends every system straight to the stage it needed.
        A system's result then depends only on its own history, not on which other systems
        share its batch (the nested CVA engine needs this for results independent of chunking).
    """

    @boolean_flags("per_system")
    def __init__(self, threshold=0.5, per_system=False):
        self.threshold = C.real_number(threshold, "threshold")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1]; got {threshold}")
        self.per_system = bool(per_system)
        self._last = {}

    def start_method(self, key):
        """The first stage for a batch with this key (per system: an int8 array of stage codes)."""
        if self.per_system:
            rec = self._last.get(key)
            return None if rec is None else rec["start_codes"]
        rec = self._last.get(key)
        if rec is None or rec["systems"] == 0:
            return "ldlt"
        if rec["needed_eig"] >= self.threshold * rec["systems"]:
            return "eig_truncate"
        if rec["needed_fallback"] >= self.threshold * rec["systems"]:
            return "householder_pcr"
        return "ldlt"

    def record(self, key, report, next_codes=None):
        """Remember what the systems of ``report`` needed under ``key``: a per-system memory keeps its codes
        where the report's are (on the GPU without a transfer, which would stop the host until the solve is
        done; the counts of :meth:`summary` are read when asked for), with the start codes for next time
        ``next_codes`` where solve_small formed them (:func:`next_start_codes`); a batch memory counts them on the
        host."""
        if self.per_system:
            code, nd = report.method_code.ravel(), report.n_discarded.ravel()
            if next_codes is None:
                nxt = next_start_codes if get_array_module(code) is np else _gpu.next_start_codes
                next_codes = nxt(code, nd, report.start_codes)
            self._last[key] = {"start": report.start_method, "code": code, "start_codes": next_codes}
            return
        code = _host(report.method_code).ravel()
        nd = _host(report.n_discarded).ravel()
        eig = code == 2
        needed_eig = eig & (nd > 0) if report.start_method == "eig_truncate" else eig
        needed_fb = needed_eig | (code == 1)
        self._last[key] = {"systems": int((code < 3).sum()), "needed_eig": int(needed_eig.sum()),
                           "needed_fallback": int(needed_fb.sum()), "start": report.start_method,
                           "counts": _counts(code)}

    def summary(self):
        """{key: {"start": first stage used last time, "next": next start, "counts": ...}}."""
        def nxt(k):
            st = self.start_method(k)
            if not self.per_system:
                return st
            codes = np.bincount(_host(st).ravel(), minlength=3)
            return {nm: int(c) for nm, c in zip(STAGES, codes, strict=False)}
        return {k: {"start": v["start"], "next": nxt(k), "counts": v["counts"] if "counts" in v
                    else _counts(_host(v["code"]))} for k, v in self._last.items()}

    def __contains__(self, key):
        return key in self._last

    def __repr__(self):
        return f"SolverMemory(threshold={self.threshold}, keys={len(self._last)})"


# ---- batch-last cores: A (n, n, c), b (n, r, c) -> x (n, r, c), cond (c,), n_disc (c,), ok (c,)

def _ldlt_stage(A, b):
    x, D, ok = _ldlt_solve_bl(A, b)
    cond = np.where(ok, D.max(0) / D.min(0), np.inf)
    return x, cond, np.zeros(A.shape[-1], np.int32), ok


def _householder_pcr_stage(A, b):
    d, e, U, beta = _tridiagonalize_bl(A)
    y = _apply_reflectors_bl(U, beta, b, transpose=True)             # Q^T b
    z, piv = _pcr_bl(d, e, y)                                         # T z = Q^T b
    x = _apply_reflectors_bl(U, beta, z, transpose=False)             # x = Q z
    with np.errstate(divide="ignore", invalid="ignore"):
        ap = np.abs(piv)
        cond = ap.max(0) / ap.min(0)
    ok = np.isfinite(x).all(axis=(0, 1))
    return x, np.where(ok, cond, np.inf), np.zeros(A.shape[-1], np.int32), ok


def _make_eig_truncate_stage(cond_max):
    def stage(A, b):
        d, e, U, beta = _tridiagonalize_bl(A)
        w, O = _tridiag_eigh_bl(d, e)                                 # A = (Q O) diag(w) (Q O)^T
        y = _apply_reflectors_bl(U, beta, b, transpose=True)          # Q^T b        (n, r, c)
        y = np.einsum("ijc,irc->jrc", O, y)                           # O^T Q^T b    (n, r, c)
        aw = np.abs(w)
        top = aw.max(0)
        keep = (aw > top / cond_max) & ~((w < 0) & (aw <= np.sqrt(np.finfo(w.dtype).eps) * top))   # (n, c)
        inv = np.where(keep, 1 / np.where(keep, w, 1), 0)
        y = np.einsum("ijc,jrc->irc", O, y * inv[:, None])            # O D_k^-1 O^T Q^T b
        x = _apply_reflectors_bl(U, beta, y, transpose=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            cond = top / aw.min(0)
        n_disc = (~keep).sum(0).astype(np.int32)
        return x, cond, n_disc, np.isfinite(x).all(axis=(0, 1))
    return stage


def _relative_residual_bl(A, x, b, nA=None):
    """||Ax - b||_inf / (||A||_inf ||x||_inf + ||b||_inf) per system, max over right-hand sides.

    A must be symmetric here (with assume_symmetric it is rebuilt from its lower triangle first).
    """
    r = np.einsum("ijc,jrc->irc", A, x) - b                          # (n, r, c)
    if nA is None:
        nA = np.abs(A).sum(1).max(0)                                  # (c,) ||A||_inf
    num = np.abs(r).max(0)                                            # (r, c)
    den = nA * np.abs(x).max(0) + np.abs(b).max(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(num == 0, 0, num / den)
    rel = np.where(np.isfinite(x).all(0), rel, np.inf)
    return rel.max(0)


_host = to_host


def _stage(xp, stage, cond_max, lean=False):
    """The runner of one stage for the array module: (A, b, n, symmetrize, screen) -> tuple. ``lean``: on the GPU
    leave to the bookkeeping kernels what they complete (:func:`linalg_gpu.small._gpu.run_stage`; numpy computes
    it all)."""
    if xp is np:
        fn = {"ldlt": _ldlt_stage, "householder_pcr": _householder_pcr_stage,
              "eig_truncate": _make_eig_truncate_stage(cond_max)}[stage]
        return lambda A, b, n, symmetrize, screen: _run_stage(fn, A, b, n, symmetrize, screen)
    return lambda A, b, n, symmetrize, screen: _gpu.run_stage(stage, A, b, screen, cond_max, lean)


def _run_stage(stage_fn, A, b, n, symmetrize, screen):
    """One stage over (B, n, n), (B, n, r) in chunks; with ``screen`` also the per-system input flags.

    A batch of one system is run as two copies: numpy's contractions take other code paths for a
    batch axis of length one, and on a singular system that rounding difference changed the
    solution (1e15-sized garbage either way, but different), so a system's result depended on
    whether it was solved alone (measured on the CPU with rank-3 6 x 6 systems).
    """
    if A.shape[0] == 1:
        out = _run_stage(stage_fn, np.concatenate([A, A]), np.concatenate([b, b]), n, symmetrize, screen)
        return tuple(o[:1] for o in out)
    il = np.tril_indices(n, -1)

    def block(Ab, bb):
        with np.errstate(all="ignore"):
            flags, nA = (), None
            if screen:                                                # validation in the same pass
                absA = np.abs(Ab)
                amax = absA.max((0, 1))                               # NaN/Inf propagate
                nA = absA.sum(1).max(0)                               # ||A||_inf for the residual
                nonfinite = ~(np.isfinite(amax) & np.isfinite(bb).all((0, 1)))
                diff = Ab[il] - Ab[il[1], il[0]]                      # strict lower minus upper
                asym = np.maximum(diff.max(0, initial=0), -diff.min(0, initial=0))
                flags = (nonfinite, asym / amax)
            if symmetrize:                                            # assume_symmetric: lower triangle
                Ab, nA = _symmetrize_lower_bl(Ab), None
            x, cond, nd, ok = stage_fn(Ab, bb)
            return (x, cond, nd, ok, _relative_residual_bl(Ab, x, bb, nA)) + flags
    return C.map_chunks(block, (A, b), n, nbytes=2**23 if stage_fn is _ldlt_stage else 2**22)


def next_start_codes(code, ndisc, start):
    """A per-system memory's start codes for next time (numpy twin of cuda/solve_flags.cu next_start_codes): 2
    where a system needed the eigen-solve (method 2 and it started before it, or, started on it, discarded
    eigenvalues), 1 where Householder + PCR solved it, else 0 (int8)."""
    xp = get_array_module(code)
    eig = code == 2
    need = eig & ((start < 2) | (ndisc > 0)) if start is not None else eig
    return xp.where(need, 2, xp.where(code == 1, 1, 0)).astype(np.int8)


def first_stage_flags(out, nonfinite, asym, start_codes, rtol, asym_max, ldlt, first, ndisc=None):
    """The bookkeeping of solve_small after its first stage (numpy twin of cuda/solve_flags.cu).

    Returns breakdown (LDL^T failed on finite input), redo (finite input that needs a later
    stage: not ok, residual > rtol, or a per-system memory's start code > 0) and the "any" flags
    (non-finite input, |A - A^T| > asym_max max|A| on finite input, not ok, redo). The stage's
    outputs ``out`` = (x (B, n, r), code, residual, cond, ok) are finished in place: ``ok`` and-ed
    with the finiteness of the input, x NaN where not ok, ``code`` the stage's code ``first``, and for
    non-finite input code 3 ("none") with NaN residual and condition estimate; ``ndisc``, where given, zeros.
    """
    x, code, residual, cond, ok = out
    code[...] = first
    if ndisc is not None:
        ndisc[...] = 0
    breakdown = ~ok & ~nonfinite if ldlt else np.zeros_like(ok)
    ok &= ~nonfinite
    x[~ok] = np.nan
    redo = ~(ok & (residual <= rtol))
    if start_codes is not None:
        redo |= start_codes > 0
    redo &= ~nonfinite
    anys = (nonfinite.any(), (~nonfinite & (asym > asym_max)).any(), (~ok).any(), redo.any())
    code[nonfinite] = 3
    residual[nonfinite] = np.nan
    cond[nonfinite] = np.nan
    return breakdown, redo, tuple(bool(a) for a in anys)


def scatter_stage(out, sel, rows, stage_out, code):
    """The results of a later stage at ``rows`` of its outputs into ``out`` = (x, code, residual, cond,
    n_discarded, ok) at the systems ``sel`` (x NaN where the stage's ok is false); numpy twin of
    cuda/solve_flags.cu scatter_stage."""
    x, codes, resid, cond, ndisc, ok = out
    xs, cs, nds, oks, rs = stage_out
    x[sel] = np.where(oks[rows, None, None], xs[rows], np.nan)
    codes[sel] = code
    resid[sel], cond[sel], ndisc[sel], ok[sel] = rs[rows], cs[rows], nds[rows], oks[rows]


def merge_stage(out, stage_out, pending, code, last, rtol, start_codes):
    """The results of a later stage run on the whole batch into ``out`` = (x, code, residual, cond,
    n_discarded, ok) at the systems still ``pending`` that it solved (ok, residual <= rtol, and with
    per-system ``start_codes`` a code <= ``code``; every pending system if ``last``), which then leave
    ``pending`` (in place); a stage's part of :func:`merge_later_stages`."""
    xs, cs, nds, oks, rs = stage_out
    take = pending.copy()
    if not last:
        take &= oks & (rs <= rtol)
        if start_codes is not None:
            take &= start_codes <= code
    scatter_stage(out, take, take, stage_out, code)
    pending &= ~take


def merge_later_stages(out, middle, last, pending, rtol, start_codes, next_codes=False):
    """The results of solve_small's later stages run on the whole batch into ``out`` = (x, code, residual, cond,
    n_discarded, ok) at the systems ``pending`` (not changed): those of ``middle`` (Householder + PCR, or None
    where it did not run; code 1, no eigenvalue discarded) where it solved the system and the start code allows
    (:func:`merge_stage`), the rest those of ``last`` (the eigen-solve, code 2, its ok x finite); stages as
    (x, cond, n_discarded, ok, residual). With ``next_codes`` returns the start codes for next time
    (:func:`next_start_codes`), else None. numpy twin of cuda/solve_flags.cu merge_later_stages."""
    pending = pending.copy()
    if middle is not None:
        xm, cm, _, okm, rm = middle
        merge_stage(out, (xm, cm, np.zeros(okm.size, np.int32), okm, rm), pending, 1, False, rtol, start_codes)
    xl, cl, ndl, _, rl = last
    merge_stage(out, (xl, cl, ndl, np.isfinite(xl).all(axis=(1, 2)), rl), pending, 2, True, rtol, start_codes)
    return next_start_codes(out[1], out[4], start_codes) if next_codes else None


def _partition(xp, masks, n):
    """A stable counting sort of the systems 0 .. n - 1 by disjoint boolean ``masks``: the indices where each mask
    holds, in order, then the rest, with one read of the counts (on the GPU one synchronization of the host, where
    a boolean index or ``flatnonzero`` costs one each)."""
    if n == 0:
        return [xp.zeros(0, dtype=np.int64) for _ in range(len(masks) + 1)]
    pos = [xp.cumsum(m, dtype=np.int64) for m in masks]
    counts = [int(c) for c in _host(xp.stack([p[-1] for p in pos]))]
    idx = xp.arange(n, dtype=np.int64)
    dest = idx + (sum(counts) - sum(pos))                           # the rest after the masks' systems
    off = 0
    for m, p, c in zip(masks, pos, counts, strict=True):
        dest = xp.where(m, p + (off - 1), dest)
        off += c
    order = xp.empty(n, dtype=np.int64)
    order[dest] = idx
    bounds = np.cumsum([0, *counts, n - off])
    return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _later_stages(xp, stages, Af, bf, symmetrize, cond_max, rtol, redo, start_codes, out):
    """The stages of ``auto`` after the first, on the systems ``redo`` marks (those it did not solve), gathered
    (compacted) into a batch per stage; a stage's results where its ok holds and its residual is <= rtol (the
    last stage: all) are scattered into ``out``, the rest go on. With per-system ``start_codes`` a system waits
    for the stage its code names (the last stage takes every system left). The index bookkeeping stays on the
    arrays' device, sorted by :func:`_partition`: two reads of counts per call, however many stages."""
    scatter = _gpu.scatter_stage if xp is not np else scatter_stage
    n, B = Af.shape[-1], redo.size
    codes = None if start_codes is None else xp.asarray(start_codes)
    todo = None                                                       # the systems left after a stage, in order
    for stage in stages[1:]:                                          # (at most two: a middle one and the last)
        code = STAGES.index(stage)
        if stage == stages[-1]:
            run = todo if todo is not None else _partition(xp, [redo], B)[0]
            if run.size:
                scatter(out, run, xp.arange(run.size), _stage(xp, stage, cond_max)(Af[run], bf[run], n, symmetrize,
                                                                                  False), code)
            return
        if codes is None:
            run, todo = _partition(xp, [redo], B)[0], xp.zeros(0, dtype=np.int64)
        else:                                                         # now, and waiting for the last stage
            run, todo, _ = _partition(xp, [redo & (codes <= code), redo & (codes > code)], B)
        if run.size:
            res = _stage(xp, stage, cond_max)(Af[run], bf[run], n, symmetrize, False)
            rows, rejected = _partition(xp, [res[3] & (res[4] <= rtol)], run.size)
            scatter(out, run[rows], rows, res, code)
            todo = xp.concatenate([todo, run[rejected]])


def _later_stages_whole(xp, stages, Af, bf, symmetrize, cond_max, rtol, redo, start_codes, out, next_codes=False):
    """:func:`_later_stages` without gathering: each later stage runs on the whole batch and their results are
    merged into ``out`` where a system still needs them (:func:`merge_later_stages`, one launch), so the host reads
    nothing. The kernels solve each system on its own, so the results are those of the gathered batches, bit for
    bit; for small n the stages' extra work costs less than the host's waits for the counts
    (``WHOLE_BATCH_MAX_N``). Returns the start codes for next time with ``next_codes``, else None."""
    merge = _gpu.merge_later_stages if xp is not np else merge_later_stages
    n = Af.shape[-1]
    res = [_stage(xp, stage, cond_max, lean=True)(Af, bf, n, symmetrize, False) for stage in stages[1:]]
    return merge(out, res[0] if len(res) == 2 else None, res[-1], redo, rtol, start_codes, next_codes)


@boolean_flags("return_report", "check_finite", "assume_symmetric")
def solve_small(A, b, method="auto", cond_max=1e5, rtol=None, return_report=False, memory=None,
                key=None, *, check_finite=True, assume_symmetric=False):
    """Solve a batch of small symmetric systems A x = b robustly (Abbas-Turki-Graillat).

    Parameters
    ----------
    A : (..., n, n) array_like, float32 or float64
        Symmetric matrices; only the lower triangle is used (NaN or Inf anywhere in A counts
        as non-finite input). numpy arrays are solved on the
        CPU; cupy arrays (n <= 64) on the GPU by the kernels in ``linalg_gpu/cuda``, with the
        fallbacks run on the failing systems, compacted on the device (small n and batches: on the
        whole batch, each system taking a fallback's result only where it needs it,
        ``WHOLE_BATCH_MAX_N``). On the GPU in float32,
        LDL^T and Householder + PCR need max |A_ij| < 2^126 (about 8.5e37): above it their
        pivots' reciprocals leave the normal range and x is wrong while ``report.ok`` stays True
        (``report.residual`` shows it; ``auto`` falls back to the eigen-solve, which is accurate
        there). The CPU path has no such limit.
    b : (..., n) or (..., n, k) array_like
        Right-hand sides, with the batch shape of A (and the same array module).
    method : {"auto", "ldlt", "householder_pcr", "eig_truncate"}, default "auto"
        ``auto`` is the paper's strategy (module docstring); the others run one method on all.
    cond_max : float, default 1e5
        The truncated eigen-solve discards |lambda| <= max |lambda| / cond_max (the paper's 1e5), and negative
        eigenvalues of rounding size (|lambda| <= sqrt(eps) max |lambda|).
    rtol : float, optional
        Residual threshold of ``auto``; default 8 * n * eps of the dtype.
    return_report : bool, default False
        Also return a :class:`SolverReport`. Without it, systems whose solution fails its
        method's criterion (LDL^T breakdown, PCR zero pivot, non-finite input) raise
        ``numpy.linalg.LinAlgError``; with it they get NaN solutions and ``report.ok`` False.
    memory : SolverMemory, optional
        With ``key``: start ``auto`` where this key's systems needed to start last time, and
        record what they needed now (batch-wise, or system by system with ``per_system``).
    key : hashable, optional
        The memory key (required with ``memory``).
    check_finite : bool, default True
        Raise ``ValueError`` naming the first system with a NaN or Inf; with False such systems
        get method "none", a NaN solution and ``report.nonfinite`` True.
    assume_symmetric : bool, default False
        Skip the symmetry check (``|A - A^T| <= 100 eps max|A|``, first bad system named) and
        solve with the lower triangle as it is.

    Returns
    -------
    x : (..., n) or (..., n, k), in the dtype of A and b (float32 stays float32).
    report : SolverReport, if ``return_report``.

    Examples
    --------
    >>> import numpy as np, linalg_gpu as lg
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((100, 8, 8)); A = X @ X.transpose(0, 2, 1) + np.eye(8)
    >>> b = rng.standard_normal((100, 8))
    >>> x, rep = lg.solve_small(A, b, return_report=True)
    >>> bool(np.allclose(np.einsum("bij,bj->bi", A, x), b)), rep.counts()["ldlt"]
    (True, 100)
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")
    cond_max = C.real_number(cond_max, "cond_max")
    if not (math.isfinite(cond_max) and cond_max > 1):
        raise ValueError(f"cond_max must be a finite number > 1; got {cond_max}")
    A = C.check_square_batch(A, "A")
    b, vec = C.check_rhs(b, A, "b")
    xp = get_array_module(A, b)
    dt = C.common_dtype(("A", A), ("b", b))
    batch, n = A.shape[:-2], A.shape[-1]
    rtol = C.default_rtol(n, dt) if rtol is None else C.real_number(rtol, "rtol")
    if not (math.isfinite(rtol) and rtol > 0):
        raise ValueError(f"rtol must be a finite positive number; got {rtol}")
    if memory is not None and key is None:
        raise ValueError("key is required with memory (e.g. the exercise date of the batch)")
    if memory is not None and not isinstance(memory, SolverMemory):
        raise TypeError(f"memory must be a SolverMemory; got {type(memory).__name__}")
    if memory is not None:
        try:
            hash(key)
        except TypeError:
            raise TypeError(f"key must be hashable (memory's key for this batch); got {key!r}") from None
    if xp is not np and n > _gpu.MAX_N:
        raise ValueError(f"n = {n} is larger than the GPU kernels' limit of {_gpu.MAX_N}; "
                         "solve on the CPU (pass numpy arrays) or split the problem")
    Af = C.contiguous_batch(xp, A, dt, 2)                                            # (B, n, n)
    bf = C.contiguous_batch(xp, b.reshape(b.shape + (1,)) if vec else b, dt, 2)     # (B, n, r)
    B, no_rhs = Af.shape[0], bf.shape[2] == 0
    if no_rhs:                              # k = 0: the systems are still solved and reported, for b = 0
        bf = xp.zeros((B, n, 1), dtype=dt)
    start = method if method != "auto" else (memory.start_method(key) if memory is not None else "ldlt")
    start_codes = None
    if memory is not None and memory.per_system and method == "auto":
        start_codes = start
        if start_codes is not None and start_codes.size != B:
            raise ValueError(f"memory (per_system) has {start_codes.size} systems under key {key!r}, "
                             f"this batch has {B}")
        start = "per-system" if start_codes is not None else "ldlt"
    stages = (STAGES if start == "per-system" else STAGES[STAGES.index(start):]) if method == "auto" else (method,)

    # The first stage runs on the whole batch and its outputs become the results; later stages
    # run on the systems that failed (gathered, i.e. compacted on the device) and are scattered back,
    # or for small systems on the whole batch, merged where a system needs them (_later_stages_whole).
    x, cond, n_disc, ok, residual, nonfinite, asym = _stage(xp, stages[0], cond_max, lean=True)(
        Af, bf, n, assume_symmetric, True)
    first = STAGES.index(stages[0])
    code = xp.empty(B, dtype=np.int8)                                 # (written by the flags' pass)
    # the flags in one pass (on the GPU one kernel and one synchronization); with a per-system
    # memory, systems that needed a later stage last time go straight to it. Small systems on the GPU run the
    # later stages on the whole batch: with a report, no input checks, nothing is read and the host goes on
    whole = (xp is not np and len(stages) > 1 and n <= WHOLE_BATCH_MAX_N
             and (n <= 2 or Af.shape[0] <= WHOLE_BATCH_MAX_SYSTEMS))
    args = ((x, code, residual, cond, ok), nonfinite, asym, start_codes, rtol, C.SYMMETRY_RTOL * np.finfo(dt).eps,
            stages[0] == "ldlt", first, None if stages[0] == "eig_truncate" else n_disc)
    if xp is np:
        breakdown, redo, anys = first_stage_flags(*args)
    else:
        breakdown, redo, anys = _gpu.first_stage_flags(
            *args, read=not (whole and return_report and not check_finite and assume_symmetric))
    any_failed = any_redo = True                                      # (unknown where not read)
    if anys is not None:
        any_nonfinite, any_asym, any_failed, any_redo = anys
        C.raise_for_flags(A, [A, b], ["A", "b"], check_finite and any_nonfinite, not assume_symmetric and any_asym,
                          "these systems flagged in the report")
    out, next_codes = (x, code, residual, cond, n_disc, ok), None
    if len(stages) > 1 and any_redo and whole:                        # (a per-system memory's record with them)
        next_codes = _later_stages_whole(xp, stages, Af, bf, assume_symmetric, cond_max, rtol, redo, start_codes, out,
                                         next_codes=memory is not None and memory.per_system)
    elif len(stages) > 1 and any_redo:
        _later_stages(xp, stages, Af, bf, assume_symmetric, cond_max, rtol, redo, start_codes, out)

    def shaped(a):                                                    # (a view costs host time)
        return a if a.shape == batch else a.reshape(batch)
    report = SolverReport(method_code=shaped(code), residual=shaped(residual), n_discarded=shaped(n_disc),
                          cond_estimate=shaped(cond), breakdown=shaped(breakdown), ok=shaped(ok),
                          nonfinite=shaped(nonfinite), start_method=start, rtol=rtol,
                          cond_max=cond_max, key=key, start_codes=start_codes)
    if memory is not None:
        memory.record(key, report, next_codes)
    x = x[..., :0] if no_rhs else x
    shape = batch + ((n,) if vec else x.shape[1:])
    x = x if x.shape == shape else x.reshape(shape)                   # (one view: cheaper than x[..., 0])
    if return_report:
        return x, report
    if (any_failed or any_redo) and C.host_any(~ok):                  # (else every system is ok)
        bad = _host(~ok)
        nonfin = bool(_host(nonfinite)[bad].all())
        why = ("non-finite input" if nonfin else "no stage gave a finite solution" if method == "auto"
               else f"{method} failed (breakdown or zero pivot)")
        fix = "" if nonfin or method == "auto" else "method='auto' to repair them, or "
        raise np.linalg.LinAlgError(
            f"solve_small: {int(bad.sum())} of {B} system(s) have no valid solution ({why}); the first at "
            f"batch index {C.first_index(bad, batch)}. Use {fix}return_report=True to get them flagged instead"
        )
    return x


@boolean_flags("check_finite", "assume_symmetric", "return_report")
def ldlt_solve(A, b, *, check_finite=True, assume_symmetric=False, return_report=False):
    """Solve A x = b for a batch of symmetric positive definite A by LDL^T (eq. 5).

    The same as ``solve_small(A, b, method="ldlt", ...)``: a breakdown raises
    ``numpy.linalg.LinAlgError`` naming the systems, unless ``return_report=True``, in which case
    those systems get NaN solutions and ``report.ok`` False. Use ``method="auto"`` to repair them.
    """
    return solve_small(A, b, method="ldlt", check_finite=check_finite,
                       assume_symmetric=assume_symmetric, return_report=return_report)
