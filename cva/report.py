"""The run directory of ``cva run``: summary.json, exposures.csv, solver_stats.csv, PNG plots and
a self-contained report.html (images embedded as data URIs, rendered with jinja2)."""

from __future__ import annotations

import base64
import io
import json
import platform
from pathlib import Path

import numpy as np
import pandas as pd

from cva import measures, rundir
from cva.estimators import decay_warnings

PLOTS = {
    "exposure.png": "Exposure profile: EE, ENE and the 97.5% PFE band",
    "levels.png": "Convergence of the levels: |mean| and variance of the corrections",
    "condition.png": "Condition numbers of the regression matrices (paper 001, Fig. 2)",
    "method_mix.png": "Solver method per regression system, by valuation date",
    "timings.png": "Time per stage",
}

OUTPUTS = ("summary.json", "exposures.csv", "solver_stats.csv", "report.html") + tuple(PLOTS)

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>CVA report: {{ s.name }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
td, th { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th { background: #eee; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
.big { font-size: 1.4em; } .note { color: #555; font-size: 0.9em; } .warning { color: #a00; }
</style></head>
<body data-images-total="{{ images|length }}">
<h1>CVA report: {{ s.name }}</h1>
<p class="big">CVA = <b>{{ "%.6g"|format(s.cva) }}</b> &plusmn; {{ "%.3g"|format(s.stderr) }} (std. error);
95% interval [{{ "%.6g"|format(s.ci_low) }}, {{ "%.6g"|format(s.ci_high) }}]</p>
<p class="note" id="inner-bias">{{ estimator_note }}</p>
<p>{{ s.outer_paths }} outer paths in all, {{ s.inner_paths }} inner paths on the finest level,
{{ s.exposure_dates }} exposure dates,
{{ s.grid_dates }} grid dates; backend {{ s.device }}, {{ s.dtype }}
{%- if s.regression_dtype != s.dtype %} ({{ s.regression_dtype }} regressions){% endif %};
{{ "%.2f"|format(s.elapsed_seconds) }} s.
Counterparty: recovery {{ s.recovery }}, {{ s.credit }}.</p>
<p class="note">Default is assumed independent of the market (no wrong-way risk): the CVA is
(1 - R) &sum;<sub>k</sub> E[D(t<sub>k</sub>) P<sup>+</sup>(t<sub>k</sub>)] (S(t<sub>k-1</sub>) - S(t<sub>k</sub>)).</p>
<h2>Measures</h2>
<table><tr><th>EPE</th><th>EEPE</th><th>max EE</th><th>max PFE (97.5%)</th></tr>
<tr><td>{{ "%.6g"|format(s.EPE) }}</td><td>{{ "%.6g"|format(s.EEPE) }}</td><td>{{ "%.6g"|format(s.max_EE) }}</td>
<td>{{ "%.6g"|format(s.max_PFE) }}</td></tr></table>
<h2>Portfolio</h2>
<table><tr><th>contract</th><th>quantity</th></tr>
{% for c in s.portfolio %}<tr><td>{{ c.name }}: {{ c.description }}</td><td>{{ c.quantity }}</td></tr>{% endfor %}
</table>
<h2 id="levels">Inner-sample bias: the {{ s.estimator }} estimator</h2>
<p class="note">Each level's outer paths value the netting set from M inner paths and from the two halves
of the same inner paths; its correction Y = g(P<sub>M</sub>) - (g(P<sub>a</sub>) + g(P<sub>b</sub>)) / 2 (g: the
per-path CVA contribution) estimates minus the bias a plain estimate at M inner paths carries (of order 1 / M).
{% if s.estimator == "mlmc" %}The CVA is the multilevel sum (level 0: g at the fewest inner paths; then the
corrections) plus the finest correction once more (Richardson); the outer paths per level follow the MLMC
allocation for the measured variances.{% elif s.estimator == "extrapolated" %}The CVA is the Richardson step
2 g(P<sub>M</sub>) - (g(P<sub>a</sub>) + g(P<sub>b</sub>)) / 2 on the same outer paths.{% else %}The CVA is the plain
mean of g(P<sub>M</sub>); its bias is left in and estimated.{% endif %}
Weight: the row's factor in the estimate.</p>
{{ levels_html|safe }}
{% for w in s.warnings %}<p class="warning"><b>Warning:</b> {{ w }}</p>{% endfor %}
{% for name, title in images %}<h2>{{ title }}</h2>
<img src="data:image/png;base64,{{ data[name] }}" alt="{{ title }}">
{% endfor %}
<h2>Exposures</h2>
{{ exposures_html|safe }}
<h2>Solver statistics</h2>
{{ solver_html|safe }}
<p class="note">Versions: {% for k, v in s.versions.items() %}{{ k }} {{ v }}; {% endfor %}
config hash {{ s.config_hash }}.</p>
<script>
window.addEventListener("load", function () {
  var imgs = document.images, ok = 0;
  for (var i = 0; i < imgs.length; i++) { if (imgs[i].complete && imgs[i].naturalWidth > 0) ok++; }
  document.body.setAttribute("data-images-rendered", String(ok));
});
</script>
</body></html>
"""


def _versions():
    import cva
    import linalg_gpu

    v = {"python": platform.python_version(), "numpy": np.__version__, "pandas": pd.__version__,
         "cva": cva.__version__, "linalg_gpu": linalg_gpu.__version__}
    try:
        import cupy

        v["cupy"] = cupy.__version__
    except Exception:
        pass
    return v


def solver_table(plan, stats) -> pd.DataFrame:
    rows = []
    is_exposure = np.zeros(len(plan.grid), dtype=bool)
    is_exposure[plan.exposure_index] = True
    for g, row in enumerate(stats.rows):
        if row["systems"] == 0:
            continue
        cond = np.asarray(stats.cond[g], dtype=float)
        cond = cond[np.isfinite(cond)]
        q = np.quantile(cond, [0.5, 0.99]) if cond.size else [np.nan, np.nan]
        rows.append({"date": plan.grid[g], "exposure_date": bool(is_exposure[g]), **row,
                     "cond_median": q[0], "cond_p99": q[1], "cond_max": cond.max() if cond.size else np.nan,
                     "cond_samples": int(cond.size)})
    cols = ["date", "exposure_date", "systems", "regressions", "ldlt", "householder_pcr", "eig_truncate", "none",
            "max_residual", "discarded", "failed", "cond_median", "cond_p99", "cond_max", "cond_samples"]
    return pd.DataFrame(rows, columns=cols)


def _plots(prof, solver, stats, timings, levels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}

    def save(name, fig):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        out[name] = buf.getvalue()

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(prof["date"], prof["EE"], prof["PFE"], color="tab:blue", alpha=0.2, label="EE to PFE 97.5%")
    ax.plot(prof["date"], prof["EE"], "o-", color="tab:blue", label="EE")
    ax.plot(prof["date"], prof["PFE"], "--", color="tab:blue", lw=1, label="PFE 97.5%")
    ax.plot(prof["date"], prof["ENE"], "s-", color="tab:red", label="ENE")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("t (years)")
    ax.set_ylabel("exposure")
    ax.legend()
    save("exposure.png", fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    corr = [r for r in levels if r["term"] == "Y"]
    if corr:
        m = [r["inner_paths"] for r in corr]
        ax.errorbar(m, [abs(r["mean"]) for r in corr], yerr=[2 * r["stderr"] for r in corr], fmt="o-",
                    color="tab:blue", label="|mean of Y| (weak), 2 std. errors")
        ax.plot(m, [r["variance"] for r in corr], "s-", color="tab:red", label="variance of Y (strong)")
        ref = abs(corr[0]["mean"]) or 1.0
        ax.plot(m, [ref * m[0] / x for x in m], ":", color="tab:gray", label="order 1 / M")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("inner paths M of the level")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no correction level", ha="center", transform=ax.transAxes)
    save("levels.png", fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    cond = np.concatenate([np.asarray(c, dtype=float) for c in stats.cond] + [np.empty(0)])
    cond = cond[np.isfinite(cond) & (cond > 0)]
    if cond.size:
        ax.hist(np.log10(cond), bins=50, color="tab:purple")
        ax.set_xlabel("log10 condition number of the regression matrix")
    else:
        ax.text(0.5, 0.5, "no regression (European contracts only)", ha="center", transform=ax.transAxes)
    ax.set_ylabel("matrices")
    save("condition.png", fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    if len(solver):
        bottom = np.zeros(len(solver))
        x = np.arange(len(solver))
        for m, col in (("ldlt", "tab:green"), ("householder_pcr", "tab:orange"), ("eig_truncate", "tab:red")):
            frac = solver[m].to_numpy() / np.maximum(solver["systems"].to_numpy(), 1)
            ax.bar(x, frac, bottom=bottom, color=col, label=m)
            bottom += frac
        ax.set_xticks(x, [f"{t:.2f}" for t in solver["date"]], rotation=45)
        ax.set_ylabel("fraction of systems")
        ax.set_xlabel("valuation date")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no regression (European contracts only)", ha="center", transform=ax.transAxes)
    save("method_mix.png", fig)

    fig, ax = plt.subplots(figsize=(7, 3))
    names = [k for k, v in timings.items() if v > 0]
    ax.barh(names, [timings[k] for k in names], color="tab:gray")
    ax.set_xlabel("seconds")
    save("timings.png", fig)
    return out


def finish(cfg, plan, model, counterparty, levels, stats, timings, out_dir, *, device, chunk, elapsed, manifest):
    """Measures from the levels' per-path values (:mod:`cva.estimators`), then every file of the run directory,
    summary.json last; the RunResult."""
    from jinja2 import Environment

    from cva.nested import RunResult, exposures_and_cva

    out_dir = Path(out_dir)
    prof, est, contrib = exposures_and_cva(plan, model, counterparty, levels, cfg.simulation.estimator)
    est["warnings"] = decay_warnings(est["levels"])
    solver = solver_table(plan, stats)
    totals = {m: int(solver[m].sum()) for m in ("ldlt", "householder_pcr", "eig_truncate", "none")}
    summary = {
        "name": cfg.run.name, **est, **measures.epe_eepe(prof["date"], prof["EE"]),
        "max_EE": float(prof["EE"].max()), "max_PFE": float(prof["PFE"].max()),
        "backend": manifest["backend"], "device": device, "dtype": cfg.run.dtype,
        "regression_dtype": cfg.regression_dtype().name,
        "seed": cfg.run.seed, "outer_paths": sum(lv.paths for lv in levels), "inner_paths": levels[-1].inner_paths,
        "chunk": chunk,
        "exposure_dates": len(plan.exposure_index), "grid_dates": len(plan.grid), "basis": plan.basis,
        "recovery": counterparty.recovery, "credit": counterparty.description,
        "default_model": "default independent of the market (no wrong-way risk)",
        "portfolio": [{"name": c.name, "description": c.describe(), "quantity": c.quantity} for c in plan.contracts],
        "solver": {"systems": int(solver["systems"].sum()), "method_mix": totals,
                   "failed": int(solver["failed"].sum()),
                   "memory": "per outer path, keyed by contract and regression date (SolverMemory(per_system=True))"},
        "elapsed_seconds": elapsed, "runtime_seconds": dict(timings),
        "versions": _versions(), "config_hash": manifest["config_hash"], "config": cfg.to_dict(),
    }
    summary["status"] = "complete"
    text = json.dumps(summary, indent=2, default=_json_default, allow_nan=False) if _finite(summary) else None
    if text is None:
        raise ValueError(f"the run's results are not finite ({', '.join(_non_finite(summary))}): an input "
                         f"overflows {cfg.run.dtype} (spot, strike, quantity or vol too large)")
    out_dir.mkdir(parents=True, exist_ok=True)
    rundir.write_text(out_dir / "exposures.csv", prof.to_csv(index=False))
    rundir.write_text(out_dir / "solver_stats.csv", solver.to_csv(index=False))
    images = _plots(prof, solver, stats, timings, est["levels"])
    for name, png in images.items():
        rundir.write_bytes(out_dir / name, png)
    html = Environment(autoescape=True).from_string(TEMPLATE).render(
        s=summary, images=list(PLOTS.items()), data={k: base64.b64encode(v).decode() for k, v in images.items()},
        exposures_html=prof.to_html(index=False, float_format=lambda x: f"{x:.6g}"),
        levels_html=pd.DataFrame(summary["levels"]).to_html(index=False, float_format=lambda x: f"{x:.4g}"),
        estimator_note=_estimator_note(summary),
        solver_html=solver.to_html(index=False, float_format=lambda x: f"{x:.3g}"))
    rundir.write_text(out_dir / "report.html", html)
    rundir.write_text(out_dir / "summary.json", text)                   # last: the run is complete
    return RunResult(cva=est["cva"], stderr=est["stderr"], ci=(est["ci_low"], est["ci_high"]), exposures=prof,
                     solver_stats=solver, summary=summary, out_dir=out_dir, values=levels[-1].sets[0],
                     contributions=contrib, levels=levels)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _non_finite(data, key="") -> list[str]:
    """The dotted keys of the non-finite floats in ``data`` (summary.json must be strict JSON)."""
    if isinstance(data, dict):
        return [k for name, v in data.items() for k in _non_finite(v, f"{key}.{name}" if key else str(name))]
    if isinstance(data, (list, tuple)):
        return [k for i, v in enumerate(data) for k in _non_finite(v, f"{key}[{i}]")]
    if isinstance(data, (float, np.floating)) and not np.isfinite(data):
        return [f"{key} = {data}"]
    return []


def _finite(data) -> bool:
    return not _non_finite(data)


def _estimator_note(s) -> str:
    """What the interval covers, in one paragraph."""
    bias = f"{s['bias_estimate']:.3g} \u00b1 {s['bias_stderr']:.3g}"
    if s["estimator"] == "plain":
        head = (f"The plain estimate carries the bias of its {s['inner_paths']} inner paths, estimated at {bias} "
                "from the halves of the inner paths (left in).")
    else:
        head = (f"The bias of a plain estimate at {s['inner_paths']} inner paths, estimated at {bias}, is removed "
                "by the Richardson step.")
    if s["remaining_bias"] is None:
        tail = ("The remaining bias (second order) is not estimated by this estimator; the interval measures the "
                "outer-path sampling only.")
    else:
        tail = (f"The estimated remaining bias is {s['remaining_bias']:.3g} \u00b1 {s['remaining_bias_stderr']:.3g}; "
                "the 95% interval spans the estimate and the estimate less this bias, widened by 1.96 standard "
                "errors of the outer sampling and the bias estimate combined.")
    return f"{head} {tail}"
