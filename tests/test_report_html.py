"""report.html is self-contained and every image renders in headless Chromium (Debian's
`chromium`, installed by .ci/run): the page's own script counts the decoded images."""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

import cva

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: Appended to a copy of the report: the page's and each table's width after layout, on <body>.
PROBE = """<script>window.addEventListener("load", function () {
  var root = document.documentElement, body = document.body, wide = [];
  document.querySelectorAll("table").forEach(function (t, i) {
    if (t.getBoundingClientRect().right > body.getBoundingClientRect().right + 0.5) wide.push(i);
  });
  body.setAttribute("data-probe", root.scrollWidth + " " + root.clientWidth + " " + wide.join(","));
});</script>"""


def _wide_config(tmp_path, **output):
    """24 exposure dates, an mlmc level table and a portfolio of long names: the widest tables."""
    name = "a Bermudan put on the basket of both assets, with a long name to wrap " * 2
    book = [{"name": f"{name}{i}", "style": "bermudan", "payoff": "put", "underlying": "basket",
             "strike": 1.0 + 0.02 * i, "maturity": 1.0, "exercise_dates": 24, "quantity": 1.5} for i in range(2)]
    book.append({"name": "x" * 150, "style": "european", "payoff": "call", "underlying": {"asset": 1},
                 "strike": 1.0, "maturity": 1.0})
    return {"run": {"name": "wide", "seed": 5, "backend": "cpu"},
            "market": {"spot": [1.0, 1.0], "vol": 0.2, "rate": 0.05, "correlation": 0.2},
            "portfolio": book, "counterparty": {"recovery": 0.4, "cds_spreads": {1: 0.01, 3: 0.015}},
            "simulation": {"dates": 24, "outer_paths": 32, "inner_paths": 16, "estimator": "mlmc",
                           "level_paths": [32, 16, 16]},
            "output": {"dir": str(tmp_path / "run"), **output}}


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wide")
    return cva.run(_wide_config(tmp), progress=False)


def test_report_renders_every_image(tmp_path):
    assert CHROMIUM, "Debian's chromium is needed for this test: apt-get install chromium (.ci/run does)"
    cfg = {"run": {"name": "html", "seed": 3, "backend": "cpu"},
           "market": {"spot": [1.0, 1.0], "vol": 0.2, "rate": 0.05, "correlation": 0.2},
           "portfolio": [{"name": "<b>put</b>", "style": "bermudan", "payoff": "put", "underlying": "basket",
                          "strike": 1.0, "maturity": 1.0, "exercise_dates": 3}],
           "counterparty": {"recovery": 0.4, "cds_spreads": {1: 0.01, 3: 0.015}},
           "simulation": {"dates": 3, "outer_paths": 200, "inner_paths": 64},
           "output": {"dir": str(tmp_path / "run")}}
    res = cva.run(cfg, progress=False)
    html = (res.out_dir / "report.html").read_text()
    assert "<b>put</b>" not in html and "&lt;b&gt;put&lt;/b&gt;" in html          # user text is escaped
    assert not re.search(r'src="(?!data:)', html)                                   # nothing outside the file
    note = re.search(r'<p class="note" id="inner-bias">(.*?)</p>', html, re.S)
    assert note and "64 inner paths" in note.group(1) and "remaining bias" in note.group(1)     # what it covers
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
                           "--dump-dom",
                           (res.out_dir / "report.html").resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body, proc.stderr[-2000:]
    total = int(re.search(r'data-images-total="(\d+)"', body.group(0)).group(1))
    rendered = re.search(r'data-images-rendered="(\d+)"', body.group(0))
    assert total == 5 and rendered and int(rendered.group(1)) == total, body.group(0)


def test_report_fits_a_1280px_window(wide_run, tmp_path):
    """At 1280 px the page does not scroll sideways and every table (solver statistics of 24 dates, the
    exposures, the mlmc levels, a portfolio of long names) fits the page's width."""
    assert CHROMIUM, "Debian's chromium is needed for this test: apt-get install chromium (.ci/run does)"
    html = (wide_run.out_dir / "report.html").read_text()
    assert len(wide_run.solver_stats) >= 20 and len(wide_run.exposures) == 24
    page = tmp_path / "probe.html"
    page.write_text(html.replace("</body>", PROBE + "</body>"))
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900",
                           "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    probe = re.search(r'<body[^>]*data-probe="(\d+) (\d+) ([\d,]*)"', proc.stdout)
    assert probe, proc.stderr[-2000:]
    scroll, client, wide = int(probe.group(1)), int(probe.group(2)), probe.group(3)
    assert 1000 < client <= 1280 and scroll <= client, (scroll, client)
    assert wide == "", f"tables wider than the page: {wide}"


def test_report_names_methods_not_papers(wide_run):
    html = (wide_run.out_dir / "report.html").read_text()
    assert "paper 001" not in html.lower() and "normal equations" in html


def test_report_states_units_and_the_first_exposure_date(wide_run):
    html = (wide_run.out_dir / "report.html").read_text()
    t1 = wide_run.exposures["date"].iloc[0]
    assert f"the first at t = {t1:.4g}" in html and "EE \u00b1 1.96 standard errors" in html
    assert "CDS par spreads 1y 100 bp, 3y 150 bp" in html


def test_method_mix_labels_tell_close_dates_apart():
    from cva.io.report import date_labels

    assert date_labels([0.04, 1 / 24, 0.08, 1 / 12, 0.5]) == ["0.040", "0.042", "0.080", "0.083", "0.500"]
    assert date_labels([0.25, 0.5]) == ["0.25", "0.50"]


def test_pfe_quantile_is_a_key(tmp_path):
    """output.pfe_quantile sets the PFE column (the quantile of the finest level's P^+) and the report's labels."""
    cfg = {"run": {"name": "pfe", "seed": 3, "backend": "cpu"},
           "market": {"spot": 1.0, "vol": 0.25, "rate": 0.03},
           "portfolio": [{"style": "bermudan", "payoff": "put", "underlying": {"asset": 0}, "strike": 1.0,
                          "maturity": 1.0, "exercise_dates": 4}],
           "counterparty": {"recovery": 0.4, "hazard_rate": 0.02},
           "simulation": {"dates": 4, "outer_paths": 400, "inner_paths": 16},
           "output": {"dir": str(tmp_path / "run"), "pfe_quantile": 0.9}}
    res = cva.run(cfg, progress=False)
    pos = np.maximum(res.values, 0.0)
    np.testing.assert_allclose(res.exposures["PFE"], np.quantile(pos, 0.9, axis=0), rtol=1e-12)
    assert not np.allclose(res.exposures["PFE"], np.quantile(pos, 0.975, axis=0))
    s = json.loads((res.out_dir / "summary.json").read_text())
    assert s["pfe_quantile"] == 0.9 and s["max_PFE"] == pytest.approx(res.exposures["PFE"].max())
    html = (res.out_dir / "report.html").read_text()
    assert "PFE (90%)" in html and "97.5" not in html


@pytest.mark.parametrize("q, words", [(1.0, "must be < 1, got 1"), (0, "must be > 0, got 0"),
                                      (-0.5, "must be > 0, got -0.5"), ("x", "must be a number, got 'x'"),
                                      (True, "must be a number, got true")])
def test_pfe_quantile_out_of_range_is_refused(q, words):
    from cva.io.config import ConfigError, load_config

    cfg = {"market": {"spot": 1.0, "vol": 0.2}, "portfolio": [{"style": "european", "payoff": "call",
                                                               "underlying": {"asset": 0}, "strike": 1,
                                                               "maturity": 1}]}
    assert load_config(cfg).output.pfe_quantile == 0.975                                # the default
    assert load_config({**cfg, "output": {"pfe_quantile": 0.5}}).output.pfe_quantile == 0.5
    with pytest.raises(ConfigError) as info:
        load_config({**cfg, "output": {"pfe_quantile": q}})
    assert str(info.value) == f"output.pfe_quantile: {words}"                           # one line, naming the key


@pytest.mark.parametrize("bad", [{"hazard_rate": 0.02, "cds_spreads": {1: 0.01}}, {}])
def test_counterparty_section_errors_name_the_key(tmp_path, bad):
    from cva.io.config import ConfigError, load_config

    cfg = {"market": {"spot": 1.0, "vol": 0.2}, "portfolio": [{"style": "european", "payoff": "call",
                                                               "underlying": {"asset": 0}, "strike": 1,
                                                               "maturity": 1}],
           "counterparty": {"recovery": 0.4, **bad}}
    with pytest.raises(ConfigError, match="counterparty"):
        load_config(cfg)
