"""longstaff_schwartz(splits=) on the GPU: the affine basis's split normal equations (strided Gram of the
finest parts, right-hand sides per depth) against the numpy path and the parts priced alone; the antithetic
outer paths against numpy."""

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

from cva.engine.basis import make_basis  # noqa: E402
from cva.engine.lsm import longstaff_schwartz  # noqa: E402
from cva.instruments.products import Contract  # noqa: E402
from cva.market.model import BlackScholes  # noqa: E402


@pytest.mark.parametrize("name, payoff_regressor", [("linear", False), ("linear", True), ("quadratic", False)])
def test_split_on_the_gpu_matches_numpy_and_the_parts_alone(name, payoff_regressor):
    m = BlackScholes(spot=[100.0, 90.0, 110.0], vol=[0.2, 0.3, 0.25], dividend=[0.0] * 3, rate=0.03, correlation=0.4)
    times = np.array([0.25, 0.5, 0.75, 1.0])
    S = m.sample(np.concatenate([[0.0], times]), 128, seed=8, purpose="inner", outer=(0, 5))   # (5, 128, 4, 3)
    payoff = Contract("bermudan", "put", "basket", 100.0, 1.0, weights=(1.0, 1.0, 1.0), n_exercise=4).payoff_value
    psi = make_basis(name, m.spot, payoff_regressor, True)
    gpu = longstaff_schwartz(cp.asarray(S), times, payoff, psi, m.rate, splits=2)
    cpu = longstaff_schwartz(S, times, payoff, psi, m.rate, splits=2)
    np.testing.assert_allclose(cp.asnumpy(gpu.value), cpu.value, rtol=1e-10)
    for depth, parts in enumerate(gpu.parts, start=1):
        n = 2 ** depth
        np.testing.assert_allclose(cp.asnumpy(parts), cpu.parts[depth - 1], rtol=1e-10)
        alone = longstaff_schwartz(cp.asarray(S).reshape((5 * n, 128 // n) + S.shape[2:]), times, payoff, psi, m.rate)
        np.testing.assert_allclose(cp.asnumpy(parts), cp.asnumpy(alone.value).reshape(5, n), rtol=1e-10)


def test_antithetic_outer_paths_on_the_gpu_are_the_numpy_ones():
    m = BlackScholes(spot=[100.0, 90.0], vol=[0.2, 0.3], dividend=[0.0, 0.01], rate=0.03, correlation=0.4)
    times = np.array([0.0, 0.25, 0.5, 1.0])
    cpu = m.sample(times, 1, seed=4, purpose="outer", outer=(7, 9), outer_antithetic=True)
    gpu = m.sample(times, 1, seed=4, purpose="outer", outer=(7, 9), outer_antithetic=True, xp=cp)
    np.testing.assert_allclose(cp.asnumpy(gpu), cpu, rtol=1e-12)


def test_a_desk_on_the_gpu_matches_the_cpu(tmp_path):
    """chunk_values on the GPU and the CPU, float64: single-asset Bermudans regressed on their asset's slice of
    the inner paths (a strided view), a basket, CSA netting sets. The value cubes agree to rounding but where
    an inner path's exercise decision is a tie to rounding (cuBLAS and numpy round the regressions differently):
    on an H100, 4 of 14336 values of the parts (16 to 32 inner paths) differed by about 1 %."""
    import cva

    port = [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 1}, "strike": 95.0, "maturity": 1.0,
             "exercise_dates": 4},
            {"style": "bermudan", "payoff": "call", "underlying": "basket", "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4, "quantity": -1.0}]
    cfg = {"run": {"name": "g", "seed": 2, "dtype": "float64"},
           "market": {"spot": [100.0, 95.0, 90.0], "vol": [0.2, 0.3, 0.25], "rate": 0.03, "correlation": 0.4},
           "counterparties": [{"name": "A", "hazard_rate": 0.02, "netting_sets": [
               {"name": "a", "portfolio": port},
               {"name": "b", "csa": {"threshold": 1.0, "margin_period_of_risk": "10d"}, "portfolio": port[:1]}]}],
           "simulation": {"dates": 4, "outer_paths": 256, "inner_paths": 64, "pricing_paths": 1000},
           "sensitivities": {"spot": 0.01, "vol": 0.01, "rate": 0.0001}}
    runs = [cva.run({**cfg, "output": {"dir": str(tmp_path / b)}}, backend=b, progress=False) for b in ("cpu", "gpu")]
    for a, b in zip(runs[0].levels, runs[1].levels, strict=True):
        off = ~np.isclose(b.sets, a.sets, rtol=1e-9, atol=1e-9)
        assert off.mean() < 2e-3, (off.sum(), off.size)                     # a wrong slice would be everywhere
        np.testing.assert_allclose(b.sets[0], a.sets[0], rtol=1e-6, atol=1e-6)  # the whole inner set: no ties seen
    assert abs(runs[1].cva - runs[0].cva) < 0.05 * runs[0].stderr
    # the bumped markets, valued in each chunk on the device (:class:`cva.xva.sensitivities.BumpedDesk`)
    cpu, gpu = (r.summary["sensitivities"]["A"] for r in runs)
    for family in ("delta", "vega"):
        for asset, (value, se) in cpu[family].items():
            assert abs(gpu[family][asset][0] - value) < 0.2 * se + 1e-12, (family, asset, gpu[family][asset], value)
    assert abs(gpu["rho"][0] - cpu["rho"][0]) < 0.2 * cpu["rho"][1]


def test_one_netting_set_on_the_gpu_matches_the_cpu(tmp_path):
    """A ``portfolio:`` + ``counterparty:`` run under a CSA with our own credit and sensitivities, float64: its cube
    aggregated on the device (:class:`cva.xva.desk.Book`) and its bumped markets valued there
    (:class:`cva.xva.sensitivities.BumpedDesk`) give the CPU's numbers to rounding, but for exercise ties."""
    import cva

    cfg = {"run": {"name": "one", "seed": 4, "dtype": "float64"},
           "market": {"spot": [100.0, 95.0], "vol": [0.2, 0.3], "rate": 0.03, "correlation": 0.4},
           "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0,
                          "maturity": 1.0, "exercise_dates": 4},
                         {"style": "european", "payoff": "call", "underlying": "basket", "strike": 95.0,
                          "maturity": 1.0, "quantity": -1.0}],
           "counterparty": {"recovery": 0.4, "hazard_rate": 0.02}, "own_credit": {"recovery": 0.4, "hazard_rate": 0.01},
           "csa": {"threshold": 1.0, "margin_period_of_risk": "10d"},
           "simulation": {"dates": 4, "outer_paths": 256, "inner_paths": 64, "pricing_paths": 1000},
           "sensitivities": {"spot": 0.01, "rate": 0.0001}}
    cpu, gpu = (cva.run({**cfg, "output": {"dir": str(tmp_path / b)}}, backend=b, progress=False)
                for b in ("cpu", "gpu"))
    assert abs(gpu.cva - cpu.cva) < 0.05 * cpu.stderr
    assert abs(gpu.summary["dva"] - cpu.summary["dva"]) < 0.05 * cpu.summary["dva_stderr"]
    assert sum(t["cva_allocation"] for t in gpu.summary["trades"]) == pytest.approx(gpu.cva, rel=1e-10)
    for key in ("asset 0", "asset 1"):
        value, se = cpu.summary["sensitivities"]["delta"][key]
        assert abs(gpu.summary["sensitivities"]["delta"][key][0] - value) < 0.2 * se + 1e-12, key
    assert abs(gpu.summary["sensitivities"]["rho"][0] - cpu.summary["sensitivities"]["rho"][0]) < \
        0.2 * cpu.summary["sensitivities"]["rho"][1]


def test_the_base_exercise_dates_in_an_unbumped_market_give_the_base_cube_gpu():
    """On the GPU (the kernel for the one-asset puts, the loop for the basket): a chunk valued again with the base's
    kept inner exercise dates and no bump is the base's cube bitwise
    (:func:`engine_testlib.kept_exercise_dates_give_the_base_cube`)."""
    from engine_testlib import kept_exercise_dates_give_the_base_cube

    kept_exercise_dates_give_the_base_cube(cp)
