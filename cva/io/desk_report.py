"""The run directory of a desk (``counterparties:``): summary.json with the desk's, each counterparty's and each
netting set's CVA (and DVA), exposures/<netting set>.csv, trades.csv (the Euler allocations), solver_stats.csv and
a self-contained report.html (the counterparty table, a drill-down per netting set with its collateralized and
uncollateralized exposure, the sensitivities)."""

from __future__ import annotations

import base64
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from cva.engine.estimators import combine, decay_warnings, level_table
from cva.io import report, rundir
from cva.xva.desk import desk_measures

OUTPUTS = ("exposures/*.csv",)
TRADE_COLUMNS = ["counterparty", "netting_set", "contract", "quantity", "value_t0", "value_t0_stderr", "cva_allocation",
                 "cva_allocation_stderr", "dva_allocation", "dva_allocation_stderr"]

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Desk xVA report: {{ s.name }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
td, th { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th { background: #eee; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; margin: 0.5em 0; }
.big { font-size: 1.4em; } .note { color: #555; font-size: 0.9em; } .warning { color: #a00; }
</style></head>
<body data-images-total="{{ images|length }}">
<h1>Desk xVA report: {{ s.name }}</h1>
<p class="big">CVA = <b>{{ "%.6g"|format(s.cva) }}</b> &plusmn; {{ "%.3g"|format(s.stderr) }};
95% interval [{{ "%.6g"|format(s.ci_low) }}, {{ "%.6g"|format(s.ci_high) }}]
{%- if s.own_credit %}<br>DVA = <b>{{ "%.6g"|format(s.dva) }}</b> &plusmn; {{ "%.3g"|format(s.dva_stderr) }}
{%- endif %}</p>
<p class="note">{{ estimator_note }}</p>
<p>{{ s.counterparties|length }} counterparties, {{ s.netting_sets }} netting sets, {{ s.portfolio|length }} trades;
{{ s.outer_paths }} outer paths, {{ s.inner_paths }} inner paths on the finest level, {{ s.exposure_dates }}
exposure dates; backend {{ s.device }}, {{ s.dtype }}; {{ "%.2f"|format(s.elapsed_seconds) }} s.
Value cube: {{ s.value_cube.shape|join(" x ") }} ({{ "%.3g"|format(s.value_cube.megabytes) }} MB), aggregated chunk
by chunk where it was computed to {{ "%.3g"|format(s.value_cube.aggregated_megabytes) }} MB.</p>
<p class="note">Each trade is valued once; each netting set nets its trades' values path by path, less the
collateral of its CSA (ORE's classical model: C(t) from V(t - MPR), threshold, MTA, independent amount);
exposure E(t) = (V(t) - C(t))<sup>+</sup>. Default is independent of the market (no wrong-way risk);
{% if s.own_credit %}bilateral, first to default: CVA = (1 - R<sub>C</sub>) &sum;<sub>k</sub>
E[D(t<sub>k</sub>) E<sup>+</sup>(t<sub>k</sub>)] (S<sub>C</sub>(t<sub>k-1</sub>) - S<sub>C</sub>(t<sub>k</sub>))
S<sub>B</sub>(t<sub>k-1</sub>), DVA likewise on E<sup>-</sup> with the roles swapped.
{% else %}CVA = (1 - R) &sum;<sub>k</sub> E[D(t<sub>k</sub>) E<sup>+</sup>(t<sub>k</sub>)]
(S(t<sub>k-1</sub>) - S(t<sub>k</sub>)).{% endif %} A counterparty's CVA is the sum over its netting sets, the
desk's over its counterparties; their standard errors come from the per-path sums (one set of outer paths).</p>
""" + report.MARKET_NOTES + """<h2 id="counterparties">Counterparties</h2>
<table><tr><th>counterparty</th><th>CVA</th><th>std. error</th>{% if s.own_credit %}<th>DVA</th>
<th>std. error</th>{% endif %}<th>netting sets</th></tr>
{% for name, c in s.counterparties.items() %}<tr><td><a href="#cp-{{ loop.index }}">{{ name }}</a></td>
<td>{{ "%.6g"|format(c.cva) }}</td><td>{{ "%.3g"|format(c.cva_stderr) }}</td>
{% if s.own_credit %}<td>{{ "%.6g"|format(c.dva) }}</td><td>{{ "%.3g"|format(c.dva_stderr) }}</td>{% endif %}
<td>{{ c.netting_sets|length }}</td></tr>
{% endfor %}</table>
{% for name, c in s.counterparties.items() %}{% set outer = loop.index %}
<h2 id="cp-{{ outer }}">{{ name }}</h2>
<table><tr><th>netting set</th><th>trades</th><th>CSA</th><th>CVA</th><th>std. error</th>
<th>CVA uncollateralized</th>{% if s.own_credit %}<th>DVA</th>{% endif %}<th>EPE</th><th>EEPE</th></tr>
{% for ns_name, ns in c.netting_sets.items() %}<tr><td>{{ ns_name }}</td><td>{{ ns.trades }}</td>
<td>{{ "yes" if ns.collateralized else "no" }}</td><td>{{ "%.6g"|format(ns.cva) }}</td>
<td>{{ "%.3g"|format(ns.cva_stderr) }}</td>
<td>{{ "%.6g"|format(ns.cva_uncollateralized) if ns.collateralized else "" }}</td>
{% if s.own_credit %}<td>{{ "%.6g"|format(ns.dva) }}</td>{% endif %}
<td>{{ "%.6g"|format(ns.EPE) }}</td><td>{{ "%.6g"|format(ns.EEPE) }}</td></tr>
{% endfor %}</table>
{% for ns_name in c.netting_sets %}<img src="data:image/png;base64,{{ images[(name, ns_name)] }}"
alt="exposure of {{ ns_name }}">{% endfor %}
{% endfor %}
{% if s.sensitivities %}<h2 id="sensitivities">CVA sensitivities per counterparty</h2>
<table><tr><th>counterparty</th><th>derivative of its CVA</th><th>value</th><th>std. error</th></tr>
{% for name, fams in s.sensitivities.items() %}
{% for fam, sym in (("delta", "S"), ("vega", "&sigma;")) %}{% for a, v in (fams.get(fam) or {}).items() %}
<tr><td>{{ name }}</td><td>dCVA / d{{ sym|safe }} ({{ a }})</td><td>{{ "%.6g"|format(v[0]) }}</td>
<td>{{ "%.3g"|format(v[1]) }}</td></tr>{% endfor %}{% endfor %}
{% for fam, sym in (("rho", "r"), ("cs01", "&lambda; (its own curve)")) %}{% if fams.get(fam) %}
<tr><td>{{ name }}</td><td>dCVA / d{{ sym|safe }}</td><td>{{ "%.6g"|format(fams[fam][0]) }}</td>
<td>{{ "%.3g"|format(fams[fam][1]) }}</td></tr>{% endif %}{% endfor %}
{% endfor %}</table>
<p class="note">Central differences with common random numbers; standard errors of the paired differences.</p>
{% endif %}
<h2 id="trades">Trades: value today and Euler allocation</h2>
<p class="note">value_t0: the trade's value at t = 0 (quantity x price; Longstaff-Schwartz on the pricing paths for
Bermudan and American trades, the closed form for European ones where there is one). Allocation: per trade,
(1 - R) &sum;<sub>k</sub> D(t<sub>k</sub>) q<sub>k</sub> E[(q<sub>i</sub> V<sub>i</sub>(t<sub>k</sub>) -
c<sub>i</sub>(t<sub>k</sub>)) 1{P(t<sub>k</sub>) &gt; 0}], P the netting set's value net of collateral and
c<sub>i</sub> the trade's share of the collateral (Pykhtin &amp; Rosen: the margin call in proportion to the trade's
value at the margin date, the independent amount in equal parts; none without a CSA): the allocations of a
netting set add up to its CVA.</p>
{{ trades_html|safe }}
<h2 id="levels">Inner-sample bias of the desk's CVA</h2>
{{ levels_html|safe }}
{% for w in s.warnings %}<p class="warning"><b>Warning:</b> {{ w }}</p>{% endfor %}
<h2>Solver statistics</h2>
{{ solver_html|safe }}
<p class="note">Versions: {% for k, v in s.versions.items() %}{{ k }} {{ v }}; {% endfor %}
config hash {{ s.config_hash }}.</p>
</body></html>
"""


def file_names(names) -> list[str]:
    """exposures/<netting set>.csv names: the name with characters other than letters, digits, '.', '_' and '-'
    replaced by '_', a suffix where two would collide."""
    out, seen = [], set()
    for n in names:
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", n).strip("._") or "netting_set"
        name, k = base, 2
        while name.lower() in seen:
            name, k = f"{base}_{k}", k + 1
        seen.add(name.lower())
        out.append(name)
    return out


def finish(cfg, plan, model, book, lv, netted, stats, timings, out_dir, *, device, chunk, elapsed, manifest, own=None,
           sensitivities=None, prices=None, warnings=()):
    """The desk's measures (:func:`cva.xva.desk.desk_measures`), allocations and files, summary.json last; the
    RunResult (``cva`` the desk's, ``exposures`` every netting set's profile with its names). ``prices``: the
    trades' t = 0 prices (:func:`cva.engine.pricing.price`, one row per trade in portfolio order); ``warnings``: the
    sampling's (:func:`cva.engine.nested.sample_levels`), before the level table's."""
    estimator, q = cfg.simulation.estimator, cfg.output.pfe_quantile

    raw = book.kept_levels(lv, book.uncollateralized)

    def uncollateralized(j):                                                   # (netting set j has a CSA)
        return [replace(x, sets=x.sets[..., book.collateralized.index(j), :]) for x in raw]

    total, cps, profiles, per_path = desk_measures(book, model, netted, uncollateralized, estimator, q, own)
    est = combine(per_path, lambda x: x, estimator)
    levels = level_table(per_path, lambda x: x, estimator)
    today = _values_t0(prices, plan)
    trades = [{"counterparty": book.entries[book.set_of[i]].counterparty,
               "netting_set": book.entries[book.set_of[i]].name, **row, **today[i]}
              for i, row in enumerate(book.allocations(lv))]
    solver = report.solver_table(plan, stats)
    totals = {m: int(solver[m].sum()) for m in ("ldlt", "householder_pcr", "eig_truncate", "none")}
    top, n_paths = netted[-1], sum(lv_.paths for lv_ in netted)
    cube = [top.sets.shape[0], top.paths, len(plan.contracts), len(plan.value_index)]
    summary = {
        "name": cfg.run.name, "estimator": estimator,
        "cva": total["cva"], "stderr": total["cva_stderr"], "ci_low": total["cva_ci"][0], "ci_high": total["cva_ci"][1],
        "bias_estimate": float(est["bias_estimate"]), "bias_stderr": float(est["bias_stderr"]),
        "remaining_bias": None if est["remaining_bias"] is None else float(est["remaining_bias"]),
        "remaining_bias_stderr": None if est["remaining_stderr"] is None else float(est["remaining_stderr"]),
        "counterparties": cps, "netting_sets": len(book.entries), "levels": levels,
        "warnings": [*warnings, *decay_warnings(levels)], "pfe_quantile": q,
        "backend": manifest["backend"], "device": device, "dtype": cfg.run.dtype, "seed": cfg.run.seed,
        "outer_paths": n_paths, "inner_paths": netted[-1].inner_paths, "chunk": chunk,
        "exposure_dates": len(plan.exposure_index), "grid_dates": len(plan.grid), "basis": plan.basis,
        "own_credit": None if own is None else {"recovery": own.recovery, "credit": own.description},
        "default_model": "default independent of the market (no wrong-way risk)",
        "value_cube": {"shape": cube, "megabytes": 8 * float(np.prod(cube)) / 1e6,
                       "aggregated_megabytes": lv.value_bytes / 1e6,
                       "axes": "estimator sets (whole inner set, halves, ...), outer paths, trades, value dates",
                       "note": "aggregated chunk by chunk where it was computed (netting sets' values net and gross "
                               "of collateral, the trades' per-path CVA and DVA contributions): the host holds the "
                               "aggregate, not the cube"},
        "portfolio": [{"name": c.name, "description": c.describe(), "quantity": c.quantity} for c in plan.contracts],
        "trades": trades,
        "solver": {"systems": int(solver["systems"].sum()), "method_mix": totals,
                   "failed": int(solver["failed"].sum())},
        "elapsed_seconds": elapsed, "runtime_seconds": dict(timings), "versions": report._versions(),
        "pricing_seconds": None if prices is None else float(prices.attrs["seconds"]),
        "config_hash": manifest["config_hash"], "config": cfg.to_dict(),
        "correlation_repair": cfg.market.correlation_repair, "factors": cfg.market.factor_model,
    }
    if own is not None:
        summary.update({"dva": total["dva"], "dva_stderr": total["dva_stderr"], "dva_ci_low": total["dva_ci"][0],
                        "dva_ci_high": total["dva_ci"][1]})
    if sensitivities is not None:
        summary["sensitivities"] = sensitivities
    summary["status"] = "complete"
    if not report._finite(summary):
        bad = report._non_finite(summary)
        raise ValueError(f"the run's results are not finite ({', '.join(bad[:3])}): an input overflows "
                         f"{cfg.run.dtype} (spot, strike, quantity or vol too large)")
    text = json.dumps(summary, indent=2, default=report._json_default, allow_nan=False)
    names = file_names([e.name for e in book.entries])
    exposures = pd.concat([p.assign(counterparty=e.counterparty, netting_set=e.name)
                           for p, e in zip(profiles, book.entries, strict=True)], ignore_index=True)
    if out_dir is not None:
        _write(Path(out_dir), cfg, book, profiles, names, solver, summary, text)
    return report.RunResult(cva=summary["cva"], stderr=summary["stderr"], ci=(summary["ci_low"], summary["ci_high"]),
                            exposures=exposures, solver_stats=solver, summary=summary, out_dir=out_dir,
                            values=netted[-1].sets[0], contributions=per_path[-1].sets[0], levels=netted)


def _values_t0(prices, plan) -> list[dict]:
    """Each trade's value today: quantity x the closed form where one exists, else x the Monte Carlo price. (From
    the table's columns at once: a pandas row per trade deep-copies the table's attrs, 13 s for 400 trades.)"""
    if prices is None:
        return [{} for _ in plan.contracts]
    cf, mc, se = (prices[c].to_numpy(dtype=float) for c in ("closed_form", "price", "stderr"))
    out = []
    for i, c in enumerate(plan.contracts):
        q = c.quantity
        out.append({"value_t0": q * float(cf[i]), "value_t0_stderr": 0.0} if np.isfinite(cf[i]) else
                   {"value_t0": q * float(mc[i]), "value_t0_stderr": abs(q) * float(se[i])})
    return out


def _plot(prof, title):
    """The netting set's exposure profile as a PNG (matplotlib's object interface with fixed axes: one drawing,
    no pyplot state, a third faster than pyplot with a tight bounding box)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.5, 3.2), dpi=90)
    ax = fig.add_axes((0.07, 0.14, 0.6, 0.76))
    t = prof["date"].to_numpy()
    for col, style, color, label in (("EE_uncollateralized", "o--", "tab:gray", "EE uncollateralized"),
                                     ("EE", "o-", "tab:blue", "EE (collateralized where a CSA applies)"),
                                     ("ENE", "s-", "tab:red", "ENE"),
                                     ("collateral", ":", "tab:green", "E[collateral]")):
        ax.plot(t, np.broadcast_to(prof[col].to_numpy(dtype=float), t.shape), style, color=color, label=label)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("t (years)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _write(out_dir, cfg, book, profiles, names, solver, summary, text):
    from jinja2 import Environment

    (out_dir / "exposures").mkdir(parents=True, exist_ok=True)
    images = {}
    for prof, e, name in zip(profiles, book.entries, names, strict=True):
        rundir.write_text(out_dir / "exposures" / f"{name}.csv", prof.to_csv(index=False))
        images[(e.counterparty, e.name)] = base64.b64encode(_plot(prof, f"{e.counterparty}: {e.name}")).decode()
    trades = pd.DataFrame(summary["trades"], columns=TRADE_COLUMNS)
    rundir.write_text(out_dir / "trades.csv", trades.to_csv(index=False))
    rundir.write_text(out_dir / "solver_stats.csv", solver.to_csv(index=False))
    trades = trades.dropna(axis=1, how="all")
    html = Environment(autoescape=True).from_string(TEMPLATE).render(
        s=summary, images=images, estimator_note=report._estimator_note(summary),
        trades_html=report._table(trades, "trades", 5), levels_html=report._table(pd.DataFrame(summary["levels"]),
                                                                                  "levels", 4),
        solver_html=report.solver_tables(solver))
    rundir.write_text(out_dir / "report.html", html)
    rundir.write_text(out_dir / "summary.json", text)
