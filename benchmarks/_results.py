"""The one writer of benchmarks/results/*.json, shared by the benchmark scripts."""

import json
from pathlib import Path


def write_results(path, result) -> None:
    """Write ``result`` as indented JSON to ``path`` (if given), creating its folder."""
    if not path:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")
