"""``trades_file``: a desk's trades as a CSV table, one row per contract, read into the netting sets of the config.

Columns: ``id, counterparty, netting_set, style, payoff, underlying, strike, maturity, exercise_dates,
quantity`` and, for baskets, ``weights``. ``underlying`` is ``basket``, ``max``, ``min``, ``asset i`` or the
asset's index ``i``; ``weights`` are numbers separated by spaces or semicolons; an empty ``exercise_dates``
takes the style's default (european 1, american 50 a year). Every problem names the row (the header is row
1) and the column.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

COLUMNS = ("id", "counterparty", "netting_set", "style", "payoff", "underlying", "strike", "maturity",
           "exercise_dates", "quantity")
OPTIONAL = ("weights",)
MAX_BYTES = 64 << 20                     # a desk's trade table is megabytes, not gigabytes


def read_trades(path) -> tuple[list[dict], list[str]]:
    """The rows of the CSV at ``path`` as contract mappings with their ``counterparty``, ``netting_set`` and
    ``row``, and the problems found (one line each, ``row r, column c: ...``)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:                         # (read with a bound: /dev/zero has no size)
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            size = path.stat().st_size
            return [], [f"{path}: {f'{size:,} bytes' if size > MAX_BYTES else 'no end'}, more than the limit of "
                        f"{MAX_BYTES:,} bytes"]
        text = raw.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")   # (any line ending, as read_text)
    except (OSError, UnicodeDecodeError) as exc:
        return [], [f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"]
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        return [], [f"{path}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} (the header has "
                    f"{', '.join(header) or 'nothing'})"]
    twice = sorted({h for h in header if header.count(h) > 1})
    if twice:
        return [], [f"{path}: the header has column{'s' if len(twice) > 1 else ''} {', '.join(twice)} twice"]
    unknown = [h for h in header if h not in COLUMNS + OPTIONAL]
    if unknown:
        return [], [f"{path}: unknown column{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} (expected "
                    f"{', '.join(COLUMNS + OPTIONAL)})"]
    rows, problems = [], []
    for r, raw in enumerate(reader, start=2):
        extra = [v for v in raw.get(None) or [] if v.strip()]                 # fields beyond the header's columns
        if extra:
            problems.append(f"row {r}: {len(raw[None])} more field{'s' if len(raw[None]) > 1 else ''} than the "
                            f"header's {len(header)} columns ({', '.join(repr(v) for v in extra[:3])})")
            continue
        raw = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        row, bad = _row(raw)
        problems += [f"row {r}, column {c}: {msg}" for c, msg in bad]
        if not bad:
            rows.append({**row, "row": r})
    if not rows and not problems:
        problems.append(f"{path}: no trades (only a header)")
    return rows, problems


def _row(raw) -> tuple[dict, list[tuple[str, str]]]:
    bad = []
    for c in ("id", "counterparty", "netting_set", "style", "payoff", "underlying", "strike", "maturity", "quantity"):
        if not raw.get(c):
            bad.append((c, "empty"))
    if bad:
        return {}, bad
    out = {"id": raw["id"], "counterparty": raw["counterparty"], "netting_set": raw["netting_set"],
           "style": raw["style"].lower(), "payoff": raw["payoff"].lower()}
    u = raw["underlying"].lower()
    if u in ("basket", "max", "min"):
        out["underlying"] = u
    else:
        idx = u.removeprefix("asset").strip()
        if not idx.isdigit():
            bad.append(("underlying", f"must be basket, max, min, 'asset i' or an asset index, got "
                                      f"{raw['underlying']!r}"))
        else:
            out["underlying"] = {"asset": int(idx)}
    for c in ("strike", "maturity", "quantity"):
        x = _number(raw[c])
        if x is None:
            bad.append((c, f"{raw[c]!r} is not a number"))
        else:
            out[c] = x
    if raw.get("exercise_dates"):
        x = _number(raw["exercise_dates"])
        if x is None or x != int(x):
            bad.append(("exercise_dates", f"{raw['exercise_dates']!r} is not a whole number"))
        else:
            out["exercise_dates"] = int(x)
    if raw.get("weights"):
        parts = raw["weights"].replace(";", " ").split()
        ws = [_number(p) for p in parts]
        if any(w is None for w in ws):
            bad.append(("weights", f"{raw['weights']!r} is not a list of numbers (separate them by spaces or ';')"))
        else:
            out["weights"] = ws
    return out, bad


def _number(text):
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None
