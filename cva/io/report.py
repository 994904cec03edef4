"""The run directory of ``cva run``: summary.json, exposures.csv, solver_stats.csv, PNG plots and
a self-contained report.html (images embedded as data URIs, rendered with jinja2)."""

from __future__ import annotations

import base64
import io
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cva.engine.estimators import decay_warnings
from cva.io import rundir
from cva.xva import measures


def pfe_label(q: float) -> str:
    """``PFE (97.5%)`` for the quantile ``q`` of ``output.pfe_quantile``."""
    return f"PFE ({100 * q:.6g}%)"


def plot_titles(pfe_quantile: float = measures.PFE_LEVEL) -> dict:
    """The report's plots and their titles."""
    return {
        "exposure.png": f"Exposure profile: EE with its error band, ENE and the {pfe_label(pfe_quantile)} band",
        "levels.png": "Convergence of the levels: |mean| and variance of the corrections",
        "condition.png": "Condition numbers of the regression normal equations (the robust solver's cond_max test)",
        "method_mix.png": "Solver method per regression system (LDLᵀ, then Householder + PCR, then the truncated "
                          "eigen-solve), by valuation date",
        "timings.png": "Time per stage",
    }


PLOTS = plot_titles()

TRADE_COLUMNS = ["contract", "quantity", "cva_allocation", "cva_allocation_stderr", "dva_allocation",
                 "dva_allocation_stderr"]
OUTPUTS = ("summary.json", "exposures.csv", "solver_stats.csv", "trades.csv", "report.html") + tuple(PLOTS)

#: The column headers of the report's tables (the CSV files keep the keys).
HEADERS = {
    "date": "t (years)", "exposure_date": "exposure date", "ldlt": "LDLᵀ", "householder_pcr": "Householder + PCR",
    "eig_truncate": "eigen-truncated", "max_residual": "max residual", "cond_median": "cond median",
    "cond_p99": "cond 99%", "cond_max": "cond max", "cond_samples": "cond samples", "EE_stderr": "EE std. error",
    "mean_value": "mean value", "EE_uncorrected": "EE uncorrected", "default_prob": "default prob.",
    "cva_contribution": "CVA contribution", "inner_paths": "inner paths", "outer_paths": "outer paths",
    "fine_mean": "fine mean", "fine_variance": "fine variance", "cost_per_path": "cost per path",
    "seconds_per_path": "seconds per path", "stderr": "std. error", "design_p": "basis size p",
    "design_rank_min": "design rank (min)", "design_rank_deficient": "rank < p", "design_cond_median":
    "design κ² median", "design_samples": "design samples",
}

#: The notes on the market the run used (a repaired correlation, KLT factors), in both reports.
MARKET_NOTES = """\
{% if s.correlation_repair %}<p class="note" id="correlation-repair">The correlation given was not positive
semidefinite (smallest eigenvalue {{ "%.3g"|format(s.correlation_repair.eigenvalues_before[0]) }}): the run uses the
nearest correlation matrix (Higham's alternating projections, {{ s.correlation_repair.iterations }} iterations),
{{ "%.3g"|format(s.correlation_repair.distance_frobenius) }} away in the Frobenius norm; its smallest eigenvalue is
{{ "%.3g"|format(s.correlation_repair.eigenvalues_after[0]) }}. Eigenvalues before: {{
s.correlation_repair.eigenvalues_before|map("round", 4)|join(", ") }}; after: {{
s.correlation_repair.eigenvalues_after|map("round", 4)|join(", ") }}.</p>{% endif %}
{% if s.factors %}<p class="note" id="factors">The {{ s.factors.d }} assets are driven by {{ s.factors.k }}
factor{{ "s" if s.factors.k > 1 }}: the leading ones of the Karhunen-Loeve transform of the correlation (Jacobi
eigensolver), each asset's loadings scaled to unit norm so that its volatility is kept. They explain {{
"%.2f"|format(100 * s.factors.explained_total) }}% of the variance; the model's correlation is {{
"%.3g"|format(s.factors.correlation_distance_frobenius) }} away from the one given (Frobenius norm).</p>
<table><tr><th>factor</th><th>explained</th><th>cumulative</th></tr>
{% set ns = namespace(total=0.0) %}{% for e in s.factors.explained %}{% set ns.total = ns.total + e %}
<tr><td>{{ loop.index }}</td>
<td>{{ "%.2f"|format(100 * e) }}%</td><td>{{ "%.2f"|format(100 * ns.total) }}%</td></tr>{% endfor %}</table>{% endif %}
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>CVA report: {{ s.name }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
td, th { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; overflow-wrap: anywhere; }
.wide td { overflow-wrap: normal; white-space: nowrap; } .wide th { overflow-wrap: normal; }
th { background: #eee; } td:first-child, th:first-child { text-align: left; }
.wide { overflow-x: auto; max-width: 100%; }
.wide table { font-size: 0.75em; margin: 0.5em 0; } .wide td, .wide th { padding: 0.2em 0.35em; }
.wide th { font-weight: 600; vertical-align: bottom; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; margin: 0.5em 0; }
.big { font-size: 1.4em; } .note { color: #555; font-size: 0.9em; } .warning { color: #a00; }
</style></head>
<body data-images-total="{{ images|length }}">
<h1>CVA report: {{ s.name }}</h1>
<p class="big">CVA = <b>{{ "%.6g"|format(s.cva) }}</b> &plusmn; {{ "%.3g"|format(s.stderr) }} (std. error);
95% interval [{{ "%.6g"|format(s.ci_low) }}, {{ "%.6g"|format(s.ci_high) }}]
{%- if s.own_credit %}<br>DVA = <b>{{ "%.6g"|format(s.dva) }}</b> &plusmn; {{ "%.3g"|format(s.dva_stderr) }};
95% interval [{{ "%.6g"|format(s.dva_ci_low) }}, {{ "%.6g"|format(s.dva_ci_high) }}]{% endif %}</p>
<p class="note" id="inner-bias">{{ estimator_note }}</p>
<p>{{ s.outer_paths }} outer paths in all, {{ s.inner_paths }} inner paths on the finest level,
{{ s.exposure_dates }} exposure dates,
{{ s.grid_dates }} grid dates; backend {{ s.device }}, {{ s.dtype }}
{%- if s.regression_dtype != s.dtype %} ({{ s.regression_dtype }} regressions){% endif %};
{{ "%.2f"|format(s.elapsed_seconds) }} s.
Counterparty: recovery {{ s.recovery }}, {{ s.credit }}.
{%- if s.own_credit %} Own credit: recovery {{ s.own_credit.recovery }}, {{ s.own_credit.credit }}.{% endif %}</p>
{% if s.own_credit %}<p class="note">Default is assumed independent of the market (no wrong-way risk); bilateral,
first to default (C the counterparty, B ourselves): CVA = (1 - R<sub>C</sub>) &sum;<sub>k</sub>
E[D(t<sub>k</sub>) P<sup>+</sup>(t<sub>k</sub>)]
(S<sub>C</sub>(t<sub>k-1</sub>) - S<sub>C</sub>(t<sub>k</sub>)) S<sub>B</sub>(t<sub>k-1</sub>),
DVA = (1 - R<sub>B</sub>) &sum;<sub>k</sub> E[D(t<sub>k</sub>) P<sup>-</sup>(t<sub>k</sub>)]
(S<sub>B</sub>(t<sub>k-1</sub>) - S<sub>B</sub>(t<sub>k</sub>)) S<sub>C</sub>(t<sub>k-1</sub>),
P<sup>-</sup> = max(-P, 0).</p>
{% else %}<p class="note">Default is assumed independent of the market (no wrong-way risk): the CVA is
(1 - R) &sum;<sub>k</sub> E[D(t<sub>k</sub>) P<sup>+</sup>(t<sub>k</sub>)] (S(t<sub>k-1</sub>) - S(t<sub>k</sub>)).</p>
{% endif %}
""" + MARKET_NOTES + """<h2>Measures</h2>
<table><tr><th>EPE</th><th>EEPE</th><th>max EE</th><th>max {{ pfe }}</th></tr>
<tr><td>{{ "%.6g"|format(s.EPE) }}</td><td>{{ "%.6g"|format(s.EEPE) }}</td><td>{{ "%.6g"|format(s.max_EE) }}</td>
<td>{{ "%.6g"|format(s.max_PFE) }}</td></tr></table>
<h2>Portfolio</h2>
<table><tr><th>contract</th><th>quantity</th><th>CVA allocation (Euler)</th><th>std. error</th></tr>
{% for c in s.portfolio %}<tr><td>{{ c.name }}: {{ c.description }}</td><td>{{ c.quantity }}</td>
{%- set t = s.trades[loop.index0] if s.trades|length > loop.index0 else none %}
<td>{{ "%.6g"|format(t.cva_allocation) if t else "" }}</td>
<td>{{ "%.3g"|format(t.cva_allocation_stderr) if t else "" }}</td></tr>
{% endfor %}</table>
<p class="note">A contract's allocation is (1 - R) &sum;<sub>k</sub> D(t<sub>k</sub>) q<sub>k</sub> E[q<sub>i</sub>
V<sub>i</sub>(t<sub>k</sub>) 1{P(t<sub>k</sub>) &gt; 0}], by the same estimator (under a CSA, on q<sub>i</sub>
V<sub>i</sub> - c<sub>i</sub> with c<sub>i</sub> the contract's share of the collateral, Pykhtin &amp; Rosen's: the
margin call in proportion to its value at the margin date, the independent amount in equal parts): the allocations
add up to the CVA.</p>
{% if s.sensitivities %}<h2 id="sensitivities">CVA sensitivities</h2>
<table><tr><th>derivative of the CVA</th><th>value</th><th>std. error</th></tr>
{% for fam, sym in (("delta", "S"), ("vega", "&sigma;")) %}{% for name, v in (s.sensitivities.get(fam) or {}).items() %}
<tr><td>dCVA / d{{ sym|safe }} ({{ name }})</td><td>{{ "%.6g"|format(v[0]) }}</td>
<td>{{ "%.3g"|format(v[1]) }}</td></tr>
{% endfor %}{% endfor %}
{% for fam, sym in (("rho", "r"), ("cs01", "&lambda;")) %}{% if s.sensitivities.get(fam) %}
<tr><td>dCVA / d{{ sym|safe }}</td><td>{{ "%.6g"|format(s.sensitivities[fam][0]) }}</td>
<td>{{ "%.3g"|format(s.sensitivities[fam][1]) }}</td></tr>{% endif %}{% endfor %}</table>
<p class="note">Central differences with common random numbers (the bumped markets valued on the same keyed
streams, in every chunk next to the base; the hazard bump reweights the base run); the standard errors are those
of the paired differences.</p>
{% endif %}
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
{% if captions[name] %}<p class="note">{{ captions[name] }}</p>{% endif %}
{% endfor %}
<h2>Exposures</h2>
{{ exposures_html|safe }}
<h2>Solver statistics</h2>
<p class="note">Per valuation date: the regressions solved and the method each needed; the condition numbers of
a sample of the normal equations; and the design matrices of the first outer paths' regressions, by the Jacobi
SVD: their smallest effective rank (singular values above &sigma;<sub>max</sub> / &radic;cond_max, those the
eigen fallback keeps) against the basis size p, how many fall below p, and the median &kappa;(X)<sup>2</sup>,
the condition the normal equations inherit. A rank below p (too few in-the-money paths, or regressors nearly
collinear on them) is where LDL<sup>T</sup> breaks down and the eigen fallback takes over.</p>
{{ solver_html|safe }}
<p class="note">Versions: {% for k, v in s.versions.items() %}{{ k }} {{ v }}; {% endfor %}
config hash {{ s.config_hash }}.</p>
<script>
window.addEventListener("load", function () {
  var imgs = document.images, ok = 0;
  for (var i = 0; i < imgs.length; i++) { if (imgs[i].complete && imgs[i].naturalWidth > 0) ok++; }
  document.body.setAttribute("data-images-rendered", String(ok));
  var root = document.documentElement, wide = document.querySelectorAll(".wide"), over = [];
  for (var j = 0; j < wide.length; j++) { if (wide[j].scrollWidth > wide[j].clientWidth) over.push(wide[j].id); }
  document.body.setAttribute("data-scroll-width", String(root.scrollWidth));
  document.body.setAttribute("data-client-width", String(root.clientWidth));
  document.body.setAttribute("data-tables-overflowing", over.join(" "));
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
        design = np.asarray(stats.design[g], dtype=float).reshape(-1, 3)        # (rank, p, kappa^2)
        rows.append({"date": plan.grid[g], "exposure_date": bool(is_exposure[g]), **row,
                     "cond_median": q[0], "cond_p99": q[1], "cond_max": cond.max() if cond.size else np.nan,
                     "cond_samples": int(cond.size),
                     "design_p": int(design[:, 1].max()) if design.size else 0,
                     "design_rank_min": int(design[:, 0].min()) if design.size else 0,
                     "design_rank_deficient": int(np.sum(design[:, 0] < design[:, 1])),
                     "design_cond_median": float(np.median(design[:, 2])) if design.size else np.nan,
                     "design_samples": int(design.shape[0])})
    cols = ["date", "exposure_date", "systems", "regressions", "ldlt", "householder_pcr", "eig_truncate", "none",
            "max_residual", "discarded", "failed", "cond_median", "cond_p99", "cond_max", "cond_samples", "design_p",
            "design_rank_min", "design_rank_deficient", "design_cond_median", "design_samples"]
    return pd.DataFrame(rows, columns=cols)


def date_labels(dates, digits=2, most=12) -> list[str]:
    """The dates with the fewest decimals (at least ``digits``) that tell them apart."""
    dates = np.asarray(dates, dtype=float)
    for d in range(digits, most + 1):
        labels = [f"{t:.{d}f}" for t in dates]
        if len(set(labels)) == len(labels):
            return labels
    return [f"{t:.{most}g}" for t in dates]


def _legend_above(ax, ncol):
    """The legend in a row above the axes: it covers no data."""
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=ncol, frameon=False, fontsize=8,
              borderaxespad=0.0)


def exposure_caption(prof, pfe_quantile) -> str:
    """What the exposure plot shows, and why it starts where it does."""
    t1 = float(prof["date"].iloc[0])
    return (f"The run values the netting set on the exposure dates only (the first at t = {t1:.4g}); today's value "
            f"V(0) is not simulated, so the profiles start at the first exposure date (dotted line) and the axis at "
            f"t = 0, with nothing drawn before t = {t1:.4g}. Shaded: EE \u00b1 1.96 standard errors (orange) and EE "
            f"to the {pfe_label(pfe_quantile)} (blue; the {100 * pfe_quantile:.6g}% quantile of the finest level's "
            f"positive values, not bias-corrected).")


def _plots(prof, solver, stats, timings, levels, pfe_quantile=measures.PFE_LEVEL, cond_max=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    pfe = pfe_label(pfe_quantile)

    def save(name, fig):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        out[name] = buf.getvalue()

    fig, ax = plt.subplots(figsize=(7, 4))
    t, ee = prof["date"].to_numpy(), prof["EE"].to_numpy()
    band = measures.Z95 * prof["EE_stderr"].to_numpy(dtype=float)
    if len(t) > 1:
        ax.fill_between(t, ee, prof["PFE"], color="tab:blue", alpha=0.15, lw=0, label=f"EE to {pfe}")
        if np.isfinite(band).all():
            ax.fill_between(t, ee - band, ee + band, color="tab:orange", alpha=0.5, lw=0,
                            label="EE \u00b1 1.96 std. errors")
    else:                                                                        # one date: bars, not bands
        ax.vlines(t, ee, prof["PFE"], color="tab:blue", alpha=0.3, lw=8, label=f"EE to {pfe}")
        if np.isfinite(band).all():
            ax.vlines(t, ee - band, ee + band, color="tab:orange", alpha=0.7, lw=8, label="EE \u00b1 1.96 std. errors")
    ax.plot(t, ee, "o-", color="tab:blue", ms=4, label="EE")
    ax.plot(t, prof["PFE"], "--", color="tab:blue", lw=1, label=pfe)
    ax.plot(t, prof["ENE"], "s-", color="tab:red", ms=3, label="ENE")
    ax.axvline(t[0], color="tab:gray", ls=":", lw=1, label=f"first exposure date t = {t[0]:.4g}")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlim(0, t[-1] * 1.02)
    ax.set_xlabel("t (years)")
    ax.set_ylabel("exposure (currency units)")
    _legend_above(ax, 3)
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
        _legend_above(ax, 2)
    else:
        ax.text(0.5, 0.5, "no correction level", ha="center", transform=ax.transAxes)
    save("levels.png", fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    cond = np.concatenate([np.asarray(c, dtype=float) for c in stats.cond] + [np.empty(0)])
    singular = int(np.sum(cond == np.inf))
    cond = cond[np.isfinite(cond) & (cond > 0)]
    if cond.size:
        ax.hist(np.log10(cond), bins=50, color="tab:purple", label="sampled normal equations XᵀX")
        if cond_max is not None:
            ax.axvline(np.log10(cond_max), color="k", ls="--", lw=1,
                       label=f"regression.cond_max = {cond_max:.3g}: the truncated eigen-solve\n"
                             "drops the eigenvalues below \u03bb_max / cond_max")
        ax.set_xlabel("log10 of the 2-norm condition number"
                      + (f" ({singular} singular not shown)" if singular else ""))
        _legend_above(ax, 1)
    else:
        ax.text(0.5, 0.5, "no regression (European contracts only)", ha="center", transform=ax.transAxes)
    ax.set_ylabel("matrices")
    save("condition.png", fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    if len(solver):
        bottom = np.zeros(len(solver))
        x = np.arange(len(solver))
        methods = [("ldlt", "tab:green", "LDLᵀ"), ("householder_pcr", "tab:orange", "Householder + PCR"),
                   ("eig_truncate", "tab:red", "eigen-truncated")]
        if solver["none"].sum():
            methods.append(("none", "tab:gray", "none"))
        for m, col, label in methods:
            frac = solver[m].to_numpy() / np.maximum(solver["systems"].to_numpy(), 1)
            ax.bar(x, frac, bottom=bottom, color=col, label=label)
            bottom += frac
        labels = date_labels(solver["date"])
        step = max(1, int(np.ceil(len(x) / 60)))                                   # at most 60 labels
        ax.set_xticks(x[::step], labels[::step], rotation=90, fontsize=6 if len(x) > 30 else 8)
        ax.set_xlim(-0.6, len(x) - 0.4)
        ax.set_ylim(0, 1)
        ax.set_ylabel("fraction of systems")
        ax.set_xlabel("valuation date t (years)" + (f"; one label per {step} dates" if step > 1 else ""))
        _legend_above(ax, len(methods))
    else:
        ax.text(0.5, 0.5, "no regression (European contracts only)", ha="center", transform=ax.transAxes)
    save("method_mix.png", fig)

    fig, ax = plt.subplots(figsize=(7, 3))
    names = [k for k, v in timings.items() if v > 0]
    ax.barh(names, [timings[k] for k in names], color="tab:gray")
    ax.set_xlabel("seconds")
    save("timings.png", fig)
    return out


DESIGN_COLUMNS = ["design_p", "design_rank_min", "design_rank_deficient", "design_cond_median", "design_samples"]


def solver_tables(solver) -> str:
    """The solver table in two (it is too wide for a page in one): the methods and conditions, then the design
    matrices' diagnostics, each by date."""
    return (_table(solver.drop(columns=DESIGN_COLUMNS), "solver", 3)
            + _table(solver[["date", "exposure_date", *DESIGN_COLUMNS]], "design", 3))


def _table(df, name, digits) -> str:
    """``df`` as HTML in a horizontally scrolling div, with the report's headers and ``digits`` significant
    digits (the CSV files keep every digit)."""
    df = df.copy()
    if "date" in df:
        df["date"] = date_labels(df["date"], digits=3)
    if "exposure_date" in df:
        df["exposure_date"] = df["exposure_date"].map({True: "yes", False: "no"})
    html = df.rename(columns=HEADERS).rename(columns=lambda c: str(c).replace("_", " ")).to_html(
        index=False, border=0, float_format=lambda x: f"{x:.{digits}g}")
    return f'<div class="wide" id="{name}-table">{html}</div>'


@dataclass
class RunResult:
    """What ``cva.run`` returns (the numbers of ``summary.json`` plus the per-path values)."""

    cva: float
    stderr: float
    ci: tuple
    exposures: pd.DataFrame
    solver_stats: pd.DataFrame
    summary: dict
    out_dir: Path
    values: np.ndarray = field(repr=False)            # (N, K) netting-set values of the finest level
    contributions: np.ndarray = field(repr=False)     # (N,) their per-path CVA contributions
    levels: list = field(repr=False, default_factory=list)   # [cva.engine.estimators.Level]

    def __repr__(self):
        s = self.summary
        return (f"RunResult(cva={self.cva:.6g} +- {self.stderr:.3g}, "
                f"95% interval [{self.ci[0]:.6g}, {self.ci[1]:.6g}], estimator={s.get('estimator')!r}, "
                f"outer_paths={s.get('outer_paths')}, "
                f"inner_paths={s.get('inner_paths')}, out_dir={str(self.out_dir) if self.out_dir else None!r})")



def finish(cfg, plan, model, counterparty, levels, stats, timings, out_dir, *, device, chunk, elapsed, manifest,
           trades=None, own=None, sensitivities=None, twin=None, warnings=()):
    """Measures from the levels' per-path values (:mod:`cva.engine.estimators`), then every file of the run directory,
    summary.json last (none where ``out_dir`` is None); the RunResult. ``warnings``: the sampling's
    (:func:`cva.engine.nested.sample_levels`), before the level table's."""

    q = cfg.output.pfe_quantile
    prof, est, contrib = measures.exposures_and_cva(plan, model, counterparty, levels, cfg.simulation.estimator, q,
                                                          own, twin)
    est["warnings"] = [*warnings, *decay_warnings(est["levels"])]
    solver = solver_table(plan, stats)
    totals = {m: int(solver[m].sum()) for m in ("ldlt", "householder_pcr", "eig_truncate", "none")}
    summary = {
        "name": cfg.run.name, **est, **measures.epe_eepe(prof["date"], prof["EE"]),
        "max_EE": float(prof["EE"].max()), "max_PFE": float(prof["PFE"].max()), "pfe_quantile": q,
        "backend": manifest["backend"], "device": device, "dtype": cfg.run.dtype,
        "regression_dtype": cfg.regression_dtype().name,
        "seed": cfg.run.seed, "outer_paths": sum(lv.paths for lv in levels), "inner_paths": levels[-1].inner_paths,
        "chunk": chunk,
        "exposure_dates": len(plan.exposure_index), "grid_dates": len(plan.grid), "basis": plan.basis,
        "recovery": counterparty.recovery, "credit": counterparty.description,
        "own_credit": None if own is None else {"recovery": own.recovery, "credit": own.description},
        "default_model": "default independent of the market (no wrong-way risk)",
        "portfolio": [{"name": c.name, "description": c.describe(), "quantity": c.quantity} for c in plan.contracts],
        "solver": {"systems": int(solver["systems"].sum()), "method_mix": totals,
                   "failed": int(solver["failed"].sum()),
                   "memory": "per outer path, keyed by contract and regression date (SolverMemory(per_system=True))"},
        "elapsed_seconds": elapsed, "runtime_seconds": dict(timings),
        "versions": _versions(), "config_hash": manifest["config_hash"], "config": cfg.to_dict(),
    }
    ns = {"cva": summary["cva"], "cva_stderr": summary["stderr"], "EPE": summary["EPE"], "EEPE": summary["EEPE"],
          "collateralized": cfg.csa is not None, "trades": len(plan.contracts)}
    if own is not None:
        ns.update({"dva": summary["dva"], "dva_stderr": summary["dva_stderr"]})
    summary["counterparties"] = {"counterparty": {**{k: v for k, v in ns.items() if k.startswith(("cva", "dva"))},
                                                  "netting_sets": {"netting set": ns}}}
    summary["trades"] = list(trades or [])
    summary["csa"] = None if cfg.csa is None else cfg.csa.model_dump()
    summary["correlation_repair"] = cfg.market.correlation_repair
    summary["factors"] = cfg.market.factor_model
    if sensitivities is not None:
        summary["sensitivities"] = sensitivities
    summary["status"] = "complete"
    text = json.dumps(summary, indent=2, default=_json_default, allow_nan=False) if _finite(summary) else None
    if text is None:
        bad = _non_finite(summary)
        shown = ", ".join(bad[:3]) + (f", and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise ValueError(f"the run's results are not finite ({shown}): an input "
                         f"overflows {cfg.run.dtype} (spot, strike, quantity or vol too large)")
    if out_dir is not None:
        _write(Path(out_dir), cfg, prof, solver, stats, timings, summary, text, q)
    return RunResult(cva=est["cva"], stderr=est["stderr"], ci=(est["ci_low"], est["ci_high"]), exposures=prof,
                     solver_stats=solver, summary=summary, out_dir=out_dir, values=levels[-1].sets[0],
                     contributions=contrib, levels=levels)


def _write(out_dir, cfg, prof, solver, stats, timings, summary, text, q):
    """The run directory's files; summary.json last (the run is complete)."""
    from jinja2 import Environment

    out_dir.mkdir(parents=True, exist_ok=True)
    rundir.write_text(out_dir / "exposures.csv", prof.to_csv(index=False))
    rundir.write_text(out_dir / "solver_stats.csv", solver.to_csv(index=False))
    trades = pd.DataFrame(summary["trades"], columns=TRADE_COLUMNS)
    rundir.write_text(out_dir / "trades.csv", trades.to_csv(index=False))
    images = _plots(prof, solver, stats, timings, summary["levels"], q, cfg.regression.cond_max)
    for name, png in images.items():
        rundir.write_bytes(out_dir / name, png)
    html = Environment(autoescape=True).from_string(TEMPLATE).render(
        s=summary, images=list(plot_titles(q).items()), pfe=pfe_label(q),
        data={k: base64.b64encode(v).decode() for k, v in images.items()},
        captions={"exposure.png": exposure_caption(prof, q)},
        exposures_html=_table(prof.rename(columns={"PFE": pfe_label(q)}), "exposures", 5),
        levels_html=_table(pd.DataFrame(summary["levels"]), "levels", 4),
        estimator_note=_estimator_note(summary), solver_html=solver_tables(solver))
    rundir.write_text(out_dir / "report.html", html)
    rundir.write_text(out_dir / "summary.json", text)


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
    cv = s.get("control_variate")
    if cv:
        tail += (f" The European twins of the contracts (Black-Scholes along the outer paths, one control per exposure "
                 f"date) served as control variates: the outer sampling variance is {cv['variance_ratio']:.3g} of "
                 "what it would be without them.")
    return f"{head} {tail}"
