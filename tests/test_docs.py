"""The documents a user reads are current: the configuration reference is the one the models generate,
and no text speaks of development sessions (a reader cannot know what they were)."""

import re
import subprocess
from pathlib import Path

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
