"""The documents a user reads are current: the configuration reference is the one the models generate,
and no text speaks of development sessions (a reader cannot know what they were)."""

import re
import subprocess
from pathlib import Path

import pytest

from cva.io.schema import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_config_reference_is_current():
    assert (ROOT / "docs" / "config.md").read_text(encoding="utf-8") == markdown() + "\n", \
        "docs/config.md is out of date: run `cva schema --out docs/config.md`"


def test_no_session_numbers_in_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    pattern = re.compile(r"\bsessions?[\s-]*\d+", re.IGNORECASE)
    found = []
    for name in files:
        path = ROOT / name
        if path.suffix in (".png", ".npz") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}" for m in pattern.finditer(text)]  # across lines too
    assert not found, f"session numbers in {len(found)} lines, e.g. {found[:5]}"


def _row(section, key):
    """The reference's row of ``key`` in ``section``: (type, bounds, default)."""
    text = markdown()
    part = text[text.index(f"## `{section}`"):]
    part = part[:part.find("\n## ", 1)]
    cells = next(line for line in part.splitlines() if line.startswith(f"| `{key}` |")).split(" | ")
    return cells[1], cells[2], cells[3]


@pytest.mark.parametrize("section, key, shown, bad", [
    ("simulation", "chunk", ">= 2", {"simulation": {"chunk": 0}}),
    ("simulation", "level_paths", "each >= 2", {"simulation": {"estimator": "mlmc", "level_paths": [4, 0]}}),
    ("regression", "rtol", "> 0", {"regression": {"rtol": 0}}),
    ("sensitivities", "rate", "< 0.1", {"sensitivities": {"rate": 0.2}}),
    ("market", "spot", "each > 0", {"market": {"spot": [100, -1]}}),
    ("counterparty", "hazard_rate", ">= 0", {"counterparty": {"recovery": 0.4, "hazard_rate": -0.01}}),
    ("counterparty", "cds_spreads", "each key > 0", {"counterparty": {"recovery": 0.4, "cds_spreads": {0: 0.01}}}),
    ("counterparty.hazards", "times", "each > 0", {"counterparty": {"recovery": 0.4,
                                                                   "hazards": {"times": [0], "rates": [0.01]}}}),
])
def test_the_reference_shows_bounds_inside_types_and_the_models_enforce_them(section, key, shown, bad):
    """A bound inside an optional, a list's entries or a mapping's keys is in the reference's bounds column, and a
    config that breaks it is refused naming the key."""
    from cva.io.config import load_config

    assert shown in _row(section, key)[1]
    cfg = {"market": {"spot": [100, 100], "vol": 0.2, "rate": 0.03},
           "portfolio": [{"style": "european", "payoff": "put", "underlying": {"asset": 0}, "strike": 100,
                          "maturity": 1.0}],
           "counterparty": {"recovery": 0.4, "hazard_rate": 0.02}}
    for name, part in bad.items():
        cfg[name] = {**cfg.get(name, {}), **part}
        if name == "counterparty" and "hazard_rate" not in part:
            cfg[name].pop("hazard_rate")
    with pytest.raises(ValueError, match=re.escape(key)):
        load_config(cfg)


def test_the_reference_writes_defaults_as_yaml():
    assert _row("market", "dividend")[2] == "`[0.0]`" and _row("simulation", "itm_only")[2] == "`true`"
    assert _row("market", "factors")[0] == "integer or mapping (optional)"
