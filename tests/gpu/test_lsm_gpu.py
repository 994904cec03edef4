"""The GPU path of the market model and Longstaff-Schwartz against the numpy path on the same keys."""

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

from engine_testlib import (  # noqa: E402
    black_scholes_columns_against_each_contract,
    grouped_lsm_against_alone,
    stopped_cashflows_against_lsm,
)

from cva.engine import basis  # noqa: E402
from cva.engine.lsm import (  # noqa: E402
    _affine_fitted,
    _fused_fitted,
    _fused_normal_equations,
    _gram_normal_equations,
    _normal_equations,
    apply_policy,
    longstaff_schwartz,
)
from cva.instruments.products import Contract  # noqa: E402
from cva.market import rng as cva_rng  # noqa: E402  (the name rng is the fixture of tests/conftest.py)
from cva.market.model import BlackScholes  # noqa: E402
from linalg_gpu import strided  # noqa: E402


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("affine", [False, True])
def test_paths_and_lsm_gpu_match_cpu(dtype, affine):
    """The paths and the LSM price on the GPU against numpy on the same keys: a quadratic basis given as a
    plain function (psi formed on both), and the linear Basis (on the GPU from S itself, by strided
    products)."""
    model = BlackScholes(spot=[100.0, 95.0, 105.0], vol=[0.2, 0.25, 0.3], dividend=0.02, rate=0.05,
                         correlation=0.3)
    c = Contract(style="bermudan", payoff="put", underlying="basket", strike=100.0, maturity=1.0, n_exercise=8)
    grid = np.concatenate([[0.0], c.exercise_times()])
    out = {}
    for xp in (np, cp):
        S = model.sample(grid, 40_000, seed=11, purpose="price", dtype=dtype, xp=xp, outer=(3, 4))  # (4, M, 8, 3)

        def quadratic(X, h):
            return basis.evaluate("quadratic", X, model.spot)

        psi = basis.make_basis("linear", model.spot) if affine else quadratic
        res = longstaff_schwartz(S, c.exercise_times(), c.payoff_value, psi, model.rate, solver={"method": "auto"})
        out[xp.__name__] = (cp.asnumpy(S), cp.asnumpy(res.value), cp.asnumpy(res.stderr))
    (S0, v0, se0), (S1, v1, _) = out["numpy"], out["cupy"]
    tol = 1e-11 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(S1, S0, rtol=tol)
    # LSM is chaotic in its inputs: on the CPU, perturbing the paths by 1e-14 relative moved the Bermudan
    # put of test_price_gpu_matches_cpu by 0.08 stderr (one exercise flip changes every earlier regression);
    # the GPU's normals differ by a few ulp, so the prices agree to a fraction of the stderr, not to rounding
    np.testing.assert_allclose(v1, v0, atol=0.3 * se0.max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(5, 3000, 7), (1, 1 << 16, 5)])
@pytest.mark.parametrize("masked", [False, True])
def test_normal_equations_gpu_match_float64_reference(rng, dtype, shape, masked):
    """The GPU's normal equations of formed regressors (one fixed-order Gram of (X, V)) against float64 sums on the CPU;
    with several sets, the first has no path in the money (A = I, b = 0)."""
    B, M, p = shape
    g = rng                                                    # tests/conftest.py: a fixed seed per test
    X = g.standard_normal(shape).astype(dtype)
    V = g.standard_normal((B, M)).astype(dtype)
    mask = (g.random((B, M)) < 0.6) if masked else None
    empty = masked and B > 1                                   # (one set: its masked products are the test)
    if empty:
        mask[0] = False
    (A,), (b,) = ([cp.asnumpy(a) for a in xs] for xs in _gram_normal_equations(
        cp, cp.asarray(X), None, None, [cp.asarray(V)], None if mask is None else cp.asarray(mask)))
    w = np.ones((B, M)) if mask is None else mask.astype(float)
    A_ref = np.einsum("bm,bmi,bmj->bij", w, X.astype(float), X.astype(float)) / M
    b_ref = np.einsum("bm,bmi,bm->bi", w, X.astype(float), V.astype(float)) / M
    if empty:
        A_ref[0], b_ref[0] = np.eye(p), 0.0
    # sums of M products of entries ~1: error ~ sqrt(M) eps relative to the sums' scale (1)
    tol = 8 * np.sqrt(M) * np.finfo(dtype).eps
    np.testing.assert_allclose(A, A_ref, atol=tol)
    np.testing.assert_allclose(b, b_ref, atol=tol)
    assert A.dtype == dtype and b.dtype == dtype


# operands as the LSM passes them: a date's slice of (B, M, N, d) paths, a one-set slice, every other
# path of a slice, and a contiguous array
SLICES = [lambda S: S[:, :, 2], lambda S: S[2:3, :, 1], lambda S: S[:, ::2, 3], lambda S: S[:, :, 0].copy()]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_strided_products_match_numpy(rng, dtype):
    """linalg_gpu.strided (our kernels, or cuBLAS beyond four columns, on the slices as they lie) against numpy's
    matmul in float64, for shared and per-set right operands, weighted Gram matrices of a slice with further
    columns, and operands that fall back to cupy's matmul (reversed rows, a 2-D left operand)."""
    g = rng                                                    # tests/conftest.py: a fixed seed per test
    eps = np.finfo(dtype).eps
    S = g.standard_normal((5, 700, 4, 6)).astype(dtype)
    Sg = cp.asarray(S)
    for take in SLICES:
        a, ag = take(S).astype(float), take(Sg)
        B, M, k = a.shape
        for b in (g.standard_normal(k), g.standard_normal((k, 3)), g.standard_normal((B, k, 1)),
                  g.standard_normal((B, k, 2)), g.standard_normal((B, k, 4)), g.standard_normal((B, k, 7))):
            b = b.astype(dtype)
            _assert_sums_close(strided.matmul(ag, cp.asarray(b)), a @ b, np.abs(a) @ np.abs(b), k, eps)
        f = g.standard_normal((B, M, 3)).astype(dtype)
        w = (g.uniform(size=(B, M)) < 0.6).astype(dtype)
        for ff, ww in ((None, None), (f, None), (f, w), (None, w)):
            z = a if ff is None else np.concatenate([a, ff.astype(float)], axis=2)
            zw = z if ww is None else z * ww[..., None]
            G = strided.concat_gram(ag, None if ff is None else cp.asarray(ff), None if ww is None else cp.asarray(ww),
                                    alpha=0.25)
            zT = zw.transpose(0, 2, 1)
            _assert_sums_close(G, 0.25 * zT @ z, 0.25 * np.abs(zT) @ np.abs(z), M, eps)
            top = strided.concat_gram(ag, None if ff is None else cp.asarray(ff),
                                      None if ww is None else cp.asarray(ww), alpha=0.25, rows=k)
            assert bool((top == G[:, :k]).all())                          # the first rows alone: the same bits
    w = g.standard_normal(6).astype(dtype)
    for a, ag in ((S[:, ::-1, 0], Sg[:, ::-1, 0]), (S[0, :, 0], Sg[0, :, 0])):    # cupy's matmul
        a = a.astype(float)
        _assert_sums_close(strided.matmul(ag, cp.asarray(w)), a @ w, np.abs(a) @ np.abs(w), 6, eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [5, 31, 70])
def test_concat_gram_does_not_depend_on_the_batch(rng, dtype, n):
    """strided.concat_gram of a date's strided slice with further columns and weights (a warp per set at n = 5,
    more than one 32 x 32 tile at n = 70): the first B sets of a batch of 2B give bitwise what the B sets give
    alone; the weights as a boolean mask (read as 0 and 1 without a cast) give bitwise what their cast gives, and
    the further columns read as planes (e, B, M) what they give contiguous."""
    B, M, d = 300, 1000, n - 3
    S = cp.asarray(rng.standard_normal((2 * B, M, 3, d))).astype(dtype)
    f = cp.asarray(rng.standard_normal((2 * B, M, 3))).astype(dtype)
    mask = cp.asarray(rng.uniform(size=(2 * B, M)) < 0.5)
    w = mask.astype(dtype)
    full = strided.concat_gram(S[:, :, 1], f, w, alpha=1e-3)[:B]
    alone = strided.concat_gram(S[:B, :, 1], f[:B], w[:B], alpha=1e-3)
    assert full.shape == (B, n, n) and bool((full == alone).all())
    assert bool((strided.concat_gram(S[:B, :, 1], f[:B], w[:B], alpha=1e-3, rows=d) == full[:, :d]).all())
    masked = strided.concat_gram(S[:, :, 1], f, mask, alpha=1e-3)[:B]
    assert masked.dtype == dtype and bool((masked == full).all())
    planes = cp.ascontiguousarray(f.transpose(2, 0, 1))                    # the further columns as planes (e, B, M)
    assert bool((strided.concat_gram(S[:, :, 1], planes.transpose(1, 2, 0), w, alpha=1e-3)[:B] == full).all())
    assert bool((strided.concat_gram(S[:B, :, 1], f[:B], mask[:B], alpha=1e-3, rows=d) == full[:, :d]).all())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_gram_beyond_the_grid_and_with_ragged_rows(rng, dtype):
    """The warp-per-set Gram (n <= strided.SMALL_GRAM_COLUMNS): more sets than the grid has warps (its sets taken
    in turn), a path count that is no multiple of 32, weights, and the first rows alone bitwise the whole."""
    B, M = 4_300_000, 3
    S = rng.standard_normal((B, M, 2, 1)).astype(dtype)
    f = rng.standard_normal((B, M, 3)).astype(dtype)
    w = (rng.uniform(size=(B, M)) < 0.7).astype(dtype)
    G = strided.concat_gram(cp.asarray(S)[:, :, 1], cp.asarray(f), cp.asarray(w), alpha=0.5)
    z = np.concatenate([S[:, :, 1].astype(float), f.astype(float)], axis=2)
    zT = (z * w[..., None]).transpose(0, 2, 1)
    _assert_sums_close(G, 0.5 * zT @ z, 0.5 * np.abs(zT) @ np.abs(z), M, np.finfo(dtype).eps)
    top = strided.concat_gram(cp.asarray(S)[:, :, 1], cp.asarray(f), cp.asarray(w), alpha=0.5, rows=2)
    assert bool((top == G[:, :2]).all())
    S2, f2 = rng.standard_normal((64, 77, 1)).astype(dtype), rng.standard_normal((64, 77, 4)).astype(dtype)
    z = np.concatenate([S2, f2], axis=2).astype(float)
    _assert_sums_close(strided.concat_gram(cp.asarray(S2), cp.asarray(f2), rows=3), (z.transpose(0, 2, 1) @ z)[:, :3],
                       (np.abs(z).transpose(0, 2, 1) @ np.abs(z))[:, :3], 77, np.finfo(dtype).eps)


def _assert_sums_close(x, ref, size, n, eps):
    """x (device) against the float64 sums ref of n terms each, within 8 sqrt(n) eps of the sums of |terms|."""
    x = cp.asnumpy(x)
    assert x.shape == ref.shape
    assert np.all(np.abs(x - ref) <= 8 * np.sqrt(n) * eps * size), np.max(np.abs(x - ref) / size)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("payoff_regressor", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("one_scale", [False, True])
def test_gram_normal_equations_affine_gpu_match_float64_reference(rng, dtype, payoff_regressor, masked, one_scale):
    """The LSM's GPU assembly for the affine basis (our strided products, no psi formed) against the
    normal equations of the formed psi in float64 on the CPU, and its fitted values against psi beta;
    set 0 has no path in the money."""
    g = rng                                                    # tests/conftest.py: a fixed seed per test
    B, M, N, d = 6, 3000, 4, 29
    S = g.uniform(0.7, 1.3, (B, M, N, d))
    scale = np.full(d, 1.05) if one_scale else g.uniform(0.9, 1.1, d)
    psi = basis.make_basis("linear", scale, payoff_regressor)
    h = np.maximum(1.0 - S[:, :, 2].mean(axis=-1), 0)
    h[0] = 0.0
    V = g.standard_normal((B, M))
    mask = h > 0 if masked else None
    Sg = cp.asarray(S.astype(dtype))
    (A,), (b,) = ([cp.asnumpy(x) for x in xs] for xs in _gram_normal_equations(
        cp, Sg[:, :, 2], psi, cp.asarray(h.astype(dtype)), [cp.asarray(V.astype(dtype))],
        None if mask is None else cp.asarray(mask)))
    Sj = S.astype(dtype).astype(float)[:, :, 2]
    A_ref, b_ref = _normal_equations(np, psi(Sj, h.astype(dtype).astype(float)), V.astype(dtype).astype(float), mask)
    tol = 8 * np.sqrt(M) * np.finfo(dtype).eps * 2                    # entries of psi up to about 1.5
    np.testing.assert_allclose(A, A_ref, atol=tol)
    np.testing.assert_allclose(b, b_ref, atol=tol)
    beta = g.standard_normal((B, A.shape[1])).astype(dtype)
    C = cp.asnumpy(_affine_fitted(Sg[:, :, 2], psi, cp.asarray(h.astype(dtype)), [cp.asarray(beta)])[0])
    C_ref = (psi(Sj, h.astype(dtype).astype(float)) @ beta.astype(float)[..., None])[..., 0]
    np.testing.assert_allclose(C, C_ref, atol=8 * np.sqrt(d) * np.finfo(dtype).eps * np.abs(beta).sum(axis=1).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_apply_policy_affine_gpu_matches_formed_basis(dtype):
    """apply_policy on the GPU with the linear Basis (fitted values from S by strided products) against
    the same policy with psi formed (a plain function): the same cashflows but where a path's exercise
    value ties its fitted value to rounding."""
    model = BlackScholes(spot=[100.0, 95.0, 105.0], vol=[0.2, 0.25, 0.3], dividend=0.02, rate=0.05,
                         correlation=0.3)
    c = Contract(style="bermudan", payoff="put", underlying="basket", strike=100.0, maturity=1.0, n_exercise=8)
    grid = np.concatenate([[0.0], c.exercise_times()])
    psi = basis.make_basis("linear", model.spot)
    S = model.sample(grid, 20_000, seed=3, purpose="price", dtype=dtype, xp=cp, outer=(0, 2))
    policy = longstaff_schwartz(S, c.exercise_times(), c.payoff_value, psi, model.rate).coefficients
    S2 = model.sample(grid, 20_000, seed=4, purpose="price", dtype=dtype, xp=cp, outer=(0, 2))
    V1 = cp.asnumpy(apply_policy(S2, c.exercise_times(), policy, c.payoff_value, psi, model.rate))
    V0 = cp.asnumpy(apply_policy(S2, c.exercise_times(), policy, c.payoff_value, lambda X, h: psi(X, h), model.rate))
    same = np.isclose(V1, V0, rtol=16 * np.finfo(dtype).eps, atol=0)
    assert same.mean() > 0.999
    np.testing.assert_allclose(V1.mean(axis=1), V0.mean(axis=1), rtol=1e-3)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_price_gpu_matches_cpu(dtype):
    """The Laguerre put on the GPU against the CPU in float64; in float32 with ``regression.dtype: auto``
    (float64 regressions on float32 paths), against the same float64 CPU price."""
    import cva

    cfg = {"run": {"seed": 5}, "market": {"spot": 36.0, "vol": 0.2, "rate": 0.06},
           "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 40.0,
                          "maturity": 1.0, "exercise_dates": 50},
                         {"style": "european", "payoff": "put", "underlying": {"asset": 0}, "strike": 40.0,
                          "maturity": 1.0}],
           "simulation": {"basis": "laguerre", "pricing_paths": 50_000, "out_of_sample": True}}
    cpu = cva.price(cfg, backend="cpu")
    cfg["run"]["dtype"] = dtype
    gpu = cva.price(cfg, backend="gpu")
    assert gpu.attrs["backend"].startswith("gpu") and gpu.attrs["dtype"] == dtype
    assert gpu.attrs["regression_dtype"] == "float64"
    np.testing.assert_allclose(gpu["price"], cpu["price"], atol=0.3 * cpu["stderr"].max())      # see above
    np.testing.assert_allclose(gpu["price_oos"], cpu["price_oos"], atol=0.3 * cpu["stderr"].max())


def test_rng_device_arrays_used_by_model_are_on_device():
    z = cva_rng.normals(1, "inner", (0, 2), (0, 3), 4, (5, 6), 2, dtype=np.float32, xp=cp)
    assert isinstance(z, cp.ndarray) and z.shape == (2, 3, 6, 2) and z.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("corr", [0.0, 0.6])
def test_lognormal_paths_kernel_matches_numpy(dtype, corr):
    """cuda/lognormal_paths.cu against the numpy cumsum twin, for every start broadcast the code uses."""
    r = np.random.default_rng(5)
    m = BlackScholes(spot=[1.0, 2.0, 3.0], vol=[0.1, 0.2, 0.3], dividend=0.01, rate=0.05, correlation=corr)
    times = np.concatenate([[0.0], np.sort(r.uniform(0.1, 2.0, 6))])
    z = r.standard_normal((5, 7, 6, 3)).astype(dtype)
    tol = 1e-12 if dtype == np.float64 else 3e-6
    for start in (m.spot, r.uniform(0.5, 2, (5, 1, 3)), r.uniform(0.5, 2, (5, 7, 3))):
        ref = m.paths(start, times, z)
        got = m.paths(cp.asarray(start), times, cp.asarray(z))
        np.testing.assert_allclose(cp.asnumpy(got), ref, rtol=tol)
    np.testing.assert_allclose(cp.asnumpy(m.paths(m.spot, times, cp.asarray(z[0]))), m.paths(m.spot, times, z[0]),
                               rtol=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_factor_model_paths_on_the_gpu_are_the_numpy_ones(dtype):
    """market.factors: k normals per step drive d assets through the KLT loading, on the GPU as in numpy."""
    from cva.market.factors import klt_factors

    g = np.random.default_rng(3)
    F = g.standard_normal((12, 3))
    S = F @ F.T + np.eye(12)
    C = S / np.sqrt(np.outer(np.diag(S), np.diag(S)))
    f = klt_factors(C, 4)
    m = BlackScholes(spot=np.linspace(50, 150, 12), vol=np.linspace(0.1, 0.4, 12), dividend=0.01, rate=0.03,
                     correlation=f.correlation, loading=f.loading)
    times = np.array([0.0, 0.25, 0.5, 1.0])
    cpu = m.sample(times, 16, seed=6, purpose="inner", outer=(3, 5), dtype=dtype)
    gpu = m.sample(times, 16, seed=6, purpose="inner", outer=(3, 5), dtype=dtype, xp=cp)
    assert gpu.shape == (5, 16, 3, 12)
    np.testing.assert_allclose(cp.asnumpy(gpu), cpu, rtol=1e-12 if dtype == np.float64 else 3e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2048, 128, 4), (1024, 1024, 30), (300, 7, 1), (200, 100, 70)])
def test_matrix_vector_products_do_not_depend_on_the_batch(rng, dtype, shape):
    """strided.matmul of a vector per set: the first B sets of a batch of 2B give bitwise what the B sets give
    alone (cuBLAS's batched GEMV did not at 2048 x 128 x 4), on contiguous sets and on a date's strided slice,
    and match a float64 product to the float32 / float64 rounding of a k-term sum."""
    B, M, k = shape
    S = cp.asarray(rng.standard_normal((2 * B, M, 3, k))).astype(dtype)          # a date's slice is S[:, :, 1]
    w = cp.asarray(rng.standard_normal((2 * B, k, 1))).astype(dtype)
    for a in (cp.ascontiguousarray(S[:, :, 1]), S[:, :, 1]):
        full = strided.matmul(a, w)[:B]
        alone = strided.matmul(a[:B], w[:B])
        assert bool((full == alone).all())
        ref = np.einsum("bmk,bk->bm", cp.asnumpy(a[:B]).astype(np.float64), cp.asnumpy(w[:B, :, 0]).astype(np.float64))
        bound = 2 * k * np.finfo(dtype).eps * np.einsum("bmk,bk->bm", np.abs(cp.asnumpy(a[:B]).astype(np.float64)),
                                                         np.abs(cp.asnumpy(w[:B, :, 0]).astype(np.float64)))
        assert np.all(np.abs(cp.asnumpy(full)[..., 0] - ref) <= bound)


def test_value_cube_does_not_depend_on_the_chunk_size():
    """The engine's value cube of the first outer paths from a chunk of 4096 and from one of 2048: bitwise the
    same. Two Bermudans on the two assets of a correlated market, 128 inner paths, the halves of the
    extrapolated estimator. (The second asset's paths once differed in their last bits between the chunk
    sizes: cuBLAS mixed the correlated normals with kernels chosen by the batch size; the path kernel now mixes
    them in a fixed order.)"""
    from cva.engine import nested
    from cva.engine.plan import build_plan
    from cva.io.config import load_config

    cfg = load_config({
        "run": {"name": "bits", "seed": 1, "backend": "gpu", "dtype": "float32"},
        "market": {"spot": [100.0, 90.0], "vol": [0.2, 0.3], "rate": 0.05, "correlation": 0.3},
        "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0,
                       "maturity": 1.0, "exercise_dates": 12},
                      {"style": "bermudan", "payoff": "call", "underlying": {"asset": 1}, "strike": 90.0,
                       "maturity": 1.0, "exercise_dates": 12}],
        "counterparty": {"recovery": 0.4, "hazard_rate": 0.02},
        "simulation": {"dates": 12, "outer_paths": 4096, "inner_paths": 128, "basis": "linear"}})
    plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)
    big, small = (nested.chunk_values(cfg, plan, model, cp, 0, n, nested.DateStats(len(plan.grid)), None, splits=1)
                  for n in (4096, 2048))
    assert np.array_equal(big[:, :2048], small)


@pytest.mark.parametrize("loading", [False, True])
def test_correlated_paths_do_not_depend_on_the_batch(loading):
    """Correlated (or factor-driven) paths of the first 2048 outer keys: bitwise the same drawn with 4096."""
    from cva.market.factors import klt_factors

    C = np.full((6, 6), 0.4) + 0.6 * np.eye(6)
    B = klt_factors(C, 3).loading if loading else None
    m = BlackScholes(spot=np.linspace(50, 150, 6), vol=np.linspace(0.1, 0.4, 6), dividend=0.0, rate=0.03,
                     correlation=B @ B.T if loading else C, loading=B)
    times = np.linspace(0.0, 1.0, 9)
    big, small = (m.sample(times, 64, seed=3, purpose="inner", outer=(0, n), dtype=np.float32, xp=cp)
                  for n in (4096, 2048))
    assert bool(cp.array_equal(big[:2048], small))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("payoff_regressor", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_laguerre_kernels_match_float64_reference(rng, dtype, payoff_regressor, masked):
    """The Laguerre basis's GPU assembly and fitted values (psi evaluated in the kernels, from a date's strided
    slice) against psi formed by basis.evaluate and its normal equations in float64 on the CPU; set 0 has no path
    in the money (A = I, b = 0 when masked); the first B sets of 2B give bitwise what B sets give alone."""
    B, M, N = 6, 3000, 4
    S = rng.uniform(70.0, 130.0, (2 * B, M, N, 1))
    psi = basis.make_basis("laguerre", [100.0], payoff_regressor)
    h = np.maximum(100.0 - S[:, :, 2, 0], 0)
    h[0] = 0.0
    V = rng.uniform(0.0, 30.0, (2 * B, M))
    mask = h > 0 if masked else None
    Sg, hg, Vg = cp.asarray(S.astype(dtype)), cp.asarray(h.astype(dtype)), cp.asarray(V.astype(dtype))
    mg = None if mask is None else cp.asarray(mask)
    A, b = (cp.asnumpy(x)[:B] for x in _fused_normal_equations(Sg[:, :, 2], psi, hg, Vg, mg))
    A1, b1 = (cp.asnumpy(x) for x in _fused_normal_equations(Sg[:B, :, 2], psi, hg[:B], Vg[:B],
                                                             None if mg is None else mg[:B]))
    assert np.array_equal(A, A1) and np.array_equal(b, b1)
    Sj, hf, Vf = (x.astype(dtype).astype(float)[:B] for x in (S[:, :, 2], h, V))
    A_ref, b_ref = _normal_equations(np, psi(Sj, hf), Vf, None if mask is None else mask[:B])
    tol = 8 * np.sqrt(M) * np.finfo(dtype).eps * 2                    # psi's entries below 2 (h / 100 below 0.3)
    np.testing.assert_allclose(A, A_ref, atol=tol)
    np.testing.assert_allclose(b, b_ref, atol=tol * 30)                # V up to 30
    if masked:
        assert np.array_equal(A[0], np.eye(A.shape[1])) and not b[0].any()
    beta = rng.standard_normal((2 * B, A.shape[1])).astype(dtype)
    C = cp.asnumpy(_fused_fitted(Sg[:, :, 2], psi, hg, cp.asarray(beta)))
    assert np.array_equal(C[:B], cp.asnumpy(_fused_fitted(Sg[:B, :, 2], psi, hg[:B], cp.asarray(beta[:B]))))
    C_ref = (psi(Sj, hf) @ beta[:B].astype(float)[..., None])[..., 0]
    np.testing.assert_allclose(C[:B], C_ref, atol=16 * np.finfo(dtype).eps * np.abs(beta).sum(axis=1).max())


@pytest.mark.parametrize("splits", [0, 2])
def test_laguerre_lsm_gpu_matches_cpu(splits):
    """Longstaff & Schwartz's put (S0 36, K 40, 50 dates, laguerre) on the GPU (psi in the kernels) against numpy
    on the same keys, the whole sets and their parts, within a fraction of the standard error."""
    model = BlackScholes(spot=[36.0], vol=[0.2], dividend=0.0, rate=0.06, correlation=0.0)
    c = Contract(style="bermudan", payoff="put", underlying="asset", strike=40.0, maturity=1.0, n_exercise=50, asset=0)
    grid = np.concatenate([[0.0], c.exercise_times()])
    psi = basis.make_basis("laguerre", model.spot)
    out = {}
    for xp in (np, cp):
        S = model.sample(grid, 8192, seed=5, purpose="price", dtype=np.float32, xp=xp, outer=(0, 3))
        res = longstaff_schwartz(S, c.exercise_times(), c.payoff_value, psi, model.rate, solver={"method": "auto"},
                                 regression_dtype=np.float64, splits=splits)
        out[xp.__name__] = (cp.asnumpy(res.value), cp.asnumpy(res.stderr), [cp.asnumpy(p) for p in res.parts])
    (v0, se0, p0), (v1, _, p1) = out["numpy"], out["cupy"]
    np.testing.assert_allclose(v1, v0, atol=0.3 * se0.max())
    for a, b in zip(p1, p0, strict=True):
        np.testing.assert_allclose(a, b, atol=0.3 * se0.max() * np.sqrt(a.shape[1]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, payoff_regressor", [("linear", False), ("linear", True), ("quadratic", True)])
@pytest.mark.parametrize("splits", [0, 1])
def test_a_scale_per_group_is_each_groups_own_basis_gpu(dtype, name, payoff_regressor, splits):
    """The affine (strided Gram) and formed-basis GPU paths with a basis scale per group of sets: each group
    bitwise as its own call (:func:`engine_testlib.grouped_lsm_against_alone`)."""
    grouped_lsm_against_alone(cp, dtype, name, payoff_regressor, splits)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_black_scholes_columns_are_each_contract_gpu(dtype):
    black_scholes_columns_against_each_contract(cp, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("dates", [False, True])
def test_stacked_payoff_kernel_is_the_numpy_operations(rng, dtype, dates):
    """cva/instruments/cuda/vanilla_payoff.cu (stacked_payoff on the GPU) against the numpy operations it replaces,
    and against CuPy's same four operations: bitwise, on an asset's slice of paths as it lies (one date: (B, M); all
    dates: (B, M, N)), with strides not float32-representable, prices equal to a strike (+0), NaN and infinities."""
    from cva.instruments.products import stacked_payoff

    contracts = [Contract(style="european", payoff=p, underlying="asset", strike=k, maturity=1.0, asset=0)
                 for p, k in (("call", 100.1), ("put", 99.7), ("call", 1.0 / 3.0), ("put", 77.0))]
    sets, M, N, d = 3, 50, 4, 2
    S = rng.lognormal(np.log(90), 0.3, (len(contracts) * sets, M, N, d)).astype(dtype)
    S[:sets, :5, :, 1] = dtype(100.1)                                       # = the call's strike (rounded)
    S[sets, 5, :, 1], S[sets + 1, 6, :, 1], S[-1, 7, :, 1] = np.nan, np.inf, -np.inf
    view = (lambda a: a[:, :, 2, 1:]) if not dates else (lambda a: a[:, :, :, 1:])     # (B, M, 1) / (B, M, N, 1)
    want = stacked_payoff(contracts, sets, np)(view(S))
    Sg = cp.asarray(S)
    got = stacked_payoff(contracts, sets, cp)(view(Sg))
    assert got.dtype == dtype and got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got.get(), want)
    assert np.signbit(want[np.isfinite(want)]).sum() == 0 and (want == 0).any() and np.isnan(want).any()
    U = view(Sg)[..., 0]                                                    # CuPy's four operations, as before
    K = cp.asarray(np.repeat([c.strike for c in contracts], sets))[:, None].astype(dtype)
    c = cp.asarray(np.repeat([ct.payoff == "call" for ct in contracts], sets))[:, None]
    k, c = (K, c) if U.ndim == 2 else (K[:, :, None], c[:, :, None])
    np.testing.assert_array_equal(got.get(), cp.maximum(cp.where(c, U - k, k - U), 0).get())


@pytest.mark.parametrize("dtype, regression_dtype", [(np.float64, None), (np.float32, None),
                                                     (np.float32, np.float64)])
@pytest.mark.parametrize("name, splits", [("linear", 0), ("linear", 2), ("quadratic", 1)])
@pytest.mark.parametrize("vanilla", [False, True])
def test_stopped_cashflows_at_the_lsm_exercise_dates_gpu(dtype, regression_dtype, name, splits, vanilla):
    """The GPU's LSM (affine: the strided Gram and fitted values; quadratic: the formed basis) and the cashflows at
    its kept exercise dates, by the loop over the dates and by the kernel, bitwise
    (:func:`engine_testlib.stopped_cashflows_against_lsm`)."""
    stopped_cashflows_against_lsm(cp, dtype, name, splits, regression_dtype, vanilla)


@pytest.mark.parametrize("dtype, regression_dtype", [(np.float64, np.float64), (np.float32, np.float32),
                                                     (np.float32, np.float64)])
@pytest.mark.parametrize("index", [np.uint8, np.uint16, np.int32])
def test_stopped_cashflows_kernel_is_the_loop(rng, dtype, regression_dtype, index):
    """``cuda/stopped_cashflows.cu`` against the loop over the dates (its numpy twin) on the same device arrays:
    calls and puts, strikes at and away from the prices, three depths of random exercise dates, an asset's slice
    read through its strides (every other date of a 3-asset array), bitwise."""
    from cva.engine.lsm import stopped_cashflows

    B, M, N = 37, 300, 6
    full = cp.asarray((60 + 80 * rng.random((B, M, 2 * N, 3))).astype(dtype))
    S = full[:, :, ::2, 1:2]                                                      # (B, M, N, 1), strided
    strikes = np.round(60 + 80 * rng.random(B), 1)
    strikes[0] = float(cp.asnumpy(S[0, 0, N - 1, 0]))                             # a price exactly at the strike
    calls = rng.random(B) < 0.5
    K = cp.asarray(strikes)[:, None]
    c = cp.asarray(calls)[:, None]

    def payoff(X):
        U = X[..., 0]
        k, cc = (K.astype(U.dtype), c) if U.ndim == 2 else (K.astype(U.dtype)[:, :, None], c[:, :, None])
        return cp.where(cc, cp.maximum(U - k, 0), cp.maximum(k - U, 0))

    stopping = [cp.asarray(rng.integers(0, N, (B, M)).astype(index)) for _ in range(3)]
    times = np.array([0.2, 0.35, 0.5, 0.8, 0.9, 1.4])
    kw = dict(t0=0.05, regression_dtype=regression_dtype)
    loop = stopped_cashflows(S, times, stopping, payoff, 0.04, **kw)
    kernel = stopped_cashflows(S, times, stopping, payoff, 0.04, vanilla=(strikes, calls), **kw)
    for a, b in zip([loop.value, loop.stderr, loop.cashflow] + loop.parts,
                    [kernel.value, kernel.stderr, kernel.cashflow] + kernel.parts, strict=True):
        np.testing.assert_array_equal(cp.asnumpy(a), cp.asnumpy(b))
    assert float(cp.count_nonzero(loop.cashflow)) > 0.3 * B * M


@pytest.mark.parametrize("dtype, rdt", [(np.float32, np.float32), (np.float32, np.float64), (np.float64, np.float64)])
@pytest.mark.parametrize("d, groups, payoff_regressor", [(1, 1, False), (1, 3, True), (2, 1, True), (3, 3, False)])
@pytest.mark.parametrize("depths", [1, 3])
def test_affine_exercise_kernel_is_its_twin(rng, dtype, rdt, d, groups, payoff_regressor, depths):
    """cuda/affine_exercise.cu (lsm._AffineStep) against lsm.affine_exercise_twin, the kernels it replaced one by
    one: bitwise the same cashflows, exercise dates and decisions of depth 0, for one scale or one per group of
    sets, with and without the payoff column, a discount to the next date or none, on a slice read through its
    strides (a date of S (B, M, N, d)); some paths exercise and some do not. Counting instead of writing the
    decisions (``count``): each set's number of them added, the same cashflows."""
    from cva.engine.lsm import _AffineStep, affine_exercise_twin

    B, M, N, j = 6, 64, 5, 2
    scale = rng.uniform(50, 150, (groups, d)) if groups > 1 else rng.uniform(50, 150, d)
    psi = basis.make_basis("linear", scale, payoff_regressor)
    S = cp.asarray(rng.uniform(0.5, 1.5, (B, M, N, d)) * (scale.reshape(-1, 1, 1, d).repeat(B // groups, 0)
                                                          if groups > 1 else scale)).astype(dtype)
    h = cp.maximum(100.0 - S[:, :, j].astype(rdt).mean(axis=2), 0).astype(rdt)
    p = d + 1 + payoff_regressor
    beta = cp.asarray(rng.normal(0, [10] + [5] * (p - 1), (B * (2 ** depths - 1), p))).astype(rdt)
    beta[:, 0] += 20
    V0 = cp.asarray(rng.uniform(0, 30, (B, M))).astype(dtype)
    stop0 = cp.full((B, M), N - 1, dtype=np.uint8)
    for disc in (None, 0.97):
        step = _AffineStep(S, psi, np.dtype(rdt), [V0] * depths, [stop0] * depths)
        ex = step(S[:, :, j], h, beta, j, None if disc is None else dtype(disc))
        V, stop = cp.stack([V0] * depths), cp.stack([stop0] * depths)
        betas = cp.split(beta, [B * (2 ** k - 1) for k in range(1, depths)])
        want = affine_exercise_twin(S[:, :, j], psi, h, betas, V, stop, j, disc)
        assert want.any() and not want.all()
        np.testing.assert_array_equal(ex.get(), want.get())
        np.testing.assert_array_equal(step.V.get(), V.get())
        np.testing.assert_array_equal(step.stop.get(), stop.get())
        count = cp.full(B, 7, dtype=np.uint64)                            # (added to)
        counted = _AffineStep(S, psi, np.dtype(rdt), [V0] * depths, [stop0] * depths)
        assert counted(S[:, :, j], h, beta, j, None if disc is None else dtype(disc), count=count) is None
        np.testing.assert_array_equal(count.get(), 7 + want.sum(axis=1).get())   # each set's exercises of depth 0
        np.testing.assert_array_equal(counted.V.get(), V.get())


def test_affine_exercise_counts_where_warps_straddle_sets(rng):
    """The affine step's per-set exercise counts (``count``) when a warp's lanes belong to two or three sets (37
    paths per set) or to seven (5 paths per set, 2^17 sets): each set's count its decisions' sum."""
    from cva.engine.lsm import _AffineStep

    psi = basis.make_basis("linear", np.array([100.0]))
    for B, M in ((50, 37), (2 ** 17, 5)):
        S = cp.asarray(rng.uniform(60, 140, (B, M, 3, 1)))
        h = cp.maximum(100.0 - S[:, :, 1, 0], 0)
        beta = cp.asarray(rng.normal([5.0, 0.0], [5.0, 5.0], (B, 2)))
        V0 = cp.asarray(rng.uniform(0, 30, (B, M)))
        ex = _AffineStep(S, psi, np.dtype(np.float64), [V0], [])(S[:, :, 1], h, beta, 1, None)
        count = cp.zeros(B, dtype=np.uint64)
        _AffineStep(S, psi, np.dtype(np.float64), [V0], [])(S[:, :, 1], h, beta, 1, None, count=count)
        want = ex.sum(axis=1).get()
        assert 0 < want.sum() < B * M
        np.testing.assert_array_equal(count.get(), want)


def test_affine_exercise_without_exercise_dates_kept_beyond_256_dates(rng):
    """The affine step without the exercise dates kept (stop None, the default of longstaff_schwartz) at a date
    index above 255 (no uint8 date then): the kernel is its twin, and so is a whole call of 300 dates."""
    from cva.engine.lsm import _AffineStep, affine_exercise_twin

    B, M, N, j = 4, 64, 300, 290
    psi = basis.make_basis("linear", np.array([100.0]))
    S = cp.asarray(rng.uniform(60, 140, (B, M, N, 1)))
    h = cp.maximum(100.0 - S[:, :, j, 0], 0)
    beta = cp.asarray(rng.normal(0, 5, (B, 2)) + [15.0, 0.0])
    V0 = cp.asarray(rng.uniform(0, 30, (B, M)))
    step = _AffineStep(S, psi, np.dtype(np.float64), [V0], [])
    ex = step(S[:, :, j], h, beta, j, 0.99)
    V = cp.stack([V0])
    want = affine_exercise_twin(S[:, :, j], psi, h, [beta], V, None, j, 0.99)
    assert want.any() and not want.all()
    np.testing.assert_array_equal(ex.get(), want.get())
    np.testing.assert_array_equal(step.V.get(), V.get())
    put = Contract(style="bermudan", payoff="put", underlying="asset", asset=0, strike=100.0, maturity=3.0,
                   n_exercise=N)
    got = longstaff_schwartz(S, put.exercise_times(), put.payoff_value, psi, 0.03)
    assert np.isfinite(float(got.value[0])) and got.exercised.shape == (N,)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d, extra, groups", [(1, 1, 1), (1, 2, 3), (3, 2, 1), (29, 1, 1), (2, 0, 1)])
@pytest.mark.parametrize("splits", [0, 1, 2])
def test_gram_equations_kernel_is_its_twin(rng, dtype, d, extra, groups, splits):
    """cuda/gram_equations.cu against lsm.gram_equations_twin (the gathers, means, products and selections it
    replaced): bitwise the same A and b of every depth, from a Gram matrix of the finest parts' rows, for psi's
    order of an affine basis (extra > 0: the column of ones, and the payoff's) or formed regressors (extra 0, no
    scale), one scale or one per group of sets; with the empty-part rule, some parts have A_00 = 0 (all their
    finest parts weigh 0, or only some)."""
    from cva.engine.lsm import _gram_equations_gpu, gram_equations_twin

    B, n = 6, 2 ** splits
    v0 = d + extra
    cols = v0 + splits + 1
    idx = list(range(d)) if extra == 0 else [d, *range(d), *range(d + 1, v0)]
    G = rng.standard_normal((B * n, v0, cols)).astype(dtype)
    if extra:
        G[:, d, d] = rng.uniform(0.1, 1.0, B * n).astype(dtype)               # the parts' weights
        G[:n, d, d] = 0                                                     # set 0: every finest part empty
        G[n, d, d] = 0                                                      # set 1: its first finest part only
    scale = None
    if extra:
        rows = rng.uniform(0.005, 0.02, (groups, len(idx))).astype(dtype)
        rows[:, 0] = 1
        scale = cp.asarray(rows)
    zero = None
    for empty in ([False, True] if extra else [False]):                      # (False first: zero is its A_00 = 0)
        A, b = _gram_equations_gpu(cp.asarray(G), cp.asarray(np.asarray(idx, dtype=np.int32)), v0, splits, B, scale,
                                   empty)
        A_t, b_t = gram_equations_twin(G, idx, v0, splits, B, None if scale is None else scale.get(), empty)
        assert A.shape == A_t.shape == (B * (2 * n - 1), len(idx), len(idx)) and b.shape == b_t.shape
        np.testing.assert_array_equal(A.get(), A_t)
        np.testing.assert_array_equal(b.get(), b_t)
        zero = A_t[:, 0, 0] == 0 if zero is None else zero        # set 0's 2n - 1 parts, set 1's first finest
        assert zero.sum() == (2 * n if extra else 0)
        if empty:
            np.testing.assert_array_equal(A_t[zero], np.broadcast_to(np.eye(len(idx)), A_t[zero].shape))
            assert not b_t[zero].any() and (A_t[~zero][:, 0, 0] != 0).all()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d, dates, assets, M, basis_name", [
    (4, [0, 1, 2, 3], [2, 0, 2, 1], 64, "linear"), (4, [0, 2, 3], [1, 3], 40, "linear"), (4, [1, 3], [0], 64, "linear"),
    (3, [0, 1, 3], [2, 0, 1], 40, "linear"), (4, [0, 1, 2, 3], [2, 0, 2, 1], 64, "quadratic"),
    (3, [0, 1, 3], [2, 0, 1], 40, "quadratic"), (5, [0, 2, 3], [4, 1, 4], 96, "quadratic")])
def test_a_stacks_date_major_slices_are_the_twins_and_price_as_them(rng, dtype, d, dates, assets, M, basis_name):
    """cva/engine/cuda/asset_steps.cu: a stack's slices gathered date-major from inner paths read through their
    strides are bitwise the numpy twin's, each date's slice one contiguous block; and Longstaff-Schwartz on the
    date-major view (values, parts, cashflows, exercise dates; then the cashflows at those dates, the kept-policy
    kernel) is bitwise the same calls on a path-major copy. M = 40: a block's last 32 paths are 8; d = 3 and 5: a
    tile's pitch is d itself (d + 1 for even d); quadratic: more columns than the linear basis (the Laguerre basis
    needs a market of one asset: never stacked)."""
    from cva.engine.lsm import stopped_cashflows
    from cva.engine.nested import _asset_steps, asset_steps_twin
    from cva.instruments.products import stacked_payoff

    L, T = 5, 4
    model = BlackScholes(spot=[100.0, 90.0, 110.0, 95.0, 105.0][:d], vol=[0.2, 0.3, 0.25, 0.35, 0.3][:d],
                         dividend=0.01, rate=0.03, correlation=0.4)
    S = model.sample(np.arange(T + 1) * 0.25, 2 * M, seed=3, purpose="inner", outer=(0, L), dtype=dtype)
    idx = np.asarray(dates)
    Sg = cp.asarray(S)[:, ::2]                                               # (L, M, T, d), paths 2 apart
    got = _asset_steps(Sg, idx, assets, cp)
    want = asset_steps_twin(S[:, ::2], idx, assets)
    assert got.shape == want.shape == (len(assets) * L, M, len(dates), 1) and got.dtype == dtype
    np.testing.assert_array_equal(got.get(), want)
    assert all(got[:, :, j].flags.c_contiguous for j in range(len(dates)))
    contracts = [Contract(style="bermudan", payoff=("put", "call")[i % 2], underlying="asset", asset=a,
                          strike=model.spot[a] * (0.95 + 0.05 * i), maturity=1.0, n_exercise=len(dates))
                 for i, a in enumerate(assets)]
    payoff = stacked_payoff(contracts, L, cp)
    scale = np.asarray(model.spot)[assets][:, None] if len(set(assets)) > 1 else model.spot[assets[0]:assets[0] + 1]
    psi = basis.make_basis(basis_name, scale, True, False)
    times = 0.25 * (idx + 1.0)
    vanilla = (np.repeat([c.strike for c in contracts], L), np.repeat([c.payoff == "call" for c in contracts], L))
    runs = []
    for paths in (got, cp.asarray(want)):
        res = longstaff_schwartz(paths, times, payoff, psi, model.rate, splits=2, keep_stopping=True)
        kept = stopped_cashflows(paths, times, res.stopping, payoff, model.rate, vanilla=vanilla)
        runs.append([res.value, res.cashflow, *res.parts, *res.stopping, kept.value, *kept.parts])
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a.get(), b.get())


@pytest.mark.parametrize("dtype, d", [(np.float32, 383), (np.float32, 384), (np.float64, 191), (np.float64, 192)])
def test_a_stacks_slices_at_the_shared_memory_bound_are_the_twins(rng, dtype, d):
    """On either side of the tile's 48 KB bound (d = 383 | 384 in float32, 191 | 192 in float64): the kernel's
    date-major values, or the twin's gathers where the tile would not fit, bitwise the numpy twin's."""
    from cva.engine.nested import _asset_steps, asset_steps_twin

    S = rng.standard_normal((2, 33, 3, d)).astype(dtype)
    idx, assets = np.asarray([0, 2]), [d - 1, 0, d // 2]
    got = _asset_steps(cp.asarray(S), idx, assets, cp)
    want = asset_steps_twin(S, idx, assets)
    assert got.shape == want.shape == (3 * 2, 33, 2, 1)
    np.testing.assert_array_equal(got.get(), want)
