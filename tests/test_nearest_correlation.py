"""The nearest correlation matrix (``market.repair_correlation``) against Higham's published example and a plain
numpy implementation of his algorithm (numpy's eigh in the projections), on random indefinite matrices; the
config's message without the flag, the repair in a run's summary and report."""

import numpy as np
import pytest

import cva
from cva.io.config import ConfigError, load_config
from cva.market.nearest_correlation import nearest_correlation

HIGHAM_A = np.array([[2, -1, 0, 0], [-1, 2, -1, 0], [0, -1, 2, -1], [0, 0, -1, 2]], dtype=float)
# Higham (2002), section 4: the nearest correlation matrix to HIGHAM_A, as printed (4 decimals)
HIGHAM_X = np.array([[1.0000, -0.8084, 0.1916, 0.1068], [-0.8084, 1.0000, -0.6562, 0.1916],
                     [0.1916, -0.6562, 1.0000, -0.8084], [0.1068, 0.1916, -0.8084, 1.0000]])


def higham_numpy(A, tol=1e-12, iterations=10_000):
    """Higham's alternating projections with Dykstra's correction, written plainly (numpy's eigh)."""
    Y, dS = A.copy(), np.zeros_like(A)
    for _ in range(iterations):
        R = Y - dS
        w, V = np.linalg.eigh(R)
        X = (V * np.maximum(w, 0)) @ V.T
        dS = X - R
        Y_new = X.copy()
        np.fill_diagonal(Y_new, 1.0)
        if np.linalg.norm(Y_new - Y) < tol * np.linalg.norm(Y_new):
            return Y_new
        Y = Y_new
    raise AssertionError("the reference did not converge")


def _is_correlation(C):
    assert np.array_equal(C, C.T) and np.all(np.diag(C) == 1.0)
    assert np.linalg.eigvalsh(C)[0] > -1e-13 and np.abs(C).max() <= 1.0 + 1e-15


def test_higham_s_example():
    r = nearest_correlation(HIGHAM_A)
    _is_correlation(r.matrix)
    np.testing.assert_allclose(r.matrix, HIGHAM_X, atol=5e-5)                    # the paper's 4 decimals
    assert r.distance == pytest.approx(np.linalg.norm(HIGHAM_X - HIGHAM_A), abs=5e-4)
    np.testing.assert_allclose(r.eigenvalues_before, np.linalg.eigvalsh(HIGHAM_A), rtol=1e-12)


@pytest.mark.parametrize("d", [5, 12, 30])
def test_random_indefinite_matrices_against_the_plain_algorithm(rng, d):
    for _ in range(200):               # a case to repair: the first indefinite draw (a small d may draw a PD one)
        B = rng.uniform(-1, 1, (d, d))
        B = 0.5 * (B + B.T)
        np.fill_diagonal(B, 1.0)
        if np.linalg.eigvalsh(B)[0] < -1e-3:
            break
    assert np.linalg.eigvalsh(B)[0] < -1e-3
    r = nearest_correlation(B)
    _is_correlation(r.matrix)
    ref = higham_numpy(B)
    assert r.distance <= np.linalg.norm(ref - B) * (1 + 1e-7) + 1e-9            # no farther than the reference
    np.testing.assert_allclose(r.matrix, ref, atol=1e-6)
    np.testing.assert_allclose(r.eigenvalues_before, np.linalg.eigvalsh(B), atol=1e-12)
    np.testing.assert_allclose(r.eigenvalues_after, np.linalg.eigvalsh(r.matrix), atol=1e-12)


def _config(tmp_path, repair, corr):
    return {"run": {"name": "r", "seed": 1, "backend": "cpu"},
            "market": {"spot": [100.0, 100.0, 100.0], "vol": [0.2, 0.25, 0.3], "rate": 0.03, "correlation": corr,
                       **({"repair_correlation": True} if repair else {})},
            "portfolio": [{"style": "european", "payoff": "call", "underlying": "basket", "strike": 100.0,
                           "maturity": 1.0}],
            "counterparty": {"recovery": 0.4, "hazard_rate": 0.02},
            "simulation": {"dates": 4, "outer_paths": 64, "inner_paths": 16, "pricing_paths": 100},
            "output": {"dir": str(tmp_path / "run")}}


BAD = [[1.0, 0.9, 0.7], [0.9, 1.0, 0.3], [0.7, 0.3, 1.0]]                       # smallest eigenvalue -0.0074


def test_the_config_says_how_to_repair_and_the_run_reports_it(tmp_path):
    with pytest.raises(ConfigError, match=r"market.correlation: correlation matrix is not positive semi-definite: "
                                          r"smallest eigenvalue -0.00735.*set market.repair_correlation: true"):
        load_config(_config(tmp_path, False, BAD))
    cfg = load_config(_config(tmp_path, True, BAD))
    C = np.asarray(cfg.market.correlation)
    _is_correlation(C)
    assert load_config(cfg.to_dict()).market.correlation == cfg.market.correlation     # repaired again, the same
    res = cva.run(cfg, progress=False)
    rep = res.summary["correlation_repair"]
    assert rep["eigenvalues_before"][0] == pytest.approx(np.linalg.eigvalsh(np.array(BAD))[0], rel=1e-10)
    assert rep["distance_frobenius"] == pytest.approx(np.linalg.norm(C - np.array(BAD)), rel=1e-12)
    assert "nearest correlation matrix" in (res.out_dir / "report.html").read_text()
    # a correlation that is fine is left alone, and an asymmetric one is still refused
    ok = load_config(_config(tmp_path, True, 0.3))
    assert ok.market.correlation == 0.3 and ok.market.correlation_repair is None
    with pytest.raises(ConfigError, match=r"market.correlation: correlation matrix is not symmetric"):
        load_config(_config(tmp_path, True, [[1.0, 0.5, 0.1], [0.4, 1.0, 0.2], [0.1, 0.2, 1.0]]))
