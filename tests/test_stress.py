"""Stress against base by the GSVD of the covariance factors: the variance ratios and directions against
scipy's generalized symmetric eigen-solve of the two covariances; ``cva analyze stress`` and its errors."""

import json

import numpy as np
import pytest
import scipy.linalg as sl
import yaml

from cva.cli import main
from cva.market.model import BlackScholes
from cva.market.stress import stress_directions


def _random_market(rng, d):
    X = rng.standard_normal((d, d + 3))
    C = X @ X.T
    s = 1 / np.sqrt(np.diag(C))
    return BlackScholes(spot=np.ones(d), vol=rng.uniform(0.1, 0.5, d), dividend=0.0, rate=0.0,
                        correlation=C * s[:, None] * s[None, :])


def _cov(m):
    return np.diag(m.vol) @ m.correlation @ np.diag(m.vol)


@pytest.mark.parametrize("d", [2, 5, 12])
def test_against_the_generalized_eigen_solve(rng, d):
    base, stress = _random_market(rng, d), _random_market(rng, d)
    res = stress_directions(base, stress)
    Sb, Ss = _cov(base), _cov(stress)
    w, V = sl.eigh(Ss, Sb)                                                     # ascending, V^T Sb V = I
    np.testing.assert_allclose(res.ratios, w[::-1], rtol=1e-9)
    Z = res.directions
    np.testing.assert_allclose(np.einsum("ij,ik,kj->j", Z, Sb, Z), 1.0, rtol=1e-10)      # base volatility 1
    np.testing.assert_allclose(np.einsum("ij,ik,kj->j", Z, Ss, Z), res.ratios, rtol=1e-9)  # its stressed variance
    gaps = np.abs(np.diff(w[::-1]))
    distinct = np.ones(d, dtype=bool)
    distinct[:-1] &= gaps > 1e-6
    distinct[1:] &= gaps > 1e-6
    cos = np.abs(np.einsum("ij,ik,kj->j", Z, Sb, V[:, ::-1]))
    np.testing.assert_allclose(cos[distinct], 1.0, rtol=1e-7)                   # the same directions


def test_a_stress_that_scales_every_vol_scales_every_direction(rng):
    base = _random_market(rng, 4)
    stress = BlackScholes(spot=base.spot, vol=1.5 * base.vol, dividend=0.0, rate=0.0, correlation=base.correlation)
    np.testing.assert_allclose(stress_directions(base, stress).ratios, 2.25, rtol=1e-10)


def _config(path, vol, corr):
    cfg = {"market": {"spot": [100.0, 100.0, 100.0], "vol": vol, "correlation": corr},
           "portfolio": [{"style": "european", "payoff": "call", "underlying": "basket", "strike": 100.0,
                          "maturity": 1.0}]}
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_cli_writes_its_files_and_keeps_the_user_s(tmp_path, capsys):
    base = _config(tmp_path / "b.yaml", [0.2, 0.25, 0.3], 0.3)
    stress = _config(tmp_path / "s.yaml", [0.3, 0.4, 0.35], 0.8)
    out = tmp_path / "out"
    assert main(["analyze", "stress", base, stress, "--out", str(out)]) == 0
    data = json.loads((out / "stress.json").read_text())
    assert data["variance_ratios"] == sorted(data["variance_ratios"], reverse=True)
    assert (out / "stress.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert main(["analyze", "stress", base, stress, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stress.json, stress.png exist: use --overwrite" in err[0]
    assert main(["analyze", "stress", base, stress, "--out", str(out), "--overwrite"]) == 0
    capsys.readouterr()
    (tmp_path / "f.txt").write_text("mine")
    assert main(["analyze", "stress", base, stress, "--out", str(tmp_path / "f.txt")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip().endswith("f.txt: is a file, not a directory")
    assert (tmp_path / "f.txt").read_text() == "mine"
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"market": {"spot": 100.0, "vol": 0.2}, "portfolio": [
        {"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0}]}))
    capsys.readouterr()
    assert main(["analyze", "stress", base, str(one)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different numbers of assets: base d = 3, stress d = 1" in err[0]


def test_a_singular_base_is_named():
    """A repaired correlation lies on the semidefinite boundary (an eigenvalue 0): no finite ratio in its null
    direction, one line instead of a division by zero."""
    from cva.market.nearest_correlation import nearest_correlation

    C = nearest_correlation([[1.0, 0.9, 0.7], [0.9, 1.0, 0.3], [0.7, 0.3, 1.0]]).matrix
    base = BlackScholes(spot=np.ones(3), vol=0.2, dividend=0.0, rate=0.0, correlation=C)
    stress = BlackScholes(spot=np.ones(3), vol=0.3, dividend=0.0, rate=0.0, correlation=0.5)
    with pytest.raises(ValueError, match=r"the base correlation is singular \(smallest eigenvalue"):
        stress_directions(base, stress)
