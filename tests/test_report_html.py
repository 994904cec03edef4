"""report.html is self-contained and every image renders in headless Chromium (Debian's
`chromium`, installed by .ci/run): the page's own script counts the decoded images."""

import re
import shutil
import subprocess

import pytest

import cva

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
                           (res.out_dir / "report.html").resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body, proc.stderr[-2000:]
    total = int(re.search(r'data-images-total="(\d+)"', body.group(0)).group(1))
    rendered = re.search(r'data-images-rendered="(\d+)"', body.group(0))
    assert total == 5 and rendered and int(rendered.group(1)) == total, body.group(0)


@pytest.mark.parametrize("bad", [{"hazard_rate": 0.02, "cds_spreads": {1: 0.01}}, {}])
def test_counterparty_section_errors_name_the_key(tmp_path, bad):
    from cva.config import ConfigError, load_config

    cfg = {"market": {"spot": 1.0, "vol": 0.2}, "portfolio": [{"style": "european", "payoff": "call",
                                                               "underlying": {"asset": 0}, "strike": 1,
                                                               "maturity": 1}],
           "counterparty": {"recovery": 0.4, **bad}}
    with pytest.raises(ConfigError, match="counterparty"):
        load_config(cfg)
