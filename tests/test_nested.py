"""The nested CVA engine end to end on the CPU: closed-form CVA of long European calls, the
first exposure date against `cva price`, determinism, chunk invariance, resume, the CLI."""

import json
import math

import numpy as np
import pytest

import cva
from cva.cli import main
from cva.engine import nested
from cva.instruments import analytic
from cva.instruments.products import Contract
from cva.io import rundir
from cva.market.model import BlackScholes


def _config(tmp_path, seed, portfolio, market=None, **sim):
    return {"run": {"name": "t", "seed": seed, "backend": "cpu"},
            "market": market or {"spot": [100.0, 95.0], "vol": [0.25, 0.3], "dividend": [0.01, 0.02], "rate": 0.03,
                                 "correlation": 0.5},
            "portfolio": portfolio, "counterparty": {"recovery": 0.4, "hazard_rate": 0.03},
            "simulation": {"dates": 4, "outer_paths": 4000, "inner_paths": 128, "basis": "quadratic", **sim},
            "output": {"dir": str(tmp_path / "run")}}


Z_MC = 4.5     # standard errors allowed to a Monte Carlo estimate: a false failure 7e-6 of the runs per
               # assertion (3 sigma: 2.7e-3, one CI run in about 370 failed on a correct estimate)


def test_long_european_calls_cva_against_closed_form(tmp_path, rng):
    """CVA = (1 - R) sum_k C(0) (S(t_{k-1}) - S(t_k)) for long European calls maturing at the horizon:
    one valued in closed form along the paths, one (the call on the max) by inner paths."""
    seed = int(rng.integers(2**32))
    port = [{"style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0},
            {"style": "european", "payoff": "call", "underlying": "max", "strike": 105.0, "maturity": 1.0,
             "quantity": 2.0}]
    cfg = _config(tmp_path, seed, port)
    res = cva.run(cfg, progress=False)
    m = BlackScholes(spot=[100.0, 95.0], vol=[0.25, 0.3], dividend=[0.01, 0.02], rate=0.03, correlation=0.5)
    c0 = analytic.closed_form_price(Contract("european", "call", "asset", 100.0, 1.0, asset=0), m)
    c1 = analytic.closed_form_price(Contract("european", "call", "max", 105.0, 1.0), m)
    ref = 0.6 * (c0 + 2 * c1) * (1 - math.exp(-0.03 * 1.0))
    assert abs(res.cva - ref) < Z_MC * res.stderr, (res.cva, res.stderr, ref)
    assert res.ci[0] < res.cva < res.ci[1]
    # each date's discounted expected exposure is the t = 0 price (the values are positive)
    d_ee = res.exposures["EE"] * res.exposures["discount"]
    se = res.exposures["EE_stderr"] * res.exposures["discount"]
    assert np.all(np.abs(d_ee - (c0 + 2 * c1)) < Z_MC * se)


def test_first_exposure_date_matches_cva_price(tmp_path, rng):
    """A Bermudan put exercisable from the first exposure date on: E[D(t_1) V(t_1)] = V(0)."""
    seed = int(rng.integers(2**32))
    port = [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 40.0, "maturity": 1.0,
             "exercise_dates": 4}]
    cfg = _config(tmp_path, seed, port, market={"spot": 36.0, "vol": 0.2, "rate": 0.06},
                  basis="laguerre", inner_paths=512, outer_paths=3000, pricing_paths=200_000)
    res = cva.run(cfg, progress=False)
    v1 = res.values[:, 0] * math.exp(-0.06 * 0.25)
    price = cva.price(cfg)
    p, p_se = price["price"][0], price["stderr"][0]
    se = math.hypot(v1.std(ddof=1) / math.sqrt(v1.size), p_se)
    assert abs(v1.mean() - p) < Z_MC * se + 0.01 * p, (v1.mean(), p, se)


def _small(tmp_path, name):
    port = [{"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4},
            {"style": "european", "payoff": "call", "underlying": {"asset": 1}, "strike": 100.0, "maturity": 0.5,
             "quantity": -1.0}]
    cfg = _config(tmp_path, 11, port, outer_paths=600, inner_paths=64, basis="linear")
    cfg["output"]["dir"] = str(tmp_path / name)
    return cfg


def test_same_seed_same_numbers_and_chunk_invariance(tmp_path):
    a = cva.run(_small(tmp_path, "a"), chunk=600, progress=False)
    b = cva.run(_small(tmp_path, "b"), chunk=600, progress=False)
    c = cva.run(_small(tmp_path, "c"), chunk=77, progress=False)
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.values, c.values)
    assert a.cva == c.cva
    other = _small(tmp_path, "d")
    other["run"]["seed"] = 12
    assert not np.array_equal(cva.run(other, progress=False).values, a.values)


def _interrupted_run(monkeypatch, cfg, chunk, at_chunk):
    """Run ``cfg`` and interrupt it (KeyboardInterrupt) as chunk ``at_chunk`` (1-based) starts."""
    calls = {"n": 0}
    original = nested.chunk_values

    def interrupted(*args, **kw):
        calls["n"] += 1
        if calls["n"] == at_chunk:
            raise KeyboardInterrupt
        return original(*args, **kw)

    monkeypatch.setattr(nested, "chunk_values", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cva.run(cfg, chunk=chunk, progress=False)
    monkeypatch.setattr(nested, "chunk_values", original)


def test_resume_after_interruption_is_bitwise_the_uninterrupted_run(tmp_path, monkeypatch):
    full = cva.run(_small(tmp_path, "full"), chunk=100, progress=False)
    _interrupted_run(monkeypatch, _small(tmp_path, "part"), 100, 4)
    assert len(list((tmp_path / "part" / "chunks").glob("level*_*.npz"))) == 3
    resumed = cva.run(_small(tmp_path, "part"), chunk=100, resume=True, progress=False)
    np.testing.assert_array_equal(resumed.values, full.values)
    assert resumed.cva == full.cva
    assert resumed.solver_stats.drop(columns=[]).equals(full.solver_stats)


def test_run_directory_contents(tmp_path):
    res = cva.run(_small(tmp_path, "r"), progress=False)
    out = tmp_path / "r"
    for f in ("summary.json", "exposures.csv", "solver_stats.csv", "exposure.png", "condition.png",
              "method_mix.png", "timings.png", "report.html"):
        assert (out / f).stat().st_size > 0, f
    s = json.loads((out / "summary.json").read_text())
    assert s["cva"] == res.cva and s["backend"] == "cpu" and "no wrong-way risk" in s["default_model"]
    assert set(s["runtime_seconds"]) >= {"outer_paths", "inner_paths", "assembly", "solve"}
    assert s["solver"]["systems"] == int(res.solver_stats["systems"].sum()) > 0
    assert res.exposures.columns.tolist()[:6] == ["date", "EE", "EE_stderr", "ENE", "PFE", "mean_value"]
    assert (res.exposures["PFE"] >= res.exposures["EE"]).all() and (res.exposures["ENE"] <= 0).all()


def test_float32_run_with_laguerre_regressions_in_float64(tmp_path):
    """``regression.dtype: auto`` in a float32 run with the Laguerre basis: the regressions run in
    float64 (summary.json and the report say so) and the CVA is the float64 run's within rounding of
    the paths (0.3 standard errors: LSM decisions may flip, see README)."""
    port = [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 40.0, "maturity": 1.0,
             "exercise_dates": 8}]
    cfg = _config(tmp_path, 5, port, market={"spot": 36.0, "vol": 0.2, "rate": 0.06},
                  basis="laguerre", inner_paths=256, outer_paths=500)
    ref = cva.run(cfg, progress=False)
    cfg["run"]["dtype"] = "float32"
    cfg["output"]["dir"] = str(tmp_path / "f32")
    res = cva.run(cfg, progress=False)
    s = json.loads((tmp_path / "f32" / "summary.json").read_text())
    assert s["dtype"] == "float32" and s["regression_dtype"] == "float64"
    assert "(float64 regressions)" in (tmp_path / "f32" / "report.html").read_text()
    assert abs(res.cva - ref.cva) < 0.3 * ref.stderr, (res.cva, ref.cva, ref.stderr)


def test_cli_run_and_its_errors(tmp_path, capsys):
    import yaml

    cfg = _small(tmp_path, "cli")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path)]) == 0
    assert "report:" in capsys.readouterr().out
    assert main(["run", str(path), "--out", str(tmp_path / "other"), "--resume"]) == 2
    assert "cannot resume" in capsys.readouterr().err
    del cfg["counterparty"]
    cfg["simulation"]["outer_pahts"] = 5
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any("simulation.outer_pahts" in e for e in err) and "Traceback" not in "\n".join(err)


def test_chunk_invariance_with_fallback_solves(tmp_path):
    """With few inner paths the regressions are singular and the fallbacks and the solver memory
    decide: the values must still not depend on the chunking (the memory is per outer path)."""
    port = [{"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4},
            {"style": "bermudan", "payoff": "call", "underlying": "max", "strike": 110.0, "maturity": 1.0,
             "exercise_dates": 4, "quantity": -1.0}]
    cfg = _config(tmp_path, 5, port, outer_paths=300, inner_paths=12, basis="quadratic")
    runs = []
    for chunk in (300, 64, 7):
        cfg["output"]["dir"] = str(tmp_path / f"c{chunk}")
        runs.append(cva.run(cfg, chunk=chunk, progress=False))
    assert runs[0].solver_stats["eig_truncate"].sum() > 0 and runs[0].solver_stats["householder_pcr"].sum() >= 0
    for r in runs[1:]:
        np.testing.assert_array_equal(r.values, runs[0].values)
        assert r.cva == runs[0].cva


def test_resume_takes_the_chunk_of_the_interrupted_run(tmp_path, monkeypatch):
    cfg = _small(tmp_path, "rc")
    _interrupted_run(monkeypatch, cfg, 150, 2)
    (tmp_path / "rc" / "chunks" / "level0_00000.npz").write_bytes(b"corrupt")      # e.g. after an OS crash
    resumed = cva.run(cfg, resume=True, progress=False)                            # no chunk given
    full = cva.run(_small(tmp_path, "rc_full"), chunk=150, progress=False)
    np.testing.assert_array_equal(resumed.values, full.values)
    assert resumed.summary["chunk"] == 150


def test_steps_is_a_view_for_consecutive_dates_and_a_copy_otherwise():
    """nested._steps gives S[:, :, idx]: without copying the inner paths where the exercise dates are
    consecutive steps, as a gather where they are not."""
    S = np.random.default_rng(196).standard_normal((3, 4, 7, 2))
    for idx, view in (([2, 3, 4], True), ([0], True), ([1, 3, 4], False), ([0, 6], False)):
        idx = np.array(idx)
        got = nested._steps(S, idx)
        np.testing.assert_array_equal(got, S[:, :, idx])
        assert np.shares_memory(got, S) == view


@pytest.mark.parametrize("content", ["garbage{", "[1,2]", '{"chunk": "x"}', None])
def test_resume_with_an_unreadable_run_json(tmp_path, capsys, content):
    """A corrupt run.json (not JSON, not a manifest, a directory) is named, not blamed on the config."""
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_small(tmp_path, "bad")))
    manifest = tmp_path / "bad" / "run.json"
    manifest.parent.mkdir()
    if content is None:
        manifest.mkdir()
    else:
        manifest.write_text(content)
    assert main(["run", str(path), "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert err[0].startswith(f"cannot resume: {manifest} is unreadable (") and err[0].endswith("run without --resume")


def test_resume_names_the_changed_keys_and_ignores_pricing_keys(tmp_path, monkeypatch):
    cfg = _small(tmp_path, "keys")
    cfg["simulation"]["outer_paths"] = 200
    _interrupted_run(monkeypatch, cfg, 100, 2)
    changed = {**cfg, "run": {**cfg["run"], "seed": 12}, "portfolio": [{**cfg["portfolio"][0], "strike": 90.0},
                                                                         cfg["portfolio"][1]]}
    with pytest.raises(rundir.ResumeError) as info:
        cva.run(changed, resume=True, progress=False)
    msg = str(info.value)
    assert "run.seed (was 11, now 12)" in msg and "portfolio[0].strike (was 100.0, now 90.0)" in msg
    assert "config_hash" not in msg
    pricing = {**cfg, "simulation": {**cfg["simulation"], "pricing_paths": 5, "out_of_sample": True},
               "output": {"dir": str(tmp_path / "elsewhere")}}
    resumed = cva.run(pricing, out=tmp_path / "keys", resume=True, progress=False)
    full = cva.run(_small(tmp_path, "keys_full") | {"simulation": cfg["simulation"]}, chunk=100, progress=False)
    np.testing.assert_array_equal(resumed.values, full.values)


def test_chunk_of_one_path_is_refused(tmp_path):
    """simulation.chunk and --chunk are >= 2: a chunk of one path rounds the basket's average otherwise."""
    with pytest.raises(ValueError, match="chunk must be an integer >= 2"):
        cva.run(_small(tmp_path, "one"), chunk=1, progress=False)
    assert not (tmp_path / "one").exists()


def test_value_cube_nets_long_and_short_identical_contracts_to_zero(tmp_path):
    """The engine values each contract once into the value cube; netting is the sum quantity * value over
    the cube: a long and a short copy of the same Bermudan and European have no exposure at all."""
    port = [{"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4},
            {"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4, "quantity": -1.0},
            {"style": "european", "payoff": "call", "underlying": {"asset": 1}, "strike": 95.0, "maturity": 0.5},
            {"style": "european", "payoff": "call", "underlying": {"asset": 1}, "strike": 95.0, "maturity": 0.5,
             "quantity": -1.0}]
    res = cva.run(_config(tmp_path, 3, port, outer_paths=200, inner_paths=32), progress=False)
    assert res.cva == 0 and (res.exposures["EE"] == 0).all() and (res.exposures["ENE"] == 0).all()
    assert not np.any(res.values)


def test_the_book_nets_the_cube_in_the_order_of_each_date(tmp_path):
    """Book.gross: per netting set and value date, the sum of quantity x value over its trades alive there, added in
    the netting order (the contracts valued at the node first), so a single netting set's values are the bits they
    were; a trade expired at a date adds nothing."""
    from cva.engine.plan import build_plan, netting_order
    from cva.io.config import load_config
    from cva.market.model import BlackScholes
    from cva.xva.credit import Counterparty
    from cva.xva.desk import Book

    port = [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4},
            {"style": "european", "payoff": "call", "underlying": {"asset": 1}, "strike": 95.0, "maturity": 0.5,
             "quantity": -1.0},
            {"style": "european", "payoff": "call", "underlying": "basket", "strike": 95.0, "maturity": 1.0,
             "quantity": 2.5}]
    cfg = load_config({"market": {"spot": [100.0, 90.0], "vol": [0.2, 0.3], "rate": 0.03},
                       "counterparties": [{"name": "A", "hazard_rate": 0.02, "netting_sets": [
                           {"name": "a", "portfolio": port[:2]}, {"name": "b", "portfolio": port[2:]}]}],
                       "simulation": {"dates": 4}})
    plan, model = build_plan(cfg), BlackScholes.from_market(cfg.market)
    book = Book(cfg, plan, {"A": Counterparty.from_config(cfg.counterparties[0], model.rate)}, model)
    cube = np.random.default_rng(43).standard_normal((3, 5, 3, len(plan.value_index)))
    P = book.gross(cube)                                                         # (sets, paths, S, V)
    q = [c.quantity for c in plan.contracts]
    for k, alive in enumerate(netting_order(plan)):
        for j, members in enumerate(([0, 1], [2])):
            want = np.zeros(cube.shape[:2])
            for c in (c for c in alive if c in members):
                want = want + q[c] * cube[..., c, k]
            np.testing.assert_array_equal(P[..., j, k], want)
    assert 1 not in netting_order(plan)[-1]                                      # the 0.5 y call has expired
    np.testing.assert_array_equal(P[..., 0, -1], cube[..., 0, -1])


@pytest.mark.parametrize("estimator", ["extrapolated", "mlmc", "plain"])
def test_allocations_add_up_to_the_cva(tmp_path, estimator):
    """Euler allocation on the value cube: per contract (1 - R) sum_k D q_k E[q_i V_i 1{P > 0}]; the
    allocations sum to the netting set's CVA; trades.csv holds them."""
    port = [{"name": "put", "style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0,
             "maturity": 1.0, "exercise_dates": 4},
            {"name": "short call", "style": "european", "payoff": "call", "underlying": {"asset": 1},
             "strike": 100.0, "maturity": 0.5, "quantity": -1.0},
            {"name": "call", "style": "european", "payoff": "call", "underlying": {"asset": 0}, "strike": 110.0,
             "maturity": 1.0, "quantity": 2.0}]
    res = cva.run(_config(tmp_path, 8, port, outer_paths=300, inner_paths=32, estimator=estimator), progress=False)
    trades = res.summary["trades"]
    assert [t["contract"] for t in trades] == ["put", "short call", "call"]
    total = sum(t["cva_allocation"] for t in trades)
    assert total == pytest.approx(res.cva, rel=1e-10, abs=1e-14)
    assert trades[1]["cva_allocation"] < 0 < trades[2]["cva_allocation"]      # the short call lowers the exposure
    import pandas as pd

    csv = pd.read_csv(tmp_path / "run" / "trades.csv")
    np.testing.assert_allclose(csv["cva_allocation"], [t["cva_allocation"] for t in trades], rtol=1e-15)


def test_allocation_of_a_lone_contract_is_the_cva(tmp_path):
    port = [{"style": "bermudan", "payoff": "put", "underlying": "basket", "strike": 100.0, "maturity": 1.0,
             "exercise_dates": 4, "quantity": 3.0}]
    res = cva.run(_config(tmp_path, 9, port, outer_paths=200, inner_paths=32), progress=False)
    (trade,) = res.summary["trades"]
    assert trade["cva_allocation"] == pytest.approx(res.cva, rel=1e-12)


@pytest.mark.parametrize("N, depths", [(4, 3), (25, 3), (300, 2), (7, 1), (256, 1), (16, 2), (41, 3)])
def test_kept_exercise_times_come_back_per_contract_in_any_stack(N, depths):
    """:class:`cva.engine.nested.ExerciseTimes` packs a call's per-depth exercise dates into one integer per path
    and gives each contract's back, stacked in any order: the dates it was given."""
    from cva.engine.nested import ExerciseTimes

    gen = np.random.default_rng(20261128)
    Lc, M = 5, 8
    stopping = [gen.integers(0, N, (3 * Lc, M)).astype(np.uint8 if N <= 256 else np.int32) for _ in range(depths)]
    kept = ExerciseTimes()
    kept.add([7, 2, 9], 4, stopping, Lc, N)
    for order in ([2], [9, 7], [7, 2, 9]):
        got = kept.stacked(order, 4)
        rows = np.concatenate([np.arange(Lc) + Lc * [7, 2, 9].index(c) for c in order])
        assert len(got) == depths
        for k in range(depths):
            np.testing.assert_array_equal(got[k], stopping[k][rows])


@pytest.mark.parametrize("dates", [[0, 1, 2], [0, 2, 3], [1]])
@pytest.mark.parametrize("assets", [[2], [1, 3, 1, 0], [3, 3]])
def test_a_stacks_asset_slices_are_each_contracts_own_slice(rng, dates, assets):
    """_asset_steps' one gather of a stack's slices (consecutive dates or not, an asset repeated) is, bit for bit,
    each contract's own slice S[:, :, dates, asset] stacked in the stack's order."""
    S = rng.standard_normal((3, 5, 4, 4)).astype(np.float32)
    idx = np.asarray(dates)
    got = nested._asset_steps(S, idx, assets, np)
    ref = np.concatenate([S[:, :, idx, a][..., None] for a in assets])
    assert got.shape == (len(assets) * 3, 5, len(dates), 1) and np.array_equal(got, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_dates_payoffs_in_one_pass_are_each_contracts_own(rng, dtype):
    """_payoff_columns: the one-asset contracts' exercise values on a date's slice of the outer paths in one pass
    are bitwise each contract's payoff_value (strikes not representable in float32 included), and a basket among
    them is valued one by one."""
    S = rng.uniform(60.0, 140.0, (7, 3)).astype(dtype)

    def c(asset, payoff, strike, underlying="asset"):
        return Contract(style="bermudan", payoff=payoff, underlying=underlying, asset=asset, strike=strike,
                        maturity=1.0, n_exercise=4)

    ones = [c(0, "call", 100.1), c(2, "put", 97.3), c(0, "put", 100.1), c(1, "call", 88.8)]
    mixed = [*ones, c(0, "call", 101.7, "basket")]
    for cs in (ones, mixed, ones[:1]):
        got = nested._payoff_columns(cs, S, np)
        ref = np.stack([x.payoff_value(S) for x in cs], axis=-1)
        assert got.shape == (7, len(cs)) and got.dtype == ref.dtype and np.array_equal(got, ref)


def _solver_report(rng, n, dtype=np.float32):
    """A solver report of n systems: every method code, discarded eigenvalues, failures, and NaN and infinite
    residuals among finite ones."""
    import linalg_gpu as lg

    res = rng.uniform(0.0, 1e-5, n).astype(dtype)
    res[rng.uniform(size=n) < 0.1] = np.nan
    res[rng.uniform(size=n) < 0.05] = np.inf
    zeros = np.zeros(n)
    return lg.SolverReport(method_code=rng.integers(0, 4, n).astype(np.int8), residual=res,
                           n_discarded=rng.integers(0, 3, n).astype(np.int32), cond_estimate=zeros,
                           breakdown=zeros.astype(bool), ok=rng.uniform(size=n) > 0.2, nonfinite=zeros.astype(bool),
                           start_method="ldlt", rtol=1e-5, cond_max=1e5)


def test_a_chunks_statistics_travel_as_arrays_and_merge_as_they_were(rng):
    """DateStats.to_state sends a chunk's sampled condition numbers and design rows as arrays (not lists of floats:
    a desk chunk has 10^5); merge_state appends them per date, in the order of the chunks, the same floats and ints
    as the chunks' own lists, with the rows' counts added and their maxima taken."""
    chunks = []
    for _ in range(2):
        st = nested.DateStats(3)
        for g in range(3):
            st.cond[g].extend(rng.lognormal(3.0, 2.0, int(rng.integers(0, 5))).tolist())
            st.design[g].extend([int(rng.integers(1, 4)), 3, float(rng.lognormal(5.0, 3.0))]
                                for _ in range(int(rng.integers(0, 3))))
            st.rows[g].update(systems=int(rng.integers(1, 100)), regressions=int(rng.integers(1, 9)),
                              max_residual=float(rng.uniform()), failed=int(rng.integers(0, 2)))
        chunks.append(st)
    merged = nested.DateStats(3)
    for st in chunks:
        state = st.to_state()
        assert all(isinstance(state[k], np.ndarray) for k in nested.DateStats.ARRAYS)
        merged.merge_state(state)
    for g in range(3):
        want = chunks[0].cond[g] + chunks[1].cond[g]
        assert merged.cond[g] == want and all(type(c) is float for c in merged.cond[g])
        assert merged.design[g] == chunks[0].design[g] + chunks[1].design[g]
        assert all(type(r) is int and type(p) is int for r, p, _ in merged.design[g])
        a, b = chunks[0].rows[g], chunks[1].rows[g]
        assert merged.rows[g]["systems"] == a["systems"] + b["systems"]
        assert merged.rows[g]["failed"] == a["failed"] + b["failed"]
        assert merged.rows[g]["regressions"] == max(a["regressions"], b["regressions"])
        assert merged.rows[g]["max_residual"] == max(a["max_residual"], b["max_residual"])


def test_a_dates_solver_statistics_are_its_reports(rng):
    """DateStats keeps each Longstaff-Schwartz call's solver statistics (nested.solver_stats; on the CPU its twin)
    and reads them at the end: a date's row has the systems and regressions of its calls, each method's count
    (SolverReport.counts), the eigenvalues discarded, the failures and the largest finite residual of all its
    reports, as numpy gives them from the reports one by one."""
    from types import SimpleNamespace

    calls = {1: [([_solver_report(rng, 40), None, _solver_report(rng, 40)], 3), ([_solver_report(rng, 7)], 1)],
             2: [([_solver_report(rng, 5, np.float64)], 2)]}
    stats = nested.DateStats(3)
    for g, made in calls.items():
        for reps, contracts in made:
            stats.add(g, SimpleNamespace(reports=reps, conditions=[]), contracts)
    rows = stats.to_state()["rows"]
    assert rows[0]["systems"] == 0 and rows[0]["max_residual"] == 0.0
    for g, made in calls.items():
        reps = [r for rs, _ in made for r in rs if r is not None]
        res = np.concatenate([r.residual.astype(np.float64) for r in reps])
        assert rows[g]["systems"] == sum(r.residual.size for r in reps)
        assert rows[g]["regressions"] == sum(c * sum(r is not None for r in rs) for rs, c in made)
        for name in ("ldlt", "householder_pcr", "eig_truncate", "none"):
            assert rows[g][name] == sum(r.counts()[name] for r in reps)
        assert rows[g]["discarded"] == sum(int(r.n_discarded.sum()) for r in reps)
        assert rows[g]["failed"] == sum(int((~r.ok).sum()) for r in reps)
        assert rows[g]["max_residual"] == res[np.isfinite(res)].max()


def test_a_plans_date_schedule_values_each_contract_where_it_is_needed():
    """nested.date_schedule on the desk benchmark's plan (400 trades, 10 assets; kept on the plan, a sub-plan of
    some trades gets its own): at each grid date every contract alive and needed there (a value date, or one of its
    exercise dates) is in exactly one of mature (at its last exercise date), closed form, inner paths; the stacks
    partition the inner ones, share their later exercise dates, and split their members by whether the date is one
    of their exercise dates."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_desk import desk

    from cva.engine.plan import build_plan
    from cva.io.config import load_config
    from cva.xva.sensitivities import _subplan

    cfg = load_config(desk(20, 40, 400, 10, 24, 64, 16, "cpu", "float64", False))
    plan = build_plan(cfg)
    rows = nested.date_schedule(plan, cfg.d)
    assert nested.date_schedule(plan, cfg.d) is rows and len(rows) == len(plan.grid)
    values = set(int(g) for g in plan.value_index)
    for g, (k, mature, closed, inner, stacks) in enumerate(rows):
        assert k == (list(plan.value_index).index(g) if g in values else -1)
        needed = [ci for ci, ix in enumerate(plan.exercise_index) if g <= ix[-1] and (g in values or g in ix)]
        assert sorted(mature + closed + inner) == needed
        assert all(plan.exercise_index[ci][-1] == g for ci in mature)
        assert all(plan.closed_form[ci] and plan.exercise_index[ci][-1] > g for ci in closed)
        assert sorted(ci for members, *_ in stacks for ci in members) == sorted(inner)
        for members, later, now, later_only in stacks:
            for ci in members:
                ix = plan.exercise_index[ci]
                assert np.array_equal(ix[ix > g], later)
            assert sorted(now + later_only) == list(range(len(members)))
            assert all((g in plan.exercise_index[members[p]]) == (p in now) for p in range(len(members)))
    sub = _subplan(plan, [3, 1, 250])
    sub_rows = nested.date_schedule(sub, cfg.d)
    assert sub_rows is not rows
    assert {ci for _, mature, closed, inner, _ in sub_rows for ci in mature + closed + inner} <= {0, 1, 2}

