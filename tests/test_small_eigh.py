"""Divide-and-conquer tridiagonal eigensolver (section 5) and eigh_small, against LAPACK."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from small_testlib import (
    BATCHES,
    DTYPES,
    SIZES,
    eps,
    glued_wilkinson,
    mT,
    random_orthogonal,
    sym_from_eigs,
    tridiag_dense,
    wilkinson,
)

import linalg_gpu as lg

C_ORTH = 10     # ||V^T V - I||_max <= C_ORTH * n * eps
C_RES = 10      # ||T V - V diag(w)||_max <= C_RES * n * eps * ||T||_2
C_EIG = 10      # |w - w_ref| <= C_EIG * n * eps * ||T||_2

# derandomize comes from the profile that conftest.py loads: fixed examples by default, Hypothesis' random
# search under LINALG_TEST_RANDOM=1 (make test-random)
HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ref_tridiag_eigvals(d, e):
    """scipy.linalg.eigh_tridiagonal (LAPACK stemr) in float64, looping over the batch."""
    d = np.asarray(d, dtype=np.float64)
    e = np.asarray(e, dtype=np.float64)
    batch, n = d.shape[:-1], d.shape[-1]
    D = d.reshape(-1, n)
    E = e.reshape(D.shape[0], n - 1)
    w = np.empty_like(D)
    for i in range(D.shape[0]):
        if n == 1:
            w[i] = D[i]
        else:
            w[i] = sla.eigh_tridiagonal(D[i], E[i], eigvals_only=True)
    return w.reshape(batch + (n,))


def check_eigenpairs(M, w, V, w_ref, dtype, label=""):
    """Ascending w, orthonormal V, small residual M V - V diag(w), w close to w_ref (all per system)."""
    n = M.shape[-1]
    ep = eps(dtype)
    M = np.asarray(M, dtype=np.float64)
    w64, V64 = w.astype(np.float64), V.astype(np.float64)
    assert w.dtype == V.dtype == dtype, label
    assert np.all(np.isfinite(w)) and np.all(np.isfinite(V)), label
    assert np.all(np.diff(w64, axis=-1) >= 0), f"{label}: eigenvalues not ascending"
    normM = np.abs(w_ref).max(axis=-1)                                  # ||M||_2
    orth = np.abs(mT(V64) @ V64 - np.eye(n)).max(axis=(-2, -1))
    assert np.all(orth <= C_ORTH * n * ep), f"{label}: orth {orth.max() / (n * ep):.1f} n eps"
    res = np.abs(M @ V64 - V64 * w64[..., None, :]).max(axis=(-2, -1))
    assert np.all(res <= C_RES * n * ep * normM), f"{label}: residual {(res / (n * ep * normM)).max():.1f}"
    dw = np.abs(w64 - w_ref).max(axis=-1)
    assert np.all(dw <= C_EIG * n * ep * normM), f"{label}: eigenvalues {(dw / (n * ep * normM)).max():.1f}"


# ---------------------------------------------------------------------------------------------
# tridiag_eigh on fresh random inputs


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_tridiag_eigh_random(rng, n, batch, dtype):
    d = rng.standard_normal(batch + (n,)).astype(dtype)
    e = rng.standard_normal(batch + (n - 1,)).astype(dtype)
    w, V = lg.tridiag_eigh(d, e)
    assert w.shape == batch + (n,) and V.shape == batch + (n, n)
    check_eigenpairs(tridiag_dense(d, e), w, V, _ref_tridiag_eigvals(d, e), dtype)


def test_tridiag_eigh_wilkinson_w21():
    d, e = wilkinson(21)
    w, V = lg.tridiag_eigh(d, e)
    check_eigenpairs(tridiag_dense(d, e), w, V, _ref_tridiag_eigvals(d, e), np.float64, "W21+")
    # the top pair of W21+ agrees to ~1e-13 and must still get orthogonal eigenvectors
    assert w[-1] - w[-2] < 1e-12


@pytest.mark.parametrize("glue", (0.0, 1e-15, 1e-10, 1e-6, 1e-3))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_tridiag_eigh_glued_wilkinson(glue, dtype):
    d, e = glued_wilkinson(3, 21, glue)
    d, e = d.astype(dtype), e.astype(dtype)
    w, V = lg.tridiag_eigh(d, e)
    check_eigenpairs(tridiag_dense(d, e), w, V, _ref_tridiag_eigvals(d, e), dtype, f"glue {glue}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_tridiag_eigh_diagonal_and_zero(dtype):
    d = np.array([[3.0, -1.0, 2.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=dtype)
    e = np.zeros((2, 4), dtype=dtype)
    w, V = lg.tridiag_eigh(d, e)
    np.testing.assert_array_equal(w, np.sort(d, axis=-1))
    check_eigenpairs(tridiag_dense(d, e), w, V, np.sort(d.astype(np.float64), axis=-1), dtype)


def _secular_problems(rng, K, G, dtype, close):
    """G secular equations 1/r + sum zz / (p - lam) = 0 of K poles (ascending, at least 1e-3 apart, or
    with close pairs 1e-7..1e-5 apart), weights zz log-uniform over 7 decades, summing to 1 (as the merges
    normalize them; small weights put roots near their poles), r in [0.01, 2]."""
    p = np.sort(rng.uniform(-1, 1, (G, K)), axis=1)
    p[:, 1:] = p[:, :1] + np.cumsum(np.maximum(np.diff(p, axis=1), 1e-3), axis=1)
    if close:
        p[:, 1::2] = p[:, 0::2][:, :K // 2] + 10.0 ** rng.uniform(-7, -5, (G, K // 2))
    zz = 10.0 ** rng.uniform(-7, 0, (G, K))
    zz /= zz.sum(axis=1, keepdims=True)
    r = rng.uniform(0.01, 2, G)
    return tuple(a.astype(dtype) for a in (p, zz, r))


def _secular_roots(p, zz, r):
    """The twin's roots (eq. 16; cuda/tridiag_eigh.cuh secular_root), (G, K)."""
    import importlib

    te = importlib.import_module("linalg_gpu.small.tridiag_eigh")
    G, K = p.shape
    lam, _ = te._secular_roots_bl(p.T.copy(), zz.T.copy(), np.ones((K, G), bool), r, np.full(G, K))
    return lam.T


@pytest.mark.parametrize("close", [False, True], ids=["apart", "close_pairs"])
@pytest.mark.parametrize("K", [2, 5, 16])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_secular_roots_against_mpmath(rng, dtype, K, close):
    """The merges' secular solver (dlaed4's starts; for the last root its model, the last pole exact and
    the rest fitted to f'): every root within 10 K eps (max |p| + r) of the eigenvalues of
    diag(p) + r w w^T (w^2 = zz) by mpmath at 40 digits."""
    import mpmath

    G = 24
    p, zz, r = _secular_problems(rng, K, G, dtype, close)
    ref = np.empty((G, K))
    with mpmath.workdps(40):
        for g in range(G):
            w = [mpmath.sqrt(mpmath.mpf(float(z))) for z in zz[g]]
            M = mpmath.matrix(K, K)
            for i in range(K):
                for j in range(K):
                    M[i, j] = mpmath.mpf(float(r[g])) * w[i] * w[j] + (mpmath.mpf(float(p[g, i])) if i == j else 0)
            ref[g] = sorted(float(x) for x in mpmath.eigsy(M, eigvals_only=True))
    tol = 10 * K * eps(dtype) * (np.abs(p).max(axis=1) + r)
    err = np.abs(_secular_roots(p, zz, r).astype(np.float64) - ref)
    assert (err <= tol[:, None]).all(), (err / tol[:, None]).max()


def test_tridiag_eigh_batch_independence(rng):
    """A hard system in the batch does not change the results of the others."""
    n = 21
    dw, ew = wilkinson(n)
    d = np.stack([rng.standard_normal(n), dw, rng.standard_normal(n), np.zeros(n)])
    e = np.stack([rng.standard_normal(n - 1), ew, np.full(n - 1, 1e-14), np.zeros(n - 1)])
    w, V = lg.tridiag_eigh(d, e)
    for i in range(d.shape[0]):
        wi, Vi = lg.tridiag_eigh(d[i], e[i])
        nrm = max(np.abs(wi).max(), 1.0)
        np.testing.assert_allclose(w[i], wi, rtol=0, atol=4 * n * eps(np.float64) * nrm)
        # eigenvectors up to sign, where the eigenvalue is well separated
        gap = np.minimum(np.r_[np.inf, np.diff(wi)], np.r_[np.diff(wi), np.inf])
        sep = gap > 1e-6 * nrm
        s = np.sign(np.sum(V[i] * Vi, axis=0))
        np.testing.assert_allclose((V[i] * s)[:, sep], Vi[:, sep], rtol=0, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# property tests: clustered / repeated eigenvalues, zero off-diagonals, extreme scales

FAMILIES = ("random", "constant_tiny_e", "clustered", "repeated_blocks", "wilkinson",
            "glued_wilkinson", "laplacian", "graded")


@st.composite
def tridiagonals(draw, dtype):
    family = draw(st.sampled_from(FAMILIES))
    n = draw(st.integers(1, 48))
    seed = draw(st.integers(0, 2**63 - 1))
    zero_frac = draw(st.sampled_from((0.0, 0.0, 0.2, 0.5, 1.0)))
    kmax = 150 if dtype == np.float64 else 12
    k = draw(st.integers(-kmax, kmax))
    rng = np.random.default_rng(seed)
    if family == "random":
        d, e = rng.standard_normal(n), rng.standard_normal(n - 1)
    elif family == "constant_tiny_e":
        tiny = draw(st.sampled_from((1e-6, 1e-10, 1e-14, 1e-17)))
        d, e = np.full(n, rng.standard_normal()), tiny * rng.standard_normal(n - 1)
    elif family == "clustered":
        c = draw(st.sampled_from((1e-4, 1e-8, 1e-12)))
        d = 1.0 + c * rng.standard_normal(n)
        e = c * rng.standard_normal(n - 1)
    elif family == "repeated_blocks":                 # exactly repeated eigenvalues
        m = draw(st.integers(1, 6))
        reps = max(1, n // m)
        db, eb = rng.standard_normal(m), rng.standard_normal(m - 1)
        d = np.tile(db, reps)
        e = np.concatenate([np.r_[eb, 0.0]] * reps)[:-1]
    elif family == "wilkinson":
        d, e = wilkinson(n)
    elif family == "glued_wilkinson":
        size = draw(st.sampled_from((3, 5, 7, 11, 21)))
        blocks = draw(st.integers(1, max(1, 48 // size)))
        glue = draw(st.sampled_from((0.0, 1e-15, 1e-12, 1e-8, 1e-4)))
        d, e = glued_wilkinson(blocks, size, glue)
    elif family == "laplacian":
        d, e = np.full(n, 2.0), -np.ones(n - 1)
    else:                                             # graded: entries over many decades
        g = 10.0 ** (-rng.uniform(0, 8 if dtype == np.float64 else 4) * np.arange(n) / max(n - 1, 1))
        d = g * rng.standard_normal(n)
        e = np.sqrt(g[:-1] * g[1:]) * rng.standard_normal(n - 1)
    e = np.array(e, dtype=np.float64)
    if zero_frac and e.size:
        e[rng.random(e.size) < zero_frac] = 0.0
    scale = 10.0**k
    d = (np.asarray(d, dtype=np.float64) * scale).astype(dtype)
    e = (e * scale).astype(dtype)
    return family, k, d, e


def _check_tridiag(case, dtype):
    family, k, d, e = case
    w, V = lg.tridiag_eigh(d, e)
    label = f"{family}, n={d.size}, scale=1e{k}"
    check_eigenpairs(tridiag_dense(d, e), w, V, _ref_tridiag_eigvals(d, e), dtype, label)


@HYP
@given(case=tridiagonals(np.float64))
def test_tridiag_eigh_properties_float64(case):
    _check_tridiag(case, np.float64)


@HYP
@given(case=tridiagonals(np.float32))
def test_tridiag_eigh_properties_float32(case):
    _check_tridiag(case, np.float32)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 24), nbatch=st.integers(1, 5), seed=st.integers(0, 2**63 - 1),
       k=st.integers(-150, 150))
def test_tridiag_eigh_batched_scales(n, nbatch, seed, k):
    """Every system of a batch gets its own scale (10^k .. 10^-k) and is still solved accurately."""
    rng = np.random.default_rng(seed)
    scales = 10.0 ** np.linspace(-abs(k), abs(k), nbatch)
    d = rng.standard_normal((nbatch, n)) * scales[:, None]
    e = rng.standard_normal((nbatch, n - 1)) * scales[:, None]
    w, V = lg.tridiag_eigh(d, e)
    check_eigenpairs(tridiag_dense(d, e), w, V, _ref_tridiag_eigvals(d, e), np.float64)


# ---------------------------------------------------------------------------------------------
# eigh_small = Householder + divide and conquer


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_eigh_small_random(rng, n, batch, dtype):
    X = rng.standard_normal(batch + (n, n))
    A = ((X + mT(X)) / 2).astype(dtype)
    w, N = lg.eigh_small(A)
    assert w.shape == batch + (n,) and N.shape == batch + (n, n)
    check_eigenpairs(A, w, N, np.linalg.eigvalsh(A.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", (4, 9, 32, 33))
def test_eigh_small_repeated_eigenvalues(rng, n, dtype):
    w0 = np.sort(rng.choice([-1.0, 0.5, 2.0], size=(5, n)), axis=-1)
    w0[0] = 1.0                                                        # a multiple of I
    A = sym_from_eigs(rng, w0).astype(dtype)
    w, N = lg.eigh_small(A)
    check_eigenpairs(A, w, N, np.linalg.eigvalsh(A.astype(np.float64)), dtype)


@pytest.mark.parametrize("k", (-170, -160, -150, -40, 0, 40, 150, 155, 160))
def test_eigh_small_scales(rng, k):
    n = 12
    Q = random_orthogonal(rng, n, (3,))
    w0 = np.r_[np.logspace(0, -10, n - 2), -1.0, 1.0]
    A = (Q * w0) @ mT(Q) * 10.0**k
    A = (A + mT(A)) / 2
    w, N = lg.eigh_small(A)
    check_eigenpairs(A, w, N, np.linalg.eigvalsh(A), np.float64, f"scale 1e{k}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_eigh_small_at_the_top_of_the_range(rng, dtype):
    """max |A_ij| = 1.25 * 2^1023 (float32: 2^127), ||A||_2 below the overflow: finite eigenpairs,
    those of A / 2^1023 (exact) times that power of 2."""
    n = 12
    top = np.finfo(dtype).maxexp - 1
    X = rng.standard_normal((3, n, n)) * 0.01
    A0 = np.stack([np.diag(rng.permutation(np.r_[np.linspace(1.0, 0.1, n - 2), -0.5, -0.9])) for _ in range(3)])
    A0 = A0 + (X + mT(X)) / 2
    A = (A0 * (1.25 / np.abs(A0).max(axis=(1, 2), keepdims=True))).astype(dtype) * dtype(2.0 ** top)
    assert np.all(np.abs(A).max(axis=(1, 2)) >= 2.0 ** top) and np.all(np.isfinite(A))
    w, N = lg.eigh_small(A)
    As = A.astype(np.float64) / 2.0 ** top
    check_eigenpairs(As, (w.astype(np.float64) / 2.0 ** top).astype(dtype), N, np.linalg.eigvalsh(As), dtype,
                     f"top {top}")


def test_eigh_small_reads_lower_triangle_only(rng):
    n = 10
    X = rng.standard_normal((2, n, n))
    A = X + mT(X)
    w1, N1 = lg.eigh_small(A)
    w2, N2 = lg.eigh_small(np.tril(A) + np.triu(rng.standard_normal((2, n, n)), 1), assume_symmetric=True)
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(N1, N2)


@pytest.mark.parametrize("n", list(range(1, 65)))
def test_gpu_merge_rounds_run_each_merge_after_its_children(n):
    """The rounds of cuda/tridiag_eigh.cuh (_gpu._merge_rounds): every merge once, after both
    children, the merges of a round disjoint, each index tagged with its merge, and no round later
    than needed (a merge's round is one after its later child's)."""
    from linalg_gpu.small._common import division_tree
    from linalg_gpu.small._gpu import _merge_rounds

    leaves, levels = division_tree(n)
    merges = [(s, n1, n2) for n1, n2, starts in levels for s in starts]
    rounds = _merge_rounds(n, leaves, merges)
    when = {(s, size): -1 for s, size in leaves}
    seen = []
    for g, rt in enumerate(rounds):
        tags = np.array(rt[1:])
        here = sorted({int(t) for t in tags if t >= 0})
        assert rt[0] == max((t >> 8 & 255) + (t >> 16 & 255) for t in here)
        for t in here:
            s, n1, n2 = t & 255, t >> 8 & 255, t >> 16 & 255
            assert (tags[s:s + n1 + n2] == t).all() and (tags == t).sum() == n1 + n2
            assert max(when[(s, n1)], when[(s + n1, n2)]) == g - 1
            when[(s, n1 + n2)] = g
            seen.append((s, n1, n2))
    assert sorted(seen) == sorted(merges)
    assert n <= 2 or when[(0, n)] == len(rounds) - 1


H100 = dict(sm_bytes=233472, reserved=1024, sm_regs=65536, block_bytes=232448)   # device attributes


def _h100(monkeypatch):
    from linalg_gpu.small import _gpu

    monkeypatch.setattr(_gpu, "_sm_limits", lambda d: (H100["sm_bytes"], H100["reserved"], H100["sm_regs"]))
    monkeypatch.setattr(_gpu, "_max_shared", lambda d: H100["block_bytes"])
    return _gpu


def _resident(n, spb, per_system_bytes, regs):
    """Systems resident per SM by the CUDA occupancy rules (H100): 32 blocks, 64 warps, shared memory
    per SM with the driver's reservation per block, registers per SM sub-partition in warps of 256."""
    lanes = (n if 32 % n == 0 else 32) if n <= 32 else n
    warps = -(-spb * lanes // 32)
    per_smsp = H100["sm_regs"] // 4 // (-(-regs * 32 // 256) * 256)
    return spb * min(32, 64 // warps, H100["sm_bytes"] // (spb * per_system_bytes + H100["reserved"]),
                     4 * per_smsp // warps)


@pytest.mark.parametrize("lockstep", [False, True])
@pytest.mark.parametrize("max_threads", [256, 192])
@pytest.mark.parametrize("itemsize", [4, 8])
@pytest.mark.parametrize("n", [9, 12, 16, 24, 31, 32, 33, 40, 48, 56, 64])
@pytest.mark.parametrize("regs", [40, 80, 128, 168, 255])
def test_gpu_systems_per_block_keeps_residency(monkeypatch, n, itemsize, regs, max_threads, lockstep):
    """_gpu._systems_per_block: whole warps of systems and at most THREADS threads for n <= 32
    (max_threads above: the kernel's launch bound), within the shared memory of a block; n <= 32 the
    largest block within 85 % of the most resident systems; n > 32 the most resident, of them those with
    the fewest idle lanes, of them the smallest block, or with lockstep the largest of at most 128
    threads (else the smallest)."""
    _gpu = _h100(monkeypatch)
    b = _gpu._eig_bytes(n, itemsize)
    spb = _gpu._systems_per_block(n, b, regs, 0, max_threads, lockstep)
    lanes = _gpu._lanes(n)
    step, top = (32 // lanes, _gpu.THREADS // lanes) if n <= 32 else (1, max_threads // n)
    fits = [s for s in range(step, top + 1, step) if s * b <= H100["block_bytes"]]
    assert spb in fits
    res = {s: _resident(n, s, b, regs) for s in fits}
    if n <= 32:
        assert res[spb] >= 0.85 * max(res.values())
        assert all(res[s] < 0.85 * max(res.values()) for s in fits if s > spb)
    else:
        assert res[spb] == max(res.values())
        busy = {s: s * n / (32 * -(-s * n // 32)) for s in fits}
        tied = [s for s in fits if res[s] == max(res.values()) and busy[s] == max(busy[t] for t in fits
                                                                                  if res[t] == res[spb])]
        small = [s for s in tied if s * n <= 128]
        assert spb == (max(small) if lockstep and small else min(tied))


@pytest.mark.parametrize("itemsize, regs, two, three", [(4, 128, 6, 4), (8, 164, 3, 2)])
def test_gpu_eigh_small_layout_n64_residency(monkeypatch, itemsize, regs, two, three):
    """eigh_small's layout (V in W's storage, 14 vectors) holds 6 (float32) / 3 (float64) systems of n = 64
    per H100 SM at the kernels' register counts, against 4 / 2 with eig_truncate_solve's three matrices."""
    _gpu = _h100(monkeypatch)
    assert _gpu._eigh_matrices(64, itemsize) == 2
    spb = _gpu._systems_per_block(64, _gpu._eig_bytes(64, itemsize, 2), regs, 0, lockstep=itemsize == 4)
    assert spb == (2 if itemsize == 4 else 1)
    assert _resident(64, spb, _gpu._eig_bytes(64, itemsize, 2), regs) == two
    assert _resident(64, 1, _gpu._eig_bytes(64, itemsize), regs) == three


@pytest.mark.parametrize("itemsize, n, regs, best", [
    (4, 16, 59, 8), (4, 32, 80, 4), (4, 48, 80, 2), (4, 64, 128, 2),
    (8, 16, 80, 8), (8, 32, 158, 3), (8, 48, 128, 3), (8, 64, 164, 1)])
def test_gpu_systems_per_block_h100_picks(monkeypatch, itemsize, n, regs, best):
    """The picks for the kernels' register counts on the H100: the best or (float64 n = 32: 3 per
    block 23.0 ms, 2 per block 22.5 ms) nearly the best of the measured sweep (benchmarks/NOTES_small_gpu.md,
    2026-11-23 20:14 and 2026-11-24 04:52: float32 n = 64 1: 46.0 ms, 2: 36.2, 3: 37.9)."""
    _gpu = _h100(monkeypatch)
    assert _gpu._systems_per_block(n, _gpu._eig_bytes(n, itemsize), regs, 0, lockstep=itemsize == 4) == best


def test_eigh_block_bound_matches_the_kernel():
    """_gpu.EIGH_BLOCK_ABOVE_32 (the launcher's most threads per block of eigh_small above n = 32, by
    itemsize) is the kernel's __launch_bounds__, eigh_block_threads (a larger block would not launch)."""
    from pathlib import Path

    from linalg_gpu.small import _gpu

    src = (Path(_gpu.__file__).resolve().parents[1] / "cuda" / "eigh_small.cu").read_text()
    expr = f"(sizeof(T) == 4 ? {_gpu.EIGH_BLOCK_ABOVE_32[4]} : {_gpu.EIGH_BLOCK_ABOVE_32[8]})"
    assert f"constexpr int eigh_block_threads() {{ return Group<N>::WARP ? 128 : {expr}; }}" in src
