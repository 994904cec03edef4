"""GPU kernels of linalg_gpu.small against their numpy twins, on random inputs from the ``rng`` fixture
(tests/conftest.py: a fixed seed per test, fresh ones with LINALG_TEST_RANDOM=1).

float64 agrees with the numpy path to ~1e-12 relative, float32 to the float32 level (both
solve the same well-conditioned systems; the bound is c * n * eps * cond).
"""

import numpy as np
import pytest

import linalg_gpu as lg
from linalg_gpu.small import _gpu

cp = pytest.importorskip("cupy")

# LDL^T: 41 rolled in float64, unrolled in float32; 49 rolled. Householder + PCR (_gpu._hh_lanes): 12 three rows
# per lane, 16 four (float64: 255 registers), 20 and 24 three (float64: 255 registers), 31 and 32 one or two
SIZES = [1, 2, 3, 5, 8, 12, 16, 20, 24, 31, 32, 33, 41, 49, 64]
DTYPES = [np.float64, np.float32]


def spd(rng, batch, n, dtype, cond=100.0):
    Q, _ = np.linalg.qr(rng.standard_normal((batch, n, n)))
    w = np.geomspace(1.0, 1.0 / cond, n)
    return ((Q * w[None, None, :]) @ Q.transpose(0, 2, 1)).astype(dtype)


def tol(dtype, n, cond):
    return 50 * n * np.finfo(dtype).eps * cond


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("method", ["ldlt", "householder_pcr", "eig_truncate"])
def test_methods_match_numpy_twin(rng, n, dtype, method):
    A = spd(rng, 300, n, dtype)
    b = rng.standard_normal((300, n, 2)).astype(dtype)
    x_cpu, r_cpu = lg.solve_small(A, b, method=method, return_report=True)
    x_gpu, r_gpu = lg.solve_small(cp.asarray(A), cp.asarray(b), method=method, return_report=True)
    assert isinstance(x_gpu, cp.ndarray) and x_gpu.dtype == dtype
    xg = x_gpu.get()
    err = np.abs(xg - x_cpu).max() / np.abs(x_cpu).max()
    assert err <= tol(dtype, n, 100.0), err
    assert (r_gpu.method == r_cpu.method).all()
    assert bool(r_gpu.ok.all())
    assert np.abs(r_gpu.residual.get()).max() <= 8 * n * np.finfo(dtype).eps * 10
    x_ref = np.linalg.solve(A.astype(np.float64), b.astype(np.float64))
    assert np.abs(xg - x_ref).max() / np.abs(x_ref).max() <= tol(dtype, n, 100.0)
    # the kernel's residual against the same quantity in float64 from its own x: the kernel's sum
    # rounds at (n + 2) eps of the denominator
    A64, x64, b64 = A.astype(np.float64), xg.astype(np.float64), b.astype(np.float64)
    num = np.abs(A64 @ x64 - b64).max(axis=1)
    den = np.abs(A64).sum(-1).max(-1)[:, None] * np.abs(x64).max(axis=1) + np.abs(b64).max(axis=1)
    res_ref = (num / den).max(axis=1)
    assert np.abs(r_gpu.residual.get() - res_ref).max() <= 2 * (n + 2) * np.finfo(dtype).eps
    # the condition estimate against the twin's, within 8 times the twin's own change when A is
    # perturbed by a few eps: Householder + PCR's (the ratio of the PCR pivots) moves far beyond
    # n eps cond under rounding (numpy twin, float64 n = 64, cond(A) = 10: by 3.5e5 eps for a 1 eps
    # perturbation of A), which made a bound of tol alone fail for about one seed in 20 at n = 64
    ce_g, ce_c = r_gpu.cond_estimate.get(), r_cpu.cond_estimate
    P = A * (1 + 4 * np.finfo(dtype).eps * rng.standard_normal(A.shape)).astype(dtype)
    _, r_p = lg.solve_small(((P + P.transpose(0, 2, 1)) / 2).astype(dtype), b, method=method, return_report=True)
    moved = np.abs(r_p.cond_estimate - ce_c).max()
    assert np.abs(ce_g - ce_c).max() <= 8 * moved + tol(dtype, n, 100.0) * np.abs(ce_c).max()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_householder_pcr_with_identity_reflectors_matches_twin(rng, n, dtype):
    """Diagonal, tridiagonal and block-diagonal matrices: every reflector, or the one of the step at
    the block boundary, is the identity (no head below the subdiagonal). In the rolled reduction
    (n > 32) such a step only shifts the rows. Two right-hand sides: the first goes through Q^T
    inside the reduction, the second through apply_q_rows."""
    B, idx, h = 60, np.arange(n), n // 2
    D = np.zeros((B, n, n))
    D[:, idx, idx] = rng.uniform(1.0, 2.0, (B, n))
    T = D.copy()
    off = rng.uniform(-0.4, 0.4, (B, n - 1))                   # diagonally dominant: cond < 14
    T[:, idx[1:], idx[:-1]] = off
    T[:, idx[:-1], idx[1:]] = off
    Bd = spd(rng, B, n, np.float64)
    Bd[:, :h, h:] = 0
    Bd[:, h:, :h] = 0
    A = np.concatenate([D, T, Bd]).astype(dtype)
    b = rng.standard_normal((3 * B, n, 2)).astype(dtype)
    x_cpu, _ = lg.solve_small(A, b, method="householder_pcr", return_report=True)
    x_gpu, r_gpu = lg.solve_small(cp.asarray(A), cp.asarray(b), method="householder_pcr", return_report=True)
    xg = x_gpu.get()
    x_ref = np.linalg.solve(A.astype(np.float64), b.astype(np.float64))
    assert bool(r_gpu.ok.all())
    assert np.abs(xg - x_cpu).max() / np.abs(x_cpu).max() <= tol(dtype, n, 100.0)
    assert np.abs(xg - x_ref).max() / np.abs(x_ref).max() <= tol(dtype, n, 100.0)
    assert np.abs(r_gpu.residual.get()).max() <= 8 * n * np.finfo(dtype).eps * 10


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_eigh_small_matches_lapack_and_twin(rng, n, dtype):
    X = rng.standard_normal((200, n, n))
    A = (X + X.transpose(0, 2, 1)).astype(dtype)
    w, V = lg.eigh_small(cp.asarray(A))
    w, V = w.get(), V.get()
    w_ref = np.linalg.eigvalsh(A.astype(np.float64))
    scale = np.abs(w_ref).max()
    e = np.finfo(dtype).eps
    assert np.abs(w - w_ref).max() <= 50 * n * e * scale
    assert np.abs(V.transpose(0, 2, 1) @ V - np.eye(n)).max() <= 50 * n * e
    assert np.abs(A @ V - V * w[:, None, :]).max() <= 50 * n * e * scale
    w_cpu, _ = lg.eigh_small(A)
    assert np.abs(w - w_cpu).max() <= 50 * n * e * scale


@pytest.mark.parametrize("dtype, n", [(dt, n) for dt in DTYPES
                                      for n in range(1, _gpu.EIGH_JACOBI_MAX_N[np.dtype(dt).itemsize] + 1)])
def test_eigh_jacobi_matches_numpy_twin(rng, n, dtype):
    """cuda/eigh_jacobi.cu (eigh_small for n <= 12 in float32, 10 in float64) against its twin
    small/jacobi_eigh.py on the same fresh inputs: random symmetric matrices, a tenth of them scaled by
    1e-30 ... 1e30, a batch that does not fill the last block, one system with a NaN (NaN out, flagged)
    and its symmetric flag 0."""
    from linalg_gpu.small.jacobi_eigh import eigh_jacobi

    B = 1001
    X = rng.standard_normal((B, n, n))
    A = X + X.transpose(0, 2, 1)
    A[:100] *= 10.0 ** rng.integers(-30, 31, (100, 1, 1))
    A = A.astype(dtype)
    A[7, n - 1, 0] = np.nan
    w, V, nf, asym = (a.get() for a in _gpu.eigh_small(cp.asarray(A)))
    ok = np.ones(B, dtype=bool)
    ok[7] = False
    np.testing.assert_array_equal(nf, ~ok)
    assert np.isnan(w[7]).all() and np.isnan(V[7]).all() and (asym[ok] == 0).all()
    wt, Vt = eigh_jacobi(A[ok])
    w, V = w[ok].astype(np.float64), V[ok].astype(np.float64)
    e = np.finfo(dtype).eps
    sc = np.abs(wt).max(axis=1, keepdims=True).astype(np.float64)
    assert (np.abs(w - wt) <= 20 * n * e * sc).all()
    # eigenvectors column by column, up to sign, within 20 n eps / (relative gap to the other eigenvalues)
    d = np.abs(wt[:, :, None] - wt[:, None, :]).astype(np.float64) + np.where(np.eye(n, dtype=bool), np.inf, 0)
    gap = np.maximum(d.min(axis=2) / np.maximum(sc, np.finfo(np.float64).tiny), 1e-300)
    sgn = np.where((V * Vt).sum(axis=1, keepdims=True) < 0, -1.0, 1.0)
    assert (np.abs(V - Vt * sgn).max(axis=1) <= 20 * n * e / gap).all()


@pytest.mark.parametrize("dtype, tiny", [(np.float32, 1e-25), (np.float64, 1e-160)])
def test_eigh_jacobi_tiny_pivots_match_twin(rng, dtype, tiny):
    """A 2 x 2 block far below the rest (the rotation's d, u scaled by a power of 2 before d^2 + u^2):
    the kernel's eigenvalues of the block to the dtype's relative accuracy, as the twin's."""
    from linalg_gpu.small import _gpu
    from linalg_gpu.small.jacobi_eigh import eigh_jacobi

    n, B = 5, 300
    A = np.zeros((B, n, n))
    A[:, :3, :3] = np.diag([1.0, -2.0, 3.0])
    X = rng.uniform(-0.2, 0.2, (B, 2, 2))
    A[:, 3:, 3:] = (np.diag([2.0, 3.0]) + X + X.transpose(0, 2, 1)) * tiny   # eigenvalues in [1.2, 3.8] tiny
    A = A.astype(dtype)
    w = _gpu.eigh_small(cp.asarray(A))[0].get().astype(np.float64)
    ref = np.sort(np.concatenate([np.broadcast_to([1.0, -2.0, 3.0], (B, 3)),
                                  np.linalg.eigvalsh(A[:, 3:, 3:].astype(np.float64) / tiny) * tiny], axis=1))
    e = np.finfo(dtype).eps
    assert (np.abs(w - ref) <= 20 * n * e * np.abs(ref)).all()
    assert (np.abs(eigh_jacobi(A)[0] - ref) <= 20 * n * e * np.abs(ref)).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_eigh_small_clustered_spectra_match_lapack_and_twin(rng, n, dtype):
    """Repeated and clustered eigenvalues, and diagonal matrices (every component deflates): the
    close-pole deflation and its rotations in the divide and conquer."""
    Q, _ = np.linalg.qr(rng.standard_normal((150, n, n)))
    w0 = rng.integers(-2, 3, (150, n)) + rng.standard_normal((150, n)) * 10.0 ** rng.integers(-12, -2, (150, 1))
    A = (Q * w0[:, None, :]) @ Q.transpose(0, 2, 1)
    D = np.zeros((50, n, n))
    D[:, np.arange(n), np.arange(n)] = rng.integers(-2, 3, (50, n))
    A = np.concatenate([A, D, np.broadcast_to(np.eye(n), (10, n, n))]).astype(dtype)
    w, V = (a.get() for a in lg.eigh_small(cp.asarray(A)))
    w_ref = np.linalg.eigvalsh(A.astype(np.float64))
    scale = np.maximum(np.abs(w_ref).max(axis=1, keepdims=True), 1)      # 1: the zero matrices
    e = np.finfo(dtype).eps
    assert np.abs(w - w_ref).max() <= 50 * n * e * scale.max()
    assert np.abs(V.transpose(0, 2, 1) @ V - np.eye(n)).max() <= 50 * n * e
    assert (np.abs(A @ V - V * w[:, None, :]).max(axis=(1, 2)) <= 50 * n * e * scale[:, 0]).all()
    w_cpu, _ = lg.eigh_small(A)
    assert np.abs(w - w_cpu).max() <= 50 * n * e * scale.max()


def test_eig_truncate_discards_like_cpu(rng):
    n = 30
    Q, _ = np.linalg.qr(rng.standard_normal((500, n, n)))
    w = np.geomspace(1.0, 1e-9, n)
    w[-3:] = [-1e-10, 0.0, -1e-12]
    A = (Q * w) @ Q.transpose(0, 2, 1)
    b = rng.standard_normal((500, n))
    x_c, r_c = lg.solve_small(A, b, method="eig_truncate", return_report=True)
    x_g, r_g = lg.solve_small(cp.asarray(A), cp.asarray(b), method="eig_truncate", return_report=True)
    assert (r_g.n_discarded.get() == r_c.n_discarded).all()
    assert (r_c.n_discarded == (w <= 1e-5).sum()).all()
    assert np.abs(x_g.get() - x_c).max() <= 1e-9 * np.abs(x_c).max()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [2, 7, 30])
def test_eig_truncate_keeps_negative_eigenvalues_like_cpu(rng, n, dtype):
    """An indefinite system: the kernel keeps the eigenvalues of either sign above max |w| / cond_max and discards
    the others, as the numpy twin; x as the twin's and, where nothing is discarded, LAPACK's."""
    w = rng.uniform(1.0, 100.0, (400, n)) * rng.choice([-1.0, 1.0], (400, n))
    w[:, 0] = -np.abs(w[:, 0])
    if n > 2:
        w[200:, 1] = 1e-8 * np.sign(w[200:, 1])                         # discarded in half the systems
    Q, _ = np.linalg.qr(rng.standard_normal((400, n, n)))
    A = ((Q * w[:, None, :]) @ Q.transpose(0, 2, 1)).astype(dtype)
    A = (A + A.transpose(0, 2, 1)) / 2
    b = rng.standard_normal((400, n)).astype(dtype)
    x_c, r_c = lg.solve_small(A, b, method="eig_truncate", return_report=True)
    x_g, r_g = lg.solve_small(cp.asarray(A), cp.asarray(b), method="eig_truncate", return_report=True)
    want = (np.abs(w) <= np.abs(w).max(-1, keepdims=True) / 1e5).sum(-1)
    assert (r_g.n_discarded.get() == r_c.n_discarded).all() and (r_c.n_discarded == want).all()
    assert np.abs(x_g.get() - x_c).max() <= tol(dtype, n, 100.0) * np.abs(x_c).max()
    full = want == 0
    x_ref = np.linalg.solve(A[full].astype(np.float64), b[full].astype(np.float64)[..., None])[..., 0]
    assert np.abs(x_g.get()[full] - x_ref).max() <= tol(dtype, n, 100.0) * np.abs(x_ref).max()


def fig2(rng, batch, m, d=29, sigma=0.1, mu=0.1, t=0.1):
    S = np.exp((mu - sigma**2 / 2) * t + sigma * np.sqrt(t) * rng.standard_normal((batch, m, d)))
    psi = np.concatenate([np.ones((batch, m, 1)), S], axis=-1).astype(np.float32)
    y = rng.standard_normal((batch, m)).astype(np.float32)
    m32 = np.float32(m)
    return np.einsum("bmi,bmj->bij", psi, psi) / m32, np.einsum("bmi,bm->bi", psi, y) / m32


def test_auto_on_fig2_agrees_with_cpu(rng):
    """Paper's Fig. 2 matrices in float32: the method per system agrees with the CPU path on >= 99%."""
    A, b = fig2(rng, 2000, 300)
    _, r_c = lg.solve_small(A, b, return_report=True)
    x_g, r_g = lg.solve_small(cp.asarray(A), cp.asarray(b), return_report=True)
    assert (r_g.method == r_c.method).mean() >= 0.99, (r_g.counts(), r_c.counts())
    assert bool(r_g.ok.all()) and (r_g.residual.get() <= r_g.rtol).all()
    Ax = np.einsum("bij,bj->bi", A.astype(np.float64), x_g.get().astype(np.float64))
    nA = np.abs(A.astype(np.float64)).sum(-1).max(-1)
    back = np.abs(Ax - b).max(1) / (nA * np.abs(x_g.get()).max(1) + np.abs(b).max(1))
    assert back.max() <= 8 * 30 * np.finfo(np.float32).eps, "backward error of the float32 solves"


def test_auto_repairs_singular_fig2_on_gpu(rng):
    """Fewer inner paths than regressors (M_k = 20 < n = 30): singular in float32. LDL^T must fail
    on them on both backends and every system must meet its criterion. Which fallback accepts a
    singular system (Householder + PCR or the truncated eigen-solve) depends on rounding: measured
    agreement between CPU and GPU on this part is about 92%."""
    A1, b1 = fig2(rng, 1500, 300)
    A2, b2 = fig2(rng, 500, 20)
    A, b = np.concatenate([A1, A2]), np.concatenate([b1, b2])
    perm = rng.permutation(len(A))
    A, b = A[perm], b[perm]
    singular = perm >= 1500
    x_c, r_c = lg.solve_small(A, b, return_report=True)
    x_g, r_g = lg.solve_small(cp.asarray(A), cp.asarray(b), return_report=True)
    for r in (r_c, r_g):
        meth = r.method
        assert (meth[~singular] == "ldlt").all()
        assert (meth[singular] != "ldlt").all()
        assert r.counts()["eig_truncate"] > 0
    res, meth = r_g.residual.get(), r_g.method
    assert (res[meth != "eig_truncate"] <= r_g.rtol).all()
    assert bool(r_g.ok.all())
    # truncated systems solve the truncated problem x = N_k D_k^-1 N_k^T b (float64 reference on the
    # same float32 matrix, keeping as many eigenvalues as the kernel did), to the perturbation bound
    # 10 n eps (w_max / w_k + w_max / gap) of the kept eigenspace
    nd_all = r_g.n_discarded.get()
    xg = x_g.get()
    for i in np.flatnonzero(meth == "eig_truncate")[:50]:
        w, N = np.linalg.eigh(A[i].astype(np.float64))
        keep = np.arange(30) >= nd_all[i]
        xref = N[:, keep] @ ((N[:, keep].T @ b[i].astype(np.float64)) / w[keep])
        gap = w[keep].min() - w[~keep].max() if nd_all[i] else np.inf
        bound = 10 * 30 * np.finfo(np.float32).eps * (w.max() / w[keep].min() + w.max() / gap)
        assert np.linalg.norm(xg[i] - xref) <= bound * np.linalg.norm(xref), i


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_ldlt_flags_match_numpy_twin(rng, n, dtype):
    """The screening and breakdown flags of cuda/ldlt.cu against the numpy path: NaN/Inf input,
    an indefinite system (LDL^T breakdown), the D-ratio condition estimate and the residual, on a
    batch that does not fill the last block."""
    B = 301
    A = spd(rng, B, n, dtype)
    b = rng.standard_normal((B, n)).astype(dtype)
    bad = rng.choice(B, 6, replace=False)
    A[bad[0], 0, n - 1] = np.nan                            # upper triangle: screened too
    b[bad[1], n // 2] = np.inf
    A[bad[2:4]] *= -1                                      # negative definite: breakdown at step 0
    if n > 1:
        A[bad[4], n - 1, n - 1] = -A[bad[4], n - 1, n - 1]  # breakdown at the last step
    kw = dict(method="ldlt", return_report=True, check_finite=False)
    x_c, r_c = lg.solve_small(A, b, **kw)
    x_g, r_g = lg.solve_small(cp.asarray(A), cp.asarray(b), **kw)
    for name in ("nonfinite", "breakdown", "ok"):
        assert (getattr(r_g, name).get() == getattr(r_c, name)).all(), name
    assert set(np.flatnonzero(r_c.nonfinite)) == set(bad[:2])
    assert set(np.flatnonzero(r_c.breakdown)) == set(bad[2:5] if n > 1 else bad[2:4])
    good = r_c.ok
    cg, cc = r_g.cond_estimate.get()[good], r_c.cond_estimate[good]
    assert np.abs(cg - cc).max() <= tol(dtype, n, 100.0) * cc.max()
    assert (r_g.residual.get()[good] <= 8 * n * np.finfo(dtype).eps * 10).all()
    assert np.isnan(x_g.get()[~good]).all() and np.isfinite(x_g.get()[good]).all()
    with pytest.raises(ValueError, match="A"):
        lg.solve_small(cp.asarray(A), cp.asarray(b), method="ldlt")
    S = spd(rng, B, n, dtype)
    if n > 1:
        S[bad[5], n - 1, 0] += 0.1                          # not symmetric: named
        with pytest.raises(ValueError, match=f"symmetric.*{bad[5]}"):
            lg.solve_small(cp.asarray(S), cp.ones((B, n), dtype=dtype), method="ldlt")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [16, 33, 41, 49, 64])
def test_ldlt_breakdown_scale_is_max_over_every_diagonal(rng, n, dtype):
    """The breakdown test D_jj > n eps max|A_ii| with the largest diagonal entry in row 0: a last
    pivot below the tolerance but above n eps (the tolerance from the other rows alone) is a
    breakdown on both paths (the rolled kernel once took the maximum over the second row block)."""
    B = 64
    A = spd(rng, B, n, dtype)
    A[:, 0, :] = 0.0
    A[:, :, 0] = 0.0
    A[:, 0, 0] = 100.0                                        # max |A_ii|
    last = np.arange(B) % 2 == 0
    A[last, n - 1, :] = A[last, :, n - 1] = 0.0
    A[last, n - 1, n - 1] = 20 * n * np.finfo(dtype).eps      # > n eps, < n eps 100
    b = rng.standard_normal((B, n)).astype(dtype)
    kw = dict(method="ldlt", return_report=True, check_finite=False)
    _, r_c = lg.solve_small(A, b, **kw)
    _, r_g = lg.solve_small(cp.asarray(A), cp.asarray(b), **kw)
    assert (r_c.breakdown == last).all()
    assert (r_g.breakdown.get() == r_c.breakdown).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("method", ["householder_pcr", "eig_truncate"])
def test_fallback_kernels_screen_like_numpy_twin(rng, n, dtype, method):
    """The input screening of cuda/householder_pcr.cu and cuda/eigh_small.cu (the flags of a first
    stage): NaN above and Inf below the diagonal of A, Inf in b, an asymmetric system named; on a
    batch that does not fill the last block."""
    B = 301
    A = spd(rng, B, n, dtype)
    b = rng.standard_normal((B, n)).astype(dtype)
    bad = rng.choice(B, 4, replace=False)
    A[bad[0], 0, n - 1] = np.nan
    A[bad[1], n - 1, 0] = np.inf
    b[bad[2], n // 2] = np.inf
    kw = dict(method=method, return_report=True, check_finite=False)
    x_c, r_c = lg.solve_small(A, b, **kw)
    x_g, r_g = lg.solve_small(cp.asarray(A), cp.asarray(b), **kw)
    nf = r_g.nonfinite.get()
    assert set(np.flatnonzero(nf)) == set(bad[:3]) and (nf == r_c.nonfinite).all()
    xg = x_g.get()
    assert np.isnan(xg[nf]).all() and np.isfinite(xg[~nf]).all()
    assert (r_g.method[nf] == "none").all() and bool(r_g.ok.get()[~nf].all())
    with pytest.raises(ValueError, match="A"):
        lg.solve_small(cp.asarray(A), cp.asarray(b), method=method)
    if n > 1:
        S = spd(rng, B, n, dtype)
        S[bad[3], n - 1, 0] += 0.1
        with pytest.raises(ValueError, match=f"symmetric.*{bad[3]}"):
            lg.solve_small(cp.asarray(S), cp.ones((B, n), dtype=dtype), method=method)
        with pytest.raises(ValueError, match=f"symmetric.*{bad[3]}"):
            lg.eigh_small(cp.asarray(S))
    with pytest.raises(ValueError, match="A"):
        lg.eigh_small(cp.asarray(A))
    w, _ = lg.eigh_small(cp.asarray(A), check_finite=False, assume_symmetric=True)   # no check: NaN rows
    assert np.isnan(w.get()[bad[:2]]).all() and np.isfinite(np.delete(w.get(), bad[:2], axis=0)).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B", [1, 33, 1000, 300_001])
def test_screening_flags_match_numpy_twin(rng, B, dtype):
    """cuda/solve_flags.cu screening_flags against its twin _common.screening_flags: no flag, a
    non-finite system, an asymmetric one, an asymmetric ratio on a non-finite system (not counted),
    both, and the last system (beyond the first pass of the grid-stride loop at B = 300 001)."""
    from linalg_gpu.small import _common, _gpu

    thr = 1e-3
    seen = set()
    for case in range(6):
        nf = np.zeros(B, dtype=bool)
        asym = rng.uniform(0, thr, B).astype(dtype)
        k, j = (B - 1, 0) if case == 5 else rng.choice(B, 2) if B > 1 else (0, 0)
        if case in (1, 3, 4):
            nf[k] = True
        if case in (2, 3, 5):
            asym[k] = dtype(2 * thr)
        if case == 4 and j != k:
            asym[j] = dtype(2 * thr)                                  # both flags
        want = _common.screening_flags(nf, asym, thr)
        assert _gpu.screening_flags(cp.asarray(nf), cp.asarray(asym), thr) == want
        seen.add(want)
    assert seen >= {(False, False), (True, False), (False, True)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B, nr", [(1, 1), (1000, 3), (300_001, 2)])
@pytest.mark.parametrize("codes", [False, True])
def test_first_stage_flags_match_numpy_twin(rng, B, nr, dtype, codes):
    """cuda/solve_flags.cu first_stage_flags against its twin robust.first_stage_flags on random flags:
    breakdown, redo, the four "any" flags and the outputs it finishes in place (x NaN where not ok; every code
    written, the first stage's or 3, with NaN residual and condition estimate, on non-finite input; the counts of
    discarded eigenvalues zeroed where given), with and without per-system start codes, and with the flags not
    read; at B = 300 001 the grid-stride loop goes round more than once."""
    from linalg_gpu.small import _gpu, robust

    rtol, thr = 1e-6, 1e-3
    for ldlt, first, zero, read in ((True, 0, True, True), (False, 1, True, False), (False, 2, False, True)):
        x = rng.standard_normal((B, nr, 1)).astype(dtype)                # nr entries per system
        code = rng.integers(-5, 9, B).astype(np.int8)                   # (garbage: every code is written)
        nd = rng.integers(1, 4, B).astype(np.int32)
        resid = (rtol * rng.uniform(0, 2, B)).astype(dtype)
        cond = rng.uniform(1, 10, B).astype(dtype)
        ok = rng.random(B) < 0.9
        nonfinite = rng.random(B) < 0.05
        asym = (thr * rng.uniform(0, 1.2, B)).astype(dtype)
        start = rng.integers(0, 3, B).astype(np.int8) if codes else None
        dev = [cp.asarray(a) for a in (x, code, resid, cond, ok, nd)]
        got = _gpu.first_stage_flags(dev[:5], cp.asarray(nonfinite), cp.asarray(asym), start, rtol, thr, ldlt, first,
                                     dev[5] if zero else None, read=read)
        want = robust.first_stage_flags((x, code, resid, cond, ok), nonfinite, asym, start, rtol, thr, ldlt, first,
                                        nd if zero else None)
        assert got[2] == (want[2] if read else None)
        assert set(np.unique(code)) <= {first, 3} and (nd == 0).all() == zero
        for g, w in zip(got[:2], want[:2], strict=True):
            np.testing.assert_array_equal(g.get(), w)
        for g, w in zip(dev, (x, code, resid, cond, ok, nd), strict=True):
            np.testing.assert_array_equal(g.get(), w)          # (NaN in the same places)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", [0, 1, 37, 5000])
def test_scatter_stage_matches_numpy_twin(rng, count, dtype):
    """cuda/solve_flags.cu scatter_stage against its twin robust.scatter_stage: a later stage's results at
    random rows into random systems of the batch, x NaN where the stage's ok is false."""
    from linalg_gpu.small import _gpu, robust

    B, m, n, r = 20_000, 6000, 5, 2
    out = (rng.standard_normal((B, n, r)).astype(dtype), rng.integers(0, 2, B).astype(np.int8),
           rng.random(B).astype(dtype), rng.random(B).astype(dtype), rng.integers(0, 3, B).astype(np.int32),
           rng.random(B) < 0.5)
    res = (rng.standard_normal((m, n, r)).astype(dtype), rng.random(m).astype(dtype),
           rng.integers(0, 5, m).astype(np.int32), rng.random(m) < 0.8, rng.random(m).astype(dtype))
    sel, rows = rng.choice(B, count, replace=False), rng.choice(m, count, replace=False)
    dev = [cp.asarray(a) for a in out]
    _gpu.scatter_stage(dev, sel, rows, [cp.asarray(a) for a in res], 2)
    robust.scatter_stage(out, sel, rows, res, 2)
    for g, w in zip(dev, out, strict=True):
        np.testing.assert_array_equal(g.get(), w)


def test_per_system_memory_on_gpu_matches_cpu_and_composition(rng):
    """SolverMemory(per_system=True) on the GPU (as the nested CVA engine uses it): the codes it keeps stay
    on the device (no transfer stops the host), a system's start and result depend only on its own history (two
    halves with two
    memories give what one memory gives for the whole batch), and the well-conditioned half is solved
    by LDL^T and starts there next time, as on the CPU, while the half of rank 3 needs a fallback on both.
    (Which fallback accepts a singular system depends on rounding: a huge x from Householder + PCR can
    have a small relative residual.)"""
    n, B = 6, 400
    X = rng.standard_normal((B, n, 3))
    A = X @ X.transpose(0, 2, 1)
    A[::2] += np.eye(n) * 5
    b = rng.standard_normal((B, n))
    Ad, bd = cp.asarray(A), cp.asarray(b)
    whole, cpu = lg.SolverMemory(per_system=True), lg.SolverMemory(per_system=True)
    halves = [lg.SolverMemory(per_system=True), lg.SolverMemory(per_system=True)]
    for _ in range(3):
        xw, rw = lg.solve_small(Ad, bd, return_report=True, memory=whole, key="k")
        parts = [lg.solve_small(Ad[s], bd[s], return_report=True, memory=m, key="k")
                 for s, m in zip((slice(0, 150), slice(150, B)), halves, strict=True)]
        np.testing.assert_array_equal(xw.get(), np.concatenate([p[0].get() for p in parts]))
        np.testing.assert_array_equal(rw.method_code.get(), np.concatenate([p[1].method_code.get() for p in parts]))
        xc, rc = lg.solve_small(A, b, return_report=True, memory=cpu, key="k")
        for r in (rw, rc):
            assert (r.method[::2] == "ldlt").all() and (r.method[1::2] != "ldlt").all()
        assert np.abs(xw.get() - xc)[::2].max() <= 1e-10 * np.abs(xc[::2]).max()
        assert bool(rw.ok.all()) and (rw.residual.get()[::2] <= rw.rtol).all()
    assert isinstance(whole.start_method("k"), cp.ndarray) and isinstance(cpu.start_method("k"), np.ndarray)
    for codes in (whole.start_method("k").get(), cpu.start_method("k")):
        assert codes.dtype == np.int8 and np.all(codes[::2] == 0) and np.all(codes[1::2] >= 1)
    assert whole.summary()["k"]["counts"] == rw.counts() and cpu.summary()["k"]["counts"] == rc.counts()


@pytest.mark.parametrize("method", ["ldlt", "householder_pcr", "eig_truncate"])
def test_input_layouts_match_contiguous_call(rng, method):
    """Views, Fortran order and mixed dtypes reach the kernels as C-contiguous batches (they read raw
    pointers): the results equal those of the contiguous float64 call, and eigh_small's too."""
    n = 6
    A = cp.asarray(spd(rng, 2 * 7, n, np.float64).reshape(2, 7, n, n))
    b = cp.asarray(rng.standard_normal((2, 7, n)))
    x = lg.solve_small(A, b, method=method)
    layouts = {
        "strided batch": (cp.repeat(A, 2, axis=1)[:, ::2], cp.repeat(b, 2, axis=1)[:, ::2]),
        "Fortran order": (cp.asfortranarray(A), cp.asfortranarray(b)),
        "b as (..., n, 1) view": (A, b[..., None]),
        "b float32": (A, b.astype(np.float32)),
    }
    for name, (Al, bl) in layouts.items():
        xl = lg.solve_small(Al, bl, method=method)
        want = x[..., None] if bl.ndim == 4 else x
        want = want if bl.dtype == np.float64 else lg.solve_small(A, bl.astype(np.float64), method=method)
        assert xl.shape == want.shape and xl.dtype == np.float64, name
        assert bool(cp.all(xl == want)), name
    w, V = lg.eigh_small(cp.asfortranarray(A))
    w0, V0 = lg.eigh_small(A)
    assert bool(cp.all(w == w0)) and bool(cp.all(V == V0))


def near_top(rng, batch, n, dtype, top):
    """Symmetric A with max |A_ij| = 1.25 * 2^top and ||A||_2 below 2^(top + 1) (A / 2^top is exact)."""
    X = rng.standard_normal((batch, n, n)) * 0.01
    D = np.stack([np.diag(rng.permutation(np.linspace(1.0, 0.2, n))) for _ in range(batch)])
    A0 = D + (X + X.transpose(0, 2, 1)) / 2
    return (A0 * (1.25 / np.abs(A0).max(axis=(1, 2), keepdims=True))).astype(dtype) * dtype(2.0 ** top)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [5, 8, 16, 33, 64])
def test_entries_at_the_top_of_the_range(rng, n, dtype):
    """max |A_ij| >= 2^1023 (float32 2^127): the kernels' power-of-2 scaling stays normal, so
    eigh_small, the truncated eigen-solve and auto are accurate; float32 LDL^T and Householder + PCR
    only below 2^126 (the solve_small docstring)."""
    e = np.finfo(dtype).eps
    top = np.finfo(dtype).maxexp - 1
    for method in lg.METHODS:
        t = 125 if dtype == np.float32 and method in ("ldlt", "householder_pcr") else top
        A = near_top(rng, 64, n, dtype, t)
        b = rng.standard_normal((64, n)).astype(dtype) * dtype(2.0 ** (t - 20))
        As = A.astype(np.float64) / 2.0 ** t
        ref = np.linalg.solve(As, b.astype(np.float64)[..., None] / 2.0 ** (t - 20))[..., 0] * 2.0 ** -20
        x, rep = lg.solve_small(cp.asarray(A), cp.asarray(b), method=method, return_report=True)
        x = x.get()
        assert bool(rep.ok.all()) and np.isfinite(x).all(), method
        assert np.abs(x - ref).max() <= tol(dtype, n, 10.0) * np.abs(ref).max(), method
    A = near_top(rng, 64, n, dtype, top)
    w, V = (a.get() for a in lg.eigh_small(cp.asarray(A)))
    w_ref = np.linalg.eigvalsh(A.astype(np.float64) / 2.0 ** top)
    assert np.isfinite(w).all() and np.isfinite(V).all()
    assert np.abs(w / 2.0 ** top - w_ref).max() <= 50 * n * e * np.abs(w_ref).max()
    assert np.abs(V.transpose(0, 2, 1) @ V.astype(np.float64) - np.eye(n)).max() <= 50 * n * e


@pytest.mark.parametrize("method", lg.METHODS)
def test_empty_batch_and_no_right_hand_sides(rng, method):
    """Zero systems and k = 0 right-hand sides give the CPU path's shapes and reports."""
    x = lg.solve_small(cp.zeros((0, 6, 6)), cp.zeros((0, 6)), method=method)
    assert x.shape == (0, 6)
    assert [a.shape for a in lg.eigh_small(cp.zeros((0, 6, 6)))] == [(0, 6), (0, 6, 6)]
    A = spd(rng, 5, 6, np.float64)
    x, rep = lg.solve_small(cp.asarray(A), cp.zeros((5, 6, 0)), method=method, return_report=True)
    x_cpu, rep_cpu = lg.solve_small(A, np.zeros((5, 6, 0)), method=method, return_report=True)
    assert x.shape == x_cpu.shape == (5, 6, 0)
    np.testing.assert_array_equal(cp.asnumpy(rep.ok), rep_cpu.ok)
    np.testing.assert_array_equal(rep.method, rep_cpu.method)


@pytest.mark.parametrize("n", [0, 1, 7, 300_001])
@pytest.mark.parametrize("p", [0.0, 0.03, 1.0])
def test_partition_on_gpu_matches_flatnonzero(rng, n, p):
    """robust._partition on the device (cumulative sums and one read of the counts) against numpy's flatnonzero:
    each mask's indices in order, then the rest."""
    from linalg_gpu.small.robust import _partition

    u = rng.random(n)
    masks = [u < p / 2, (u >= p / 2) & (u < p)]
    got = _partition(cp, [cp.asarray(m) for m in masks], n)
    rest = ~(masks[0] | masks[1])
    for g, want in zip(got, (np.flatnonzero(masks[0]), np.flatnonzero(masks[1]), np.flatnonzero(rest)), strict=True):
        assert isinstance(g, cp.ndarray) and g.dtype == np.int64
        np.testing.assert_array_equal(g.get(), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("middle", [False, True])
@pytest.mark.parametrize("codes", [False, True])
@pytest.mark.parametrize("next_codes", [False, True])
def test_merge_later_stages_matches_numpy_twin(rng, dtype, middle, codes, next_codes):
    """cuda/solve_flags.cu merge_later_stages against its twin robust.merge_later_stages: the later stages'
    results (run on the whole batch; the eigen-solve's ok not given: its x finite or not) into the pending systems
    that take them, pending not changed, and the start codes for next time; 300 001 systems (the grid-stride loop
    goes round more than once)."""
    from linalg_gpu.small import robust

    B, n, r, rtol = 300_001, 3, 2, 1e-6
    out = (rng.standard_normal((B, n, r)).astype(dtype), rng.integers(0, 2, B).astype(np.int8),
           rng.random(B).astype(dtype), rng.random(B).astype(dtype), rng.integers(0, 3, B).astype(np.int32),
           rng.random(B) < 0.5)
    mid = (rng.standard_normal((B, n, r)).astype(dtype), rng.random(B).astype(dtype),
           rng.integers(0, 5, B).astype(np.int32), rng.random(B) < 0.8, (rtol * rng.uniform(0, 2, B)).astype(dtype))
    xl = rng.standard_normal((B, n, r)).astype(dtype)
    xl[rng.random(B) < 0.1, rng.integers(0, n), rng.integers(0, r)] = np.nan
    xl[rng.random(B) < 0.05, 0, 0] = -np.inf
    last = (xl, rng.random(B).astype(dtype), (rng.random(B) < 0.3) * rng.integers(1, 4, B).astype(np.int32), None,
            (rtol * rng.uniform(0, 2, B)).astype(dtype))
    pending = rng.random(B) < 0.6
    start = rng.integers(0, 3, B).astype(np.int8) if codes else None
    dev, pend = [cp.asarray(a) for a in out], cp.asarray(pending)
    got = _gpu.merge_later_stages(dev, [cp.asarray(a) for a in mid] if middle else None,
                                  [None if a is None else cp.asarray(a) for a in last], pend, rtol,
                                  None if start is None else cp.asarray(start), next_codes)
    want = robust.merge_later_stages(out, mid if middle else None, last, pending, rtol, start, next_codes)
    np.testing.assert_array_equal(pend.get(), pending)
    for g, w in zip(dev, out, strict=True):
        np.testing.assert_array_equal(g.get(), w)
    assert set(np.unique(out[1])) >= ({0, 1, 2} if middle else {0, 2}) and not out[5].all()
    if next_codes:
        assert got.dtype == np.int8 and set(np.unique(want)) >= {0, 2}
        np.testing.assert_array_equal(got.get(), want)
    else:
        assert got is None and want is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [2, 3, 6, 8])
def test_whole_batch_later_stages_give_the_gathered_bits(rng, monkeypatch, n, dtype):
    """solve_small on the GPU with its later stages on the whole batch (n <= robust.WHOLE_BATCH_MAX_N, and with
    a report and no input checks nothing read by the host) against the same calls with the stages on the gathered
    failing systems: bitwise the same x and report, over three batches under a per-system memory (so each system
    starts where it needed to) and with method auto and no memory; every method is used."""
    from linalg_gpu.small import robust

    B = 20_000
    X = rng.standard_normal((3, B, n + 1, n))
    A = np.einsum("kbij,kbil->kbjl", X, X)
    A[:, : B // 10, -1, :] = A[:, : B // 10, :, -1] = 0                       # singular: the eigen-solve
    A[:, B // 10: B // 5] -= 3 * np.eye(n) * np.abs(A[:, B // 10: B // 5]).max(axis=(2, 3))[..., None, None]
    A[:, B // 10: B // 5] += np.eye(n)                                        # indefinite: LDL^T may break down
    b = rng.standard_normal((3, B, n))
    A, b = cp.asarray(A.astype(dtype)), cp.asarray(b.astype(dtype))
    runs = {}
    for whole in (False, True):
        monkeypatch.setattr(robust, "WHOLE_BATCH_MAX_N", 8 if whole else 0)
        memory, got = lg.SolverMemory(per_system=True), []
        for k in range(3):
            got.append(lg.solve_small(A[k], b[k], return_report=True, memory=memory, key="k", check_finite=False,
                                      assume_symmetric=True))
        got.append(lg.solve_small(A[0], b[0], return_report=True))
        runs[whole] = [(x.get(), {f: getattr(rep, f).get() for f in ("method_code", "residual", "n_discarded",
                                                                      "cond_estimate", "breakdown", "ok")})
                       for x, rep in got]
    used = set()
    for (xg, rg), (xw, rw) in zip(runs[False], runs[True], strict=True):
        np.testing.assert_array_equal(xw, xg)
        for f in rg:
            np.testing.assert_array_equal(rw[f], rg[f])
        used |= set(np.unique(rg["method_code"]).tolist())
    assert used >= {0, 2}


@pytest.mark.parametrize("with_start", [False, True])
def test_next_start_codes_match_numpy_twin(rng, with_start):
    """cuda/solve_flags.cu next_start_codes (a per-system SolverMemory's record) against its twin
    robust.next_start_codes on every combination of method code, discarded eigenvalues and start code; 300 001
    systems (the grid-stride loop goes round more than once)."""
    from linalg_gpu.small import robust

    B = 300_001
    code = rng.integers(0, 4, B).astype(np.int8)
    nd = (rng.random(B) < 0.3).astype(np.int32) * rng.integers(1, 4, B).astype(np.int32)
    start = rng.integers(0, 3, B).astype(np.int8) if with_start else None
    got = _gpu.next_start_codes(cp.asarray(code), cp.asarray(nd), None if start is None else cp.asarray(start))
    want = robust.next_start_codes(code, nd, start)
    assert got.dtype == np.int8 and set(np.unique(want)) == {0, 1, 2}
    np.testing.assert_array_equal(got.get(), want)
