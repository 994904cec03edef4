"""A desk in one run (``counterparties:``, ``trades_file:``): the single-netting-set form gives bitwise the numbers of
its desk form; netting sets price as their separate runs; a hedged netting set has no exposure; an unreachable
CSA threshold is the uncollateralized run; allocations add up; per-counterparty CS01 and delta against the
closed form; the files; every input mistake in one line naming the key, the row or the column."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import cva
from cva.engine.plan import build_plan
from cva.instruments import analytic
from cva.instruments.products import Contract
from cva.io import rundir
from cva.io.config import ConfigError, load_config
from cva.market.model import BlackScholes
from cva.xva.credit import Counterparty
from cva.xva.measures import cva_functional

Z_MC = 4.5          # standard errors allowed to a Monte Carlo estimate (as in test_nested)
MARKET = {"spot": [100.0, 95.0], "vol": [0.2, 0.3], "rate": 0.03, "correlation": 0.4}
PUT = {"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 100.0, "maturity": 1.0,
       "exercise_dates": 4}
CALL = {"style": "european", "payoff": "call", "underlying": {"asset": 1}, "strike": 95.0, "maturity": 1.0}
SIM = {"dates": 4, "outer_paths": 400, "inner_paths": 32}


def _legacy(tmp_path, name, portfolio, credit, **extra):
    return {"run": {"name": name, "seed": 11, "backend": "cpu"}, "market": MARKET, "portfolio": portfolio,
            "counterparty": credit, "simulation": dict(SIM), "output": {"dir": str(tmp_path / name)}, **extra}


def _desk(tmp_path, name, counterparties, **extra):
    return {"run": {"name": name, "seed": 11, "backend": "cpu"}, "market": MARKET, "counterparties": counterparties,
            "simulation": dict(SIM), "output": {"dir": str(tmp_path / name)}, **extra}


def test_the_single_netting_set_form_is_its_desk_form_bitwise(tmp_path):
    credit = {"recovery": 0.4, "hazard_rate": 0.02}
    own = {"recovery": 0.5, "hazard_rate": 0.01}
    port = [PUT, {**CALL, "quantity": -1.0}]
    old = cva.run(_legacy(tmp_path, "old", port, credit, own_credit=own), progress=False)
    new = cva.run(_desk(tmp_path, "new", [{"name": "C", **credit, "netting_sets": [{"name": "N", "portfolio": port}]}],
                        own_credit=own), progress=False)
    assert new.cva == old.cva and new.stderr == old.stderr and new.ci == old.ci
    assert new.summary["dva"] == old.summary["dva"] and new.summary["dva_stderr"] == old.summary["dva_stderr"]
    ns = new.summary["counterparties"]["C"]["netting_sets"]["N"]
    np.testing.assert_array_equal(new.exposures["EE"], old.exposures["EE"])
    assert ns["EPE"] == old.summary["EPE"] and ns["EEPE"] == old.summary["EEPE"]
    for a, b in zip(new.summary["trades"], old.summary["trades"], strict=True):
        for key in ("cva_allocation", "dva_allocation", "cva_allocation_stderr", "dva_allocation_stderr"):
            assert a[key] == b[key], key
    # and the single form's summary carries the same counterparties block
    assert old.summary["counterparties"]["counterparty"]["cva"] == old.cva


def test_netting_sets_price_as_their_separate_runs(tmp_path):
    """Two counterparties, one netting set each, on the same dates: each equals its own single run (the trades'
    values do not depend on the other trades), the desk is their sum, its error from the per-path sums."""
    a = {"recovery": 0.4, "hazard_rate": 0.02}
    b = {"recovery": 0.3, "cds_spreads": {1: 0.01, 3: 0.015}}
    pa, pb = [PUT], [{**CALL, "quantity": -2.0}, {**PUT, "strike": 95.0, "underlying": {"asset": 1}}]
    desk = cva.run(_desk(tmp_path, "desk", [{"name": "A", **a, "netting_sets": [{"name": "a", "portfolio": pa}]},
                                            {"name": "B", **b, "netting_sets": [{"name": "b", "portfolio": pb}]}]),
                   progress=False)
    alone_a = cva.run(_legacy(tmp_path, "a", pa, a), progress=False)
    alone_b = cva.run(_legacy(tmp_path, "b", pb, b), progress=False)
    cps = desk.summary["counterparties"]
    assert cps["A"]["cva"] == pytest.approx(alone_a.cva, rel=1e-12)
    assert cps["A"]["cva_stderr"] == pytest.approx(alone_a.stderr, rel=1e-12)
    assert cps["B"]["cva"] == pytest.approx(alone_b.cva, rel=1e-12)
    assert desk.cva == pytest.approx(alone_a.cva + alone_b.cva, rel=1e-12)
    def extrapolated(run, config):                                        # 2 g(P) - (g(P_a) + g(P_b)) / 2 per path
        c = load_config(config)
        m = BlackScholes.from_market(c.market)
        g = cva_functional(build_plan(c), m, Counterparty.from_config(c.counterparty, m.rate))
        sets = run.levels[-1].sets
        return 2 * g(sets[0]) - 0.5 * (g(sets[1]) + g(sets[2]))

    per_path = (extrapolated(alone_a, _legacy(tmp_path, "a", pa, a))
                + extrapolated(alone_b, _legacy(tmp_path, "b", pb, b)))
    pairs = 0.5 * (per_path[0::2] + per_path[1::2])                         # same outer paths, antithetic pairs
    assert desk.cva == pytest.approx(pairs.mean(), rel=1e-12)
    assert desk.stderr == pytest.approx(pairs.std(ddof=1) / math.sqrt(pairs.size), rel=1e-10)


def test_a_hedged_netting_set_has_no_exposure_and_an_unreachable_threshold_no_collateral(tmp_path):
    credit = {"recovery": 0.4, "hazard_rate": 0.02}
    sets = [{"name": "hedged", "portfolio": [CALL, {**CALL, "quantity": -1.0}]},
            {"name": "plain", "portfolio": [PUT, CALL]},
            {"name": "csa", "csa": {"threshold": 1e9, "margin_period_of_risk": "10d"}, "portfolio": [PUT, CALL]}]
    res = cva.run(_desk(tmp_path, "d", [{"name": "C", **credit, "netting_sets": sets}]), progress=False,
                  keep_chunks=True)
    ns = res.summary["counterparties"]["C"]["netting_sets"]
    assert ns["hedged"]["cva"] == 0.0 and ns["hedged"]["EPE"] == 0.0
    assert ns["csa"]["cva"] == ns["plain"]["cva"] == ns["csa"]["cva_uncollateralized"]
    assert ns["csa"]["collateralized"] and not ns["plain"]["collateralized"]
    ee = res.exposures.set_index("netting_set")
    np.testing.assert_array_equal(ee.loc["csa", "EE_uncollateralized"], ee.loc["plain", "EE"])
    # the per-path values kept: every netting set's values at the exposure dates for the seven inner sets; for the
    # first three, spread over the seven rows, the gross values again only for the netting set under a CSA (the
    # others' are the same numbers) and the six trades' contributions
    K = res.exposures.query("netting_set == 'plain'").shape[0]
    manifest = json.loads((tmp_path / "d" / rundir.MANIFEST).read_text())
    (values, _), *_ = rundir.load_chunks(tmp_path / "d", manifest["config_hash"], 0)
    assert values.shape == (7, values.shape[1], 3 * K + math.ceil(3 * (K + 6) / 7))


def test_allocations_add_up_to_each_netting_set(tmp_path):
    """Without and with a CSA (threshold, MTA, an independent amount, both sides posting, and one side only):
    the trades' shares of the CVA and DVA add up to the netting set's, path by path."""
    credit = {"recovery": 0.4, "hazard_rate": 0.02}
    csa = {"threshold": 2.0, "minimum_transfer_amount": 0.5, "independent_amount": 1.0, "margin_period_of_risk": "14d"}
    sets = [{"name": "x", "portfolio": [PUT, {**CALL, "quantity": -1.0}]},
            {"name": "y", "portfolio": [{**PUT, "underlying": "basket"}, CALL]},
            {"name": "z", "csa": csa, "portfolio": [PUT, {**CALL, "quantity": -1.0}, {**CALL, "strike": 90.0}]},
            {"name": "w", "csa": {**csa, "posting": "counterparty", "independent_amount": 0.0},
             "portfolio": [{**PUT, "quantity": -2.0}, CALL]}]
    res = cva.run(_desk(tmp_path, "d", [{"name": "C", **credit, "netting_sets": sets}],
                        own_credit={"recovery": 0.4, "hazard_rate": 0.01}), progress=False)
    ns = res.summary["counterparties"]["C"]["netting_sets"]
    for name in ("x", "y", "z", "w"):
        rows = [t for t in res.summary["trades"] if t["netting_set"] == name]
        assert len(rows) == len(next(ns for ns in sets if ns["name"] == name)["portfolio"])
        assert sum(t["cva_allocation"] for t in rows) == pytest.approx(ns[name]["cva"], rel=1e-10, abs=1e-15)
        assert sum(t["dva_allocation"] for t in rows) == pytest.approx(ns[name]["dva"], rel=1e-10, abs=1e-15)


def test_a_float32_run_keeps_its_values_in_float32(tmp_path):
    """A float32 desk's chunk holds its aggregate computed in float64 and rounded once to float32 (half the bytes to
    send, write and hold); the levels it is measured from are float64; the trades' allocations add up to each
    netting set's CVA and DVA to the rounding of the per-path values: with u = 2^-24 float32's unit roundoff and the
    estimator's weights (extrapolated: 2 and -1) summing to 3 in absolute value, within 3 u (E sum_i |c_i| + |CVA|)
    and a factor 2 for the CVA's own sum over the dates. With sensitivities the chunk is float64, its base part
    the same numbers. The summary's aggregate size is the chunk's bytes as it came (not the levels' float64 copy)."""
    from cva.engine.nested import DateStats, chunk_values
    from cva.engine.plan import level_specs
    from cva.xva.desk import Book

    credit = {"recovery": 0.4, "hazard_rate": 0.02}
    csa = {"threshold": 2.0, "minimum_transfer_amount": 0.5, "independent_amount": 1.0, "margin_period_of_risk": "14d"}
    sets = [{"name": "x", "portfolio": [PUT, {**CALL, "quantity": -1.0}]},
            {"name": "z", "csa": csa, "portfolio": [PUT, {**CALL, "quantity": -1.0}, {**CALL, "strike": 90.0}]}]
    cfg = _desk(tmp_path, "f", [{"name": "C", **credit, "netting_sets": sets}],
                own_credit={"recovery": 0.4, "hazard_rate": 0.01})
    cfg["run"]["dtype"] = "float32"
    res = cva.run(cfg, progress=False, chunk=SIM["outer_paths"], keep_chunks=True)
    manifest = json.loads((tmp_path / "f" / rundir.MANIFEST).read_text())
    [(values, _)] = rundir.load_chunks(tmp_path / "f", manifest["config_hash"], 0)
    assert values.dtype == np.float32 and all(lv.sets.dtype == np.float64 for lv in res.levels)
    assert res.summary["value_cube"]["aggregated_megabytes"] == values.nbytes / 1e6       # the chunk's, in float32
    c = load_config(cfg)
    plan, model = build_plan(c), BlackScholes.from_market(c.market)
    credits = {e.counterparty: Counterparty.from_config(e.credit, model.rate) for e in c.book()}
    book = Book(c, plan, credits, model, Counterparty.from_config(c.own_credit, model.rate))
    [(m, splits)] = level_specs(c)
    cube = chunk_values(c, plan, model, np, 0, SIM["outer_paths"], DateStats(len(plan.grid)), None, inner_paths=m,
                        splits=splits)
    book.dtype = np.dtype(np.float64)
    exact = book.aggregate(cube)
    assert exact.dtype == np.float64
    np.testing.assert_array_equal(values, exact.astype(np.float32))
    u = 2.0 ** -24
    ns = res.summary["counterparties"]["C"]["netting_sets"]
    for j, name in enumerate(("x", "z")):
        members = list(book.entries[j].members)
        rows = [t for t in res.summary["trades"] if t["netting_set"] == name]
        for side in ("cva", "dva"):
            scale = np.abs(book.contributions(values.astype(np.float64), side)[..., members]).sum(-1).mean()
            total = sum(t[f"{side}_allocation"] for t in rows)
            assert abs(total - ns[name][side]) <= 2 * 3 * u * (scale + abs(ns[name][side])), (name, side)
    # with sensitivities the chunk is float64 (the bumped markets' CVAs are differenced), its base part the same
    bumped = {**cfg, "sensitivities": {"spot": 0.01}, "output": {"dir": str(tmp_path / "s")}}
    wide_res = cva.run(bumped, progress=False, chunk=SIM["outer_paths"], keep_chunks=True)
    manifest = json.loads((tmp_path / "s" / rundir.MANIFEST).read_text())
    [(wide, _)] = rundir.load_chunks(tmp_path / "s", manifest["config_hash"], 0)
    assert wide.dtype == np.float64 and wide.shape[-1] > book.width(values.shape[0])
    assert wide_res.summary["value_cube"]["aggregated_megabytes"] == wide.nbytes / 1e6
    np.testing.assert_array_equal(wide[..., :book.width(values.shape[0])], values)


class _Levels:
    """The levels' interface :meth:`cva.xva.desk.Book.allocations` reads (:class:`cva.engine.nested.Levels`)."""

    def __init__(self, levels):
        self._levels = levels

    def levels(self, values):
        from dataclasses import replace
        return [replace(lv, sets=values(lv.sets)) for lv in self._levels]


def test_a_chunk_keeps_the_sets_the_measures_read(tmp_path):
    """A chunk of seven inner sets (the extrapolated estimator's) keeps every set's netted values, and the gross
    values under a CSA and the trades' contributions of the whole set and its halves only, packed path by path over
    its rows: they are bitwise those of each set aggregated alone (one or three sets: nothing packed, the values
    side by side), the chunk has the width it should, and every estimator's allocations, uncollateralized CVA and
    uncollateralized exposure (estimates and standard errors) are bitwise those computed from all seven sets."""
    from dataclasses import replace

    from cva.engine.estimators import Level, combine
    from cva.xva.credit import run_credits
    from cva.xva.desk import KEPT_SETS, Book, desk_measures

    csa = {"threshold": 2.0, "minimum_transfer_amount": 0.5, "independent_amount": 1.0, "margin_period_of_risk": "14d"}
    sets = [{"name": "x", "portfolio": [PUT, {**CALL, "quantity": -1.0}]},
            {"name": "z", "csa": csa, "portfolio": [PUT, {**CALL, "quantity": -1.0}, {**CALL, "strike": 90.0}]}]
    c = load_config(_desk(tmp_path, "k", [{"name": "C", "recovery": 0.4, "hazard_rate": 0.02, "netting_sets": sets}],
                          own_credit={"recovery": 0.4, "hazard_rate": 0.01}))
    plan, model = build_plan(c), BlackScholes.from_market(c.market)
    book = Book.of_config(c, plan, model)
    book.dtype = np.dtype(np.float64)
    L, C, K = 40, len(plan.contracts), len(plan.exposure_index)
    S, A = len(book.entries), len(book.collateralized)
    record = A * K + 2 * C                      # a kept set's: the gross values under the CSA, the CVA and DVA parts
    cube = np.random.default_rng(5).normal(10.0, 5.0, size=(7, L, C, len(plan.value_index)))
    alone = [book.aggregate(cube[s:s + 1]) for s in range(7)]
    assert all(a.shape[-1] == book.width(1) == S * K + record for a in alone)
    for a in alone:                                                       # one set: the values side by side
        np.testing.assert_array_equal(book.uncollateralized(a)[0], a[0, :, S * K:S * K + A * K].reshape(L, A, K))
        for i, side in enumerate(("cva", "dva")):
            at = S * K + A * K + i * C
            np.testing.assert_array_equal(book.contributions(a, side)[0], a[0, :, at:at + C])
    chunk = book.aggregate(cube)
    assert chunk.shape == (7, L, book.width(7)) and book.width(7) == S * K + math.ceil(KEPT_SETS * record / 7)
    np.testing.assert_array_equal(chunk[..., :S * K], np.concatenate([a[..., :S * K] for a in alone]))
    np.testing.assert_array_equal(book.uncollateralized(chunk),
                                  np.concatenate([book.uncollateralized(a) for a in alone[:KEPT_SETS]]))
    for side in ("cva", "dva"):
        np.testing.assert_array_equal(book.contributions(chunk, side),
                                      np.concatenate([book.contributions(a, side) for a in alone[:KEPT_SETS]]))
    assert not chunk[..., S * K:].transpose(1, 0, 2).reshape(L, -1)[:, KEPT_SETS * record:].any()      # the pad
    np.testing.assert_array_equal(book.aggregate(cube[:3]), np.concatenate(alone[:3]))          # three: side by side

    def per_set(x, values):                                 # every set of the cube x aggregated alone, then mapped
        return np.concatenate([values(book.aggregate(x[s:s + 1])) for s in range(len(x))])

    _, own = run_credits(c, model.rate)
    plans = {"plain": [(1, cube[:3])], "extrapolated": [(2, cube)],
             "mlmc": [(0, cube[:1]), (1, cube[:3]), (1, cube[3:6])]}                     # (splits, sets) per level
    for estimator, levels in plans.items():
        book.estimator = estimator
        ours = _Levels([Level(li, 8 * 2 ** li, k, book.aggregate(x)) for li, (k, x) in enumerate(levels)])
        rows = book.allocations(ours)
        for side in ("cva", "dva"):
            ref = [Level(li, 8 * 2 ** li, k, per_set(x, lambda a, side=side: book.contributions(a, side)))
                   for li, (k, x) in enumerate(levels)]
            for j, row in enumerate(rows):
                est = combine(ref, lambda X, j=j: X[..., j], estimator)
                assert row[f"{side}_allocation"] == float(est["estimate"]), (estimator, side, j)
                assert row[f"{side}_allocation_stderr"] == float(est["stderr"]), (estimator, side, j)
        full = [Level(li, 8 * 2 ** li, k, per_set(x, book.uncollateralized)) for li, (k, x) in enumerate(levels)]
        got, want = (desk_measures(book, model, ours.levels(book.netted),
                                   lambda j, raw=raw: [replace(x, sets=x.sets[..., book.collateralized.index(j), :])
                                                       for x in raw], estimator, 0.95, own)
                     for raw in (book.kept_levels(ours, book.uncollateralized), full))
        for key in ("cva_uncollateralized", "cva_uncollateralized_stderr", "cva", "cva_stderr"):
            assert got[1]["C"]["netting_sets"]["z"][key] == want[1]["C"]["netting_sets"]["z"][key], (estimator, key)
        for key in ("EE_uncollateralized", "collateral", "EE"):
            np.testing.assert_array_equal(np.asarray(got[2][1][key]), np.asarray(want[2][1][key]))


def test_sensitivities_per_counterparty_against_the_closed_form(tmp_path):
    """Long European calls, one counterparty each: CVA_c = (1 - R_c) C_c(0) (1 - e^{-lambda_c T}) on the exposure
    grid, so dCVA_c / dlambda_c = (1 - R_c) C_c(0) T e^{-lambda_c T} (its own curve only) and dCVA_c / dS_i =
    (1 - R_c) (1 - e^{-lambda_c T}) Delta_i for the call on asset i, 0 for the other asset."""
    m = BlackScholes(spot=MARKET["spot"], vol=MARKET["vol"], dividend=[0.0, 0.0], rate=0.03, correlation=0.4)
    calls = [{"style": "european", "payoff": "call", "underlying": {"asset": i}, "strike": 100.0, "maturity": 1.0}
             for i in (0, 1)]
    cps = [{"name": f"C{i}", "recovery": r, "hazard_rate": lam, "netting_sets": [{"name": f"n{i}",
                                                                                  "portfolio": [calls[i]]}]}
           for i, (r, lam) in enumerate([(0.4, 0.02), (0.3, 0.05)])]
    cfg = _desk(tmp_path, "s", cps, sensitivities={"spot": 0.01, "hazard": 0.0001})
    cfg["simulation"]["outer_paths"] = 2000
    res = cva.run(cfg, progress=False)
    sens = res.summary["sensitivities"]
    for i, (r, lam) in enumerate([(0.4, 0.02), (0.3, 0.05)]):
        c = analytic.closed_form_price(Contract("european", "call", "asset", 100.0, 1.0, asset=i), m)
        h = 1e-4 * m.spot[i]
        delta = (analytic.closed_form_price(Contract("european", "call", "asset", 100.0, 1.0, asset=i),
                                            BlackScholes(spot=[s + (h if k == i else 0) for k, s in enumerate(m.spot)],
                                                         vol=m.vol, dividend=[0.0, 0.0], rate=0.03, correlation=0.4))
                 - c) / h
        cs01, se = sens[f"C{i}"]["cs01"]
        assert abs(cs01 - (1 - r) * c * math.exp(-lam)) < Z_MC * se + 1e-3 * abs(cs01), (cs01, se)
        d, dse = sens[f"C{i}"]["delta"][f"asset {i}"]
        assert abs(d - (1 - r) * (1 - math.exp(-lam)) * delta) < Z_MC * dse + 1e-3, (d, dse, delta)
        other, ose = sens[f"C{i}"]["delta"][f"asset {1 - i}"]
        assert abs(other) < Z_MC * ose + 1e-12


def test_trades_file_and_the_run_directory(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "trades.csv").write_text(
        "id,counterparty,netting_set,style,payoff,underlying,strike,maturity,exercise_dates,quantity,weights\n"
        "T1,A,a one,bermudan,put,asset 0,100,1.0,4,1,\n"
        "T2,A,a/two,european,call,1,95,1.0,,-1,\n"
        "T3,B,b,bermudan,put,basket,100,1.0,4,1,1;2\n")
    desk = _desk(tmp_path, "run", [{"name": "A", "recovery": 0.4, "hazard_rate": 0.02,
                                    "netting_sets": [{"name": "a one"}, {"name": "a/two"}]},
                                   {"name": "B", "recovery": 0.4, "hazard_rate": 0.03,
                                    "netting_sets": [{"name": "b"}]}],
                 trades_file="trades.csv")
    path = tmp_path / "cfg" / "desk.yaml"
    path.write_text(json.dumps(desk))                                      # YAML is a superset of JSON
    cfg = load_config(path)                                                # trades_file relative to the YAML file
    assert [c.name for c in cfg.portfolio] == ["T1", "T2", "T3"]
    assert cfg.portfolio[2].weights == (1.0, 2.0) and cfg.portfolio[1].asset == 1
    assert load_config(cfg.to_dict()).portfolio == cfg.portfolio            # the trades travel in the dict
    res = cva.run(path, progress=False)
    out = res.out_dir
    trades = {t["contract"]: t for t in res.summary["trades"]}
    m = BlackScholes(spot=MARKET["spot"], vol=MARKET["vol"], dividend=[0.0, 0.0], rate=0.03, correlation=0.4)
    call = analytic.closed_form_price(Contract("european", "call", "asset", 95.0, 1.0, asset=1), m)
    assert trades["T2"]["value_t0"] == pytest.approx(-call, rel=1e-12) and trades["T2"]["value_t0_stderr"] == 0
    put = analytic.closed_form_price(Contract("european", "put", "asset", 100.0, 1.0, asset=0), m)
    t1 = trades["T1"]                                          # a Bermudan put is worth more than the European
    assert t1["value_t0"] > put - Z_MC * t1["value_t0_stderr"] and t1["value_t0_stderr"] > 0
    assert sorted(p.name for p in (out / "exposures").iterdir()) == ["a_one.csv", "a_two.csv", "b.csv"]
    html = (out / "report.html").read_text()
    assert "a one" in html and "a/two" in html and html.count("<img") == 3
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "complete" and set(s["counterparties"]) == {"A", "B"}
    # overwrite removes the earlier run's exposures, and nothing else of the user's
    (out / "exposures" / "notes.txt").write_text("mine")
    cfg2 = dict(desk, counterparties=[desk["counterparties"][1]])
    cfg2["trades_file"] = str(tmp_path / "cfg" / "b_only.csv")
    (tmp_path / "cfg" / "b_only.csv").write_text((tmp_path / "cfg" / "trades.csv").read_text().splitlines()[0] + "\n"
                                                 + "T3,B,b,bermudan,put,basket,100,1.0,4,1,1;2\n")
    cva.run(cfg2, overwrite=True, progress=False)
    assert sorted(p.name for p in (out / "exposures").iterdir()) == ["b.csv", "notes.txt"]


CSV_HEAD = "id,counterparty,netting_set,style,payoff,underlying,strike,maturity,exercise_dates,quantity\n"


@pytest.mark.parametrize("rows, words", [
    ("T1,Z,a,european,call,0,100,1,,1\n", r"trades_file: row 2: counterparty 'Z' is not in counterparties"),
    ("T1,A,zz,european,call,0,100,1,,1\n", r"trades_file: row 2: netting_set 'zz' is not a netting set of "
                                           r"counterparty 'A' \(it has 'a'\)"),
    ("T1,A,a,european,call,0,abc,1,,1\n", r"trades_file: row 2, column strike: 'abc' is not a number"),
    ("T1,A,a,european,call,0,100,1,,1\nT1,A,a,european,put,0,100,1,,1\n", r"'T1' is used twice \(also at trades_file "
                                                                         r"row 2\) \(trades_file row 3\)"),
    ("T1,A,a,european,call,0,-5,1,,1\n", r"trades_file: row 2, column strike: must be > 0"),
    ("T1,A,a,european,call,7,100,1,,1\n", r"underlying.asset: 7 is out of range.*\(trades_file row 2\)"),
    ("T1,A,a,european,call,0,100,1,,1\nT2,A,a,european,call,0,100,1,,1,,99\n",
     r"trades_file: row 3: 2 more fields than the header's 10 columns \('99'\)"),
])
def test_trades_file_errors_name_the_row_and_column(tmp_path, rows, words):
    (tmp_path / "t.csv").write_text(CSV_HEAD + rows)
    cfg = _desk(tmp_path, "e", [{"name": "A", "hazard_rate": 0.02, "netting_sets": [{"name": "a"}]}],
                trades_file=str(tmp_path / "t.csv"))
    with pytest.raises(ConfigError, match=words):
        load_config(cfg)


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_a_csv_with_any_line_endings_is_read(tmp_path, newline):
    rows = [CSV_HEAD.rstrip("\n"), "T1,A,a,european,call,0,100,1,,1", "T2,A,a,bermudan,put,0,90,1,4,-2"]
    (tmp_path / "t.csv").write_bytes((newline.join(rows) + newline).encode())
    cfg = _desk(tmp_path, "e", [{"name": "A", "hazard_rate": 0.02, "netting_sets": [{"name": "a"}]}],
                trades_file=str(tmp_path / "t.csv"))
    assert [c.id for c in load_config(cfg).portfolio] == ["T1", "T2"]


def test_a_csv_with_a_column_twice(tmp_path):
    (tmp_path / "t.csv").write_text(CSV_HEAD.rstrip("\n") + ",strike\nT1,A,a,european,call,0,100,1,,1,100\n")
    cfg = _desk(tmp_path, "e", [{"name": "A", "hazard_rate": 0.02, "netting_sets": [{"name": "a"}]}],
                trades_file=str(tmp_path / "t.csv"))
    with pytest.raises(ConfigError, match=r"trades_file: .*t.csv: the header has column strike twice"):
        load_config(cfg)


def test_a_csv_without_its_columns(tmp_path):
    (tmp_path / "t.csv").write_text("id,counterparty,style\nT1,A,european\n")
    cfg = _desk(tmp_path, "e", [{"name": "A", "hazard_rate": 0.02, "netting_sets": [{"name": "a"}]}],
                trades_file=str(tmp_path / "t.csv"))
    with pytest.raises(ConfigError, match=r"trades_file: .*t.csv: missing columns netting_set, payoff"):
        load_config(cfg)


@pytest.mark.parametrize("change, words", [
    (lambda c: c.update(portfolio=[PUT]), r"portfolio: a desk with counterparties gives it under counterparties"),
    (lambda c: c["counterparties"][0]["netting_sets"][0].update(csa={"threshold": -1, "margin_period_of_risk": 0.1}),
     r"counterparties\[0\].netting_sets\[0\].csa.threshold: must be >= 0"),
    (lambda c: c["counterparties"][0]["netting_sets"][0].update(csa={"independent_amount": 1e300,
                                                                     "margin_period_of_risk": 0.1}),
     r"counterparties\[0\].netting_sets\[0\].csa.independent_amount: 1e\+300 is beyond what the run can sum"),
    (lambda c: c["counterparties"][0]["netting_sets"][0].update(csa={"margin_period_of_risk": 2.0}),
     r"counterparties\[0\].netting_sets\[0\].csa.margin_period_of_risk: 2 years is not shorter than the horizon"),
    (lambda c: c["counterparties"][0]["netting_sets"][0]["portfolio"].append({**CALL, "id": "P"}),
     r"counterparties\[0\].netting_sets\[0\].portfolio\[1\].id: 'P' is used twice"),
    (lambda c: c["counterparties"].append(dict(c["counterparties"][0])),
     r"counterparties\[1\].name: 'A' is also counterparties\[0\]"),
    (lambda c: c["counterparties"][0]["netting_sets"][0]["portfolio"][0].update(strike=0),
     r"counterparties\[0\].netting_sets\[0\].portfolio\[0\].strike: must be > 0"),
])
def test_desk_config_errors_name_the_key(tmp_path, change, words):
    cfg = _desk(tmp_path, "e", [{"name": "A", "hazard_rate": 0.02,
                                 "netting_sets": [{"name": "a", "portfolio": [{**PUT, "id": "P"}]}]}])
    change(cfg)
    with pytest.raises(ConfigError, match=words):
        load_config(cfg)


def test_the_shipped_desk_runs(tmp_path):
    """configs/desk.yaml with its trades file, at 128 outer paths: every counterparty, netting set and sensitivity
    family in the summary, the sums consistent, a file per netting set."""
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "desk.yaml").to_dict()
    cfg["simulation"]["outer_paths"] = 128
    cfg["run"]["backend"] = "cpu"
    cfg["output"] = {"dir": str(tmp_path / "desk")}
    res = cva.run(cfg, progress=False)
    s = res.summary
    assert len(s["counterparties"]) == 4 and s["netting_sets"] == 6 and len(s["trades"]) == 16
    assert sum(c["cva"] for c in s["counterparties"].values()) == pytest.approx(s["cva"], rel=1e-12)
    for name, c in s["counterparties"].items():
        assert sum(ns["cva"] for ns in c["netting_sets"].values()) == pytest.approx(c["cva"], rel=1e-12)
        assert set(s["sensitivities"][name]) == {"delta", "vega", "rho", "cs01"}
        assert len(s["sensitivities"][name]["delta"]) == 3
    assert sum(ns["collateralized"] for c in s["counterparties"].values() for ns in c["netting_sets"].values()) == 3
    assert len(list((tmp_path / "desk" / "exposures").glob("*.csv"))) == 6


def test_a_single_asset_bermudan_in_a_correlated_market_is_its_one_asset_model(tmp_path):
    """A Bermudan on one asset of three correlated ones is regressed on that asset alone (its continuation value
    depends on it only): its CVA agrees with the same contract in the one-asset market, within the errors of
    the two independent runs."""
    put = {"style": "bermudan", "payoff": "put", "underlying": {"asset": 1}, "strike": 100.0, "maturity": 1.0,
           "exercise_dates": 6}
    sim = {"dates": 6, "outer_paths": 1024, "inner_paths": 128, "basis": "quadratic"}
    three = {"run": {"name": "3", "seed": 4, "backend": "cpu"}, "portfolio": [put],
             "market": {"spot": [90.0, 100.0, 110.0], "vol": [0.3, 0.25, 0.2], "rate": 0.04, "correlation": 0.6},
             "counterparty": {"recovery": 0.4, "hazard_rate": 0.03}, "simulation": sim,
             "output": {"dir": str(tmp_path / "3")}}
    one = {**three, "run": {"name": "1", "seed": 5, "backend": "cpu"}, "output": {"dir": str(tmp_path / "1")},
           "market": {"spot": 100.0, "vol": 0.25, "rate": 0.04}, "portfolio": [{**put, "underlying": {"asset": 0}}]}
    a, b = cva.run(three, progress=False), cva.run(one, progress=False)
    assert abs(a.cva - b.cva) < Z_MC * math.hypot(a.stderr, b.stderr), (a.cva, a.stderr, b.cva, b.stderr)
    assert a.stderr < 0.05 * a.cva                                            # a test that can see a difference


@pytest.mark.parametrize("basis, payoff_regressor, dtypes", [("linear", False, None), ("quadratic", True, None),
                                                            ("linear", False, ("float32", "float64"))])
def test_stacked_regressions_are_bitwise_the_contracts_alone(tmp_path, monkeypatch, basis, payoff_regressor, dtypes):
    """One-asset Bermudans with the same later exercise dates share one Longstaff-Schwartz call (their systems
    stacked), on the same asset or not (each with its own asset's basis scale); the value cube and the solver
    statistics are bitwise those of one call per contract (but for the condition sample, which a stack takes from
    its first systems). Also float32 paths with float64 regressions and strikes that float32 cannot hold (a
    stack's strikes are rounded to the regression's dtype, as a contract's own are)."""
    from cva.engine import nested

    port = [{**PUT, "strike": 100.0}, {**PUT, "underlying": {"asset": 1}, "strike": 90.1, "quantity": 2.0}]
    port += [{**PUT, "strike": k, "quantity": q} for k, q in ((99.3, -2.0), (110.0, 1.5))]
    port += [{**PUT, "payoff": "call", "strike": 100.0}, {**PUT, "maturity": 0.5, "exercise_dates": 2}]
    cfg = _desk(tmp_path, "s", [{"name": "A", "hazard_rate": 0.02, "netting_sets": [{"name": "a", "portfolio": port}]}])
    cfg["simulation"].update(basis=basis, payoff_regressor=payoff_regressor)
    if dtypes is not None:
        cfg["run"]["dtype"], cfg["regression"] = dtypes[0], {"dtype": dtypes[1]}
    stacks = []
    original = nested._stacks

    def recorded(*args):
        out = original(*args)
        stacks.extend(out)
        return out

    monkeypatch.setattr(nested, "_stacks", recorded)
    together = cva.run(cfg, progress=False)
    assert max(len(s) for s in stacks) == 2                   # at least d = 2 a stack: this grid's bound
    assert [0, 1] in stacks                                   # assets 0 and 1 (spots 100 and 95) in one call
    monkeypatch.setattr(nested, "_stacks", lambda plan, inner, g, d: [[ci] for ci in inner])
    alone = cva.run({**cfg, "output": {"dir": str(tmp_path / "alone")}}, progress=False)
    for a, b in zip(together.levels, alone.levels, strict=True):
        np.testing.assert_array_equal(a.sets, b.sets)
    assert together.cva == alone.cva
    # sampled: the conditions from a stack's first rows, the design matrices from the first LSM calls of a date
    sampled = [c for c in together.solver_stats if c.startswith(("cond", "design"))]
    assert together.solver_stats.drop(columns=sampled).equals(alone.solver_stats.drop(columns=sampled))
