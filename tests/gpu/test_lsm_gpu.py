"""The GPU path of the market model and Longstaff-Schwartz against the numpy path on the same keys."""

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

from cva import basis, rng  # noqa: E402
from cva.lsm import _normal_equations, longstaff_schwartz  # noqa: E402
from cva.model import BlackScholes  # noqa: E402
from cva.products import Contract  # noqa: E402


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_paths_and_lsm_gpu_match_cpu(dtype):
    model = BlackScholes(spot=[100.0, 95.0, 105.0], vol=[0.2, 0.25, 0.3], dividend=0.02, rate=0.05,
                         correlation=0.3)
    c = Contract(style="bermudan", payoff="put", underlying="basket", strike=100.0, maturity=1.0, n_exercise=8)
    grid = np.concatenate([[0.0], c.exercise_times()])
    out = {}
    for xp in (np, cp):
        S = model.sample(grid, 40_000, seed=11, purpose="price", dtype=dtype, xp=xp, outer=(3, 4))  # (4, M, 8, 3)

        def psi(X, h):
            return basis.evaluate("quadratic", X, model.spot)

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
def test_normal_equations_gpu_match_float64_reference(dtype, shape, masked):
    """The GPU's normal equations (a contiguous copy of X^T into cuBLAS) against float64 sums on the CPU;
    with several sets, the first has no path in the money (A = I, b = 0)."""
    B, M, p = shape
    g = np.random.default_rng()
    X = g.standard_normal(shape).astype(dtype)
    V = g.standard_normal((B, M)).astype(dtype)
    mask = (g.random((B, M)) < 0.6) if masked else None
    empty = masked and B > 1                                   # (one set: its masked products are the test)
    if empty:
        mask[0] = False
    A, b = (cp.asnumpy(a) for a in _normal_equations(cp, cp.asarray(X), cp.asarray(V),
                                                     None if mask is None else cp.asarray(mask)))
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


def test_price_gpu_matches_cpu():
    import cva

    cfg = {"run": {"seed": 5}, "market": {"spot": 36.0, "vol": 0.2, "rate": 0.06},
           "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 40.0,
                          "maturity": 1.0, "exercise_dates": 50},
                         {"style": "european", "payoff": "put", "underlying": {"asset": 0}, "strike": 40.0,
                          "maturity": 1.0}],
           "simulation": {"basis": "laguerre", "pricing_paths": 50_000, "out_of_sample": True}}
    cpu = cva.price(cfg, backend="cpu")
    gpu = cva.price(cfg, backend="gpu")
    assert gpu.attrs["backend"].startswith("gpu")
    np.testing.assert_allclose(gpu["price"], cpu["price"], atol=0.3 * cpu["stderr"].max())      # see above
    np.testing.assert_allclose(gpu["price_oos"], cpu["price_oos"], atol=0.3 * cpu["stderr"].max())


def test_rng_device_arrays_used_by_model_are_on_device():
    z = rng.normals(1, "inner", (0, 2), (0, 3), 4, (5, 6), 2, dtype=np.float32, xp=cp)
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
