"""YAML -> validated, typed run configuration.

``load_config`` reads a YAML file (or takes a mapping) and returns a frozen :class:`Config`; a
user's mistakes come back all at once as a :class:`ConfigError` whose ``problems`` are lines of
the form ``"dotted.key.path: what is wrong (and the fix)"``, e.g.::

    market.vols: unknown key (did you mean 'vol'?)
    portfolio[0].strike: must be > 0, got -5
    simulation.basis: laguerre needs a single asset (d = 1) but the market has d = 3: use linear or quadratic

The schema is the one of ``DESIGN.md`` (section "Configuration"). After validation everything is
normalized: per-asset market data are tuples of length ``d``, every contract has its index, a
name, its weights (basket) and its number of exercise dates, and the output directory is set.

How the problems are collected: every section is a pydantic model derived from ``_Section``,
whose wrap validator (i) reports unknown keys with a suggestion, (ii) runs the section's
cross-field checks on the raw input (``_prepare``), (iii) lets pydantic validate the fields and
turns its errors into short sentences, (iv) once all is valid, normalizes the section (``_finish``)
and runs the checks on the normalized values (``_check``: the limits of the random streams, the
simulation grid), and (v) raises all of them together, so that the enclosing section collects them
with their full paths. Checks that depend on the number of assets d (asset indices, weight
lengths, the Laguerre basis) run at the top level with d inferred from the raw market section, so
they are reported even when other keys are wrong.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from cva.engine.basis import regression_dtype
from cva.market import rng
from cva.market.model import correlation_matrix

__all__ = [
    "Config", "ConfigError", "Contract", "Counterparty", "Hazards", "Market", "Output", "Regression", "Run",
    "Simulation", "SqrtOuter", "load_config", "validate_config",
]

#: Exercise dates per year of an American contract without ``exercise_dates``.
AMERICAN_DATES_PER_YEAR = 50
#: Dates of the simulation grid are t / T rounded to this many digits (T the horizon): closer dates are one.
GRID_DIGITS = 12

_ERR = "cva_config"                 # pydantic error type of the problems written here


class ConfigError(ValueError):
    """An invalid configuration: every problem found, one sentence each.

    Attributes
    ----------
    problems : list of str
        ``"dotted.key.path: what is wrong (and the fix)"``, in the order of the schema; problems of
        the file itself (missing, unreadable, not YAML) have no key.
    source : str or None
        The file the configuration came from, if any.

    ``str()`` gives the problems one per line, each prefixed with ``source`` when there is one.
    """

    def __init__(self, problems, source: str | None = None):
        self.problems = [str(p) for p in problems]
        self.source = None if source is None else str(source)
        super().__init__("\n".join(self.problems))

    def __str__(self) -> str:
        if self.source is None:
            return "\n".join(self.problems)
        return "\n".join(f"{self.source}: {p}" for p in self.problems)


# ---------------------------------------------------------------------------------------------
# problems: how pydantic's errors become sentences


def _fail(msg: str) -> PydanticCustomError:
    """The error to raise from a validator for one problem at the validated key."""
    return PydanticCustomError(_ERR, "{msg}", {"msg": msg})


def _detail(loc, msg: str) -> dict:
    """One problem at ``loc`` (relative to the model being validated), for ``from_exception_data``."""
    return {"type": _fail(msg), "loc": tuple(loc), "input": None}


def _show(v) -> str:
    """A user's value as it appears in a message."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, Mapping):
        return "a mapping"
    if isinstance(v, (list, tuple)):
        return "a list"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v) if isinstance(v, str) else str(v)


def _suggest(word, choices) -> str:
    match = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _unknown_key(key, keys) -> str:
    hint = _suggest(key, keys)
    return "unknown key" + (hint or f" (allowed: {', '.join(keys)})")


def _friendly(err: dict, descriptions: Mapping[str, str] | None = None) -> tuple[tuple, str]:
    """(loc, sentence) for one of pydantic's error dicts."""
    loc, kind, inp, ctx = tuple(err["loc"]), err["type"], err.get("input"), err.get("ctx") or {}
    if kind == _ERR:
        return loc, ctx["msg"]
    prefix = ""
    if loc and loc[-1] == "[key]":                     # a bad key of a mapping (cds_spreads tenor)
        loc, prefix = loc[:-1], "key "
    got = f", got {_show(inp)}"
    if kind == "missing":
        desc = (descriptions or {}).get(loc[-1]) if len(loc) == 1 else None
        msg = "required" + (f": {desc}" if desc else "")
    elif kind == "extra_forbidden":
        msg = "unknown key"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op, bound = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"),
                     "less_than": ("<", "lt"), "less_than_equal": ("<=", "le")}[kind]
        msg = f"must be {op} {_show(ctx[bound])}{got}"
    elif kind in ("int_type", "int_parsing", "int_from_float", "int_parsing_size"):
        msg = f"must be an integer{got}"
    elif kind in ("float_type", "float_parsing"):
        msg = f"must be a number{got}"
    elif kind == "finite_number":
        msg = f"must be a finite number{got}"
    elif kind in ("bool_type", "bool_parsing"):
        msg = f"must be true or false{got}"
    elif kind in ("string_type", "string_unicode"):
        msg = f"must be a string{got}"
    elif kind == "literal_error":
        options = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        msg = f"must be one of {', '.join(options)}{got}" + (_suggest(inp, options) if isinstance(inp, str) else "")
    elif kind in ("list_type", "tuple_type", "iterable_type"):
        msg = f"must be a list{got}"
    elif kind in ("dict_type", "model_type", "model_attributes_type", "mapping_type"):
        msg = f"must be a mapping (key: value){got}"
    elif kind == "too_short":
        n = ctx.get("min_length", 1)
        msg = f"must have at least {n} entr{'y' if n == 1 else 'ies'}, got {ctx.get('actual_length', 0)}"
    elif kind == "too_long":
        msg = f"must have at most {ctx.get('max_length')} entries, got {ctx.get('actual_length')}"
    elif kind == "string_too_short":
        msg = "must not be empty"
    elif kind in ("value_error", "assertion_error"):
        msg = str(ctx.get("error", err.get("msg", "invalid value")))
    else:
        text = str(err.get("msg", "invalid value"))
        msg = text[:1].lower() + text[1:] + got
    return loc, prefix + msg


def _dotted(loc) -> str:
    """``('portfolio', 1, 'strike')`` -> ``'portfolio[1].strike'``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        loc, msg = _friendly(err)
        line = f"{_dotted(loc)}: {msg}" if loc else msg
        if line not in out:
            out.append(line)
    return out


# ---------------------------------------------------------------------------------------------
# value types


#: A float with an exponent, which YAML 1.1 (``yaml.safe_load``) leaves as text unless its exponent is signed and
#: its mantissa has a point: "1.0e5", "1e5", ".5e1" (this module's loader reads them as numbers).
EXPONENT_FLOAT = re.compile(r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+")


def _no_bool(v):
    """A number: not a bool, nor text (a quoted "64" is a mistake), except a float with an exponent
    (:data:`EXPONENT_FLOAT`), which YAML 1.1's loaders give as text."""
    if isinstance(v, str) and EXPONENT_FLOAT.fullmatch(v.strip()):
        return float(v.replace("_", ""))
    if isinstance(v, (bool, np.bool_, str)):
        raise _fail(f"must be a number, got {_show(v)}")
    return v


def _no_bool_int(v):
    if isinstance(v, (bool, np.bool_, str)):
        raise _fail(f"must be an integer, got {_show(v)}")
    return v


def _bool_only(v):
    if not isinstance(v, (bool, np.bool_)):                # (a quoted "no" would read as true)
        raise _fail(f"must be true or false, got {_show(v)}")
    return bool(v)


def whole_number(value, name: str, low: int) -> int:
    """``value`` as an int >= ``low`` (an integral float too: 1e5), else a TypeError or ValueError naming ``name``
    (for the Python API's arguments: ``cva.run(chunk=)``, ``cva.price(paths=)``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating)):
        raise TypeError(f"{name} must be an integer >= {low}, got {value!r}")
    if isinstance(value, (float, np.floating)) and not (math.isfinite(value) and float(value).is_integer()):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


Num = Annotated[float, BeforeValidator(_no_bool), Field(allow_inf_nan=False)]
Int = Annotated[int, BeforeValidator(_no_bool_int)]
Flag = Annotated[bool, BeforeValidator(_bool_only)]


def _tenor_key(v):
    """A mapping's number key; as text too, as JSON writes every key (a run's config read back)."""
    if isinstance(v, (bool, np.bool_)):
        raise _fail(f"must be a number, got {_show(v)}")
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            raise _fail(f"must be a number, got {_show(v)}") from None
    return v


TenorKey = Annotated[float, BeforeValidator(_tenor_key), Field(allow_inf_nan=False)]


def _per_asset(**bounds):
    """A number or a non-empty list of numbers, each within ``bounds``, as a tuple (length 1 for a
    number: ``Market`` broadcasts it to d)."""
    item = Annotated[float, BeforeValidator(_no_bool), Field(allow_inf_nan=False, **bounds)]
    one = TypeAdapter(item)

    def as_list(v):
        return v if isinstance(v, (list, tuple)) else [one.validate_python(v)]

    return Annotated[tuple[item, ...], Field(min_length=1), BeforeValidator(as_list)]


_PositivePerAsset = _per_asset(gt=0)
_NonnegativePerAsset = _per_asset(ge=0)
_PerAsset = _per_asset()



def _parse_correlation(v):
    """(value, None) with value a float or a tuple of row tuples, or (None, why) for a wrong type."""
    def number(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if number(v):
        return (float(v), None) if math.isfinite(v) else (None, f"must be finite, got {v}")
    if isinstance(v, (list, tuple)) and v and all(isinstance(r, (list, tuple)) for r in v):
        if not all(number(x) for r in v for x in r):
            return None, "matrix entries must be numbers"
        if len({len(r) for r in v}) != 1:
            return None, f"matrix rows have different lengths {[len(r) for r in v]}"
        return tuple(tuple(float(x) for x in r) for r in v), None
    return None, f"must be a number (equicorrelation) or a d x d matrix (a list of rows), got {_show(v)}"


def _market_d(raw: Mapping) -> tuple[int | None, list[tuple[tuple, str]]]:
    """The number of assets d from the raw market section, and the problems if it is ambiguous.

    d is the common length of the per-asset lists (spot, vol, dividend), else ``assets``, else 1;
    None when it cannot be told (lists of different lengths, ``assets`` contradicting them).
    """
    lengths = {k: len(raw[k]) for k in ("spot", "vol", "dividend")
               if isinstance(raw.get(k), (list, tuple)) and len(raw[k]) > 0}
    assets = raw.get("assets")
    assets = assets if isinstance(assets, int) and not isinstance(assets, bool) and assets >= 1 else None
    if len(set(lengths.values())) > 1:
        given = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        return None, [((), f"per-asset lists have different lengths ({given} entries): give each of them "
                           "one entry per asset, or a single number for all assets")]
    if lengths:
        n = next(iter(lengths.values()))
        if assets is not None and assets != n:
            keys = " and ".join(lengths)
            return None, [(("assets",), f"{assets} contradicts the {n} entries of {keys}: "
                                        f"drop assets or make them agree")]
        return n, []
    if "assets" in raw and raw["assets"] is not None and assets is None:
        return None, []                                          # invalid `assets`: its field reports it
    return assets or 1, []


# ---------------------------------------------------------------------------------------------
# the sections


class _Section(BaseModel):
    """Base of every section: unknown keys with suggestions, cross-field checks and friendly
    messages, all problems of the section raised together (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    #: Fields that are filled in by the validation and are not keys a user may write.
    _internal: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def _keys(cls) -> list[str]:
        return [f.alias or name for name, f in cls.model_fields.items() if name not in cls._internal]

    @classmethod
    def _prepare(cls, data: dict) -> tuple[dict, list[tuple[tuple, str]]]:
        """Cross-field checks on the raw input; may rewrite it (and drops what it reported)."""
        return data, []

    @classmethod
    def _loc(cls, loc: tuple) -> tuple:
        """Where a field's error is shown to the user (for internal fields)."""
        return loc

    def _finish(self) -> None:
        """Normalization once every field is valid (sets fields with ``_set``)."""

    def _check(self) -> list[tuple[tuple, str]]:
        """Cross-field checks on the normalized section (after ``_finish``)."""
        return []

    def _set(self, **values) -> None:
        for k, v in values.items():
            object.__setattr__(self, k, v)                       # frozen for users, not for us

    @model_validator(mode="wrap")
    @classmethod
    def _validate_all(cls, data, handler):
        if isinstance(data, cls):
            return data
        problems: list[tuple[tuple, str]] = []
        if isinstance(data, Mapping):
            keys = cls._keys()
            clean = {}
            for k, v in data.items():
                if k in keys:
                    clean[k] = v
                else:
                    problems.append(((str(k),), _unknown_key(k, keys)))
            data, more = cls._prepare(clean)
            problems += more
        result = None
        try:
            result = handler(data)
        except ValidationError as exc:
            descriptions = {f.alias or name: f.description for name, f in cls.model_fields.items() if f.description}
            errors = exc.errors()
            # pydantic adds "too short" to a list whose entries failed: keep only the entries' problems
            deeper = {tuple(e["loc"][:k]) for e in errors for k in range(len(e["loc"]))}
            found = [_friendly(err, descriptions) for err in errors
                     if not (err["type"] == "too_short" and tuple(err["loc"]) in deeper)]
            problems = [(cls._loc(loc), msg) for loc, msg in found] + problems
        if not problems:
            result._finish()
            problems = result._check()
        if problems:
            problems.sort(key=lambda p: _schema_order(cls, p[0]))
            raise ValidationError.from_exception_data(cls.__name__, [_detail(loc, msg) for loc, msg in problems])
        return result


def _section_in(annotation):
    """The ``_Section`` class inside a field's annotation (``Contract`` for ``tuple[Contract, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, _Section):
        return annotation
    for arg in typing.get_args(annotation):
        found = _section_in(arg)
        if found is not None:
            return found
    return None


def _schema_order(cls, loc) -> tuple:
    """Sort key of a problem: the position of each key in its section (unknown keys last), list indices."""
    key, model = [-1], cls
    for part in loc:
        if isinstance(part, int):
            key.append(part)
            continue
        keys = model._keys() if model is not None else []
        key.append(keys.index(part) if part in keys else len(keys))
        field = model.model_fields.get(part) if model is not None else None
        model = _section_in(field.annotation) if field is not None else None
    return tuple(key)


def _plain_text(v):
    """A name or path without control characters (a newline would split the run's log lines and name a directory
    no shell shows; a NUL no file system takes)."""
    if isinstance(v, str) and any(ord(ch) < 32 or ord(ch) == 127 for ch in v):
        raise _fail(f"must not hold control characters (newline, tab, NUL), got {_show(v)}")
    return v


def _scheduler_address(v) -> bool:
    """``tcp://``, ``tls://`` or ``ucx://`` and a host name, an IPv4 address or a bracketed IPv6 one (a zone after
    ``%`` too), with an optional port from 1 to 65535."""
    m = re.fullmatch(r"(tcp|tls|ucx)://(\[[0-9A-Fa-f:.]+(%[\w.-]+)?\]|[^\s:/\[\]%]+)(:([0-9]{1,5}))?", v)
    return m is not None and (m.group(5) is None or 1 <= int(m.group(5)) <= 65535)


def _cluster(v):
    if not isinstance(v, str) or not (v in ("local", "local-cuda") or re.fullmatch(r"local:[1-9][0-9]*", v)
                                      or _scheduler_address(v) or re.fullmatch(r"inproc://\S+", v)):
        raise _fail(f"must be local, local:N, local-cuda or a scheduler address such as tcp://host:8786, "
                    f"got {_show(v)}")
    return v


def _factors(v):
    """``market.factors``: a positive integer k, or ``{explained: x}`` with x in (0, 1]."""
    if isinstance(v, int) and not isinstance(v, bool):
        if v < 1:
            raise _fail(f"must be a positive number of factors or {{explained: x}} with x in (0, 1], got {v}")
        return v
    if isinstance(v, Mapping) and set(v) == {"explained"}:
        x = v["explained"]
        if isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 < x <= 1.0:
            return {"explained": float(x)}
        raise _fail(f"explained must be a number in (0, 1] (the share of the variance the factors keep), "
                    f"got {_show(x)}")
    raise _fail(f"must be a positive number of factors k or {{explained: x}} with x in (0, 1], got {_show(v)}")


class Run(_Section):
    """``run``: name, seed, backend and dtype of the run."""

    name: Annotated[str, BeforeValidator(_plain_text)] = Field(
        "run", min_length=1, description="the run's name (names the output directory)")
    seed: Int = Field(
        0, ge=0, lt=2**32, description="the random streams' key: the same seed gives the same numbers on any chunking "
                                       "and device")
    backend: Literal["auto", "cpu", "gpu"] = Field(
        "auto", description="auto: the GPU when CuPy finds one, else the CPU (on a cluster: the workers' GPUs when "
                            "they have them)")
    dtype: Literal["float32", "float64"] = Field(
        "float64", description="the paths' precision (the regressions' is regression.dtype)")
    cluster: Annotated[str, BeforeValidator(_cluster)] | None = Field(
        None, description="run the outer chunks as dask.distributed tasks: local (worker processes; local:N for N), "
                          "local-cuda (a worker per GPU) or tcp://HOST:PORT (a running scheduler); default none")

    @field_validator("name")
    @classmethod
    def _directory_name(cls, v):
        if not v.strip():
            raise _fail("must not be blank: it names the run directory reports/<name>")
        if "/" in v or "\\" in v or v.strip() in (".", ".."):
            raise _fail(f"must be a plain name, without path separators, got {v!r}: it names the run directory "
                        "reports/<name> (set output.dir for another place)")
        return v


class Market(_Section):
    """``market``: d correlated Black-Scholes assets.

    After validation ``spot``, ``vol`` and ``dividend`` are tuples of length ``d`` (= ``assets``)
    and ``correlation`` is a float (equicorrelation) or a d x d tuple of rows.
    """

    spot: _PositivePerAsset = Field(
        description="spot price S0 > 0: one number, or a list with one entry per asset")
    vol: _NonnegativePerAsset = Field(
        description="volatility >= 0: one number, or a list with one entry per asset")
    rate: Num = Field(0.0, description="continuously compounded, flat")
    dividend: _PerAsset = Field((0.0,), description="continuous dividend yield: one number, or one per asset")
    correlation: float | tuple[tuple[float, ...], ...] = Field(
        0.0, description="one number (equicorrelation) or a full d x d matrix")
    assets: Int | None = Field(None, ge=1, description="d, the number of assets, where spot and vol are single numbers")
    repair_correlation: Flag = Field(
        False, description="replace a correlation that is not positive semidefinite by the nearest correlation "
                           "matrix (Higham's alternating projections; reported in summary.json and the report)")
    factors: Annotated[int | dict, BeforeValidator(_factors)] | None = Field(
        None, description="drive the d assets with k < d normals: the leading k factors of the correlation's "
                          "Karhunen-Loeve transform (Jacobi eigensolver), each asset keeping its vol; an integer k "
                          "or {explained: x}, the fewest factors explaining the share x of the variance")
    correlation_repair: dict | None = None
    factor_model: dict | None = None

    _internal = frozenset({"correlation_repair", "factor_model"})

    @classmethod
    def _prepare(cls, data):
        d, problems = _market_d(data)
        if "correlation" in data:
            value, why = _parse_correlation(data["correlation"])
            if value is not None and d is not None:
                try:
                    correlation_matrix(value, d)
                except ValueError as exc:
                    why = str(exc)
                    if "not positive semi-definite" in why:
                        why = None if data.get("repair_correlation") is True else \
                            why + "; set market.repair_correlation: true to use the nearest correlation matrix"
                    elif d == 1 and not isinstance(value, float):
                        why += " (with one asset; give per-asset lists or `assets: d` for more)"
            if why is not None:
                problems.append((("correlation",), why))
                data = {k: v for k, v in data.items() if k != "correlation"}
            else:
                data = {**data, "correlation": value}
        return data, problems

    def _finish(self):
        d = self.assets or max(len(self.spot), len(self.vol), len(self.dividend))

        def full(t):
            return tuple(t) if len(t) == d else tuple(t) * d

        self._set(spot=full(self.spot), vol=full(self.vol), dividend=full(self.dividend), assets=d)
        if self.repair_correlation:
            from cva.market.model import PSD_TOL
            from cva.market.nearest_correlation import nearest_correlation

            C = np.full((d, d), self.correlation) if isinstance(self.correlation, float) else \
                np.asarray(self.correlation, dtype=float)
            np.fill_diagonal(C, 1.0)
            if np.linalg.eigvalsh(0.5 * (C + C.T))[0] < -PSD_TOL:
                fixed = nearest_correlation(C)
                self._set(correlation=tuple(tuple(float(x) for x in row) for row in fixed.matrix),
                          correlation_repair={**fixed.to_json(), "input": self.correlation})

    def _check(self):
        if self.factors is None:
            return []
        if isinstance(self.factors, int) and self.factors > self.d:
            return [(("factors",), f"must be at most d = {self.d} (the number of assets), got {self.factors}")]
        from cva.market.factors import klt_factors

        k, share = (self.factors, None) if isinstance(self.factors, int) else (None, self.factors["explained"])
        C = self.correlation_matrix
        try:
            self._set(factor_model=klt_factors(C, k, explained=share).to_json(C))
        except ValueError as exc:
            return [(("factors",), str(exc))]
        return []

    @property
    def d(self) -> int:
        """The number of assets."""
        return self.assets

    @property
    def correlation_matrix(self) -> np.ndarray:
        """The d x d correlation matrix (a new array each call)."""
        return correlation_matrix(self.correlation, self.d)


class Contract(_Section):
    """One contract of ``portfolio``.

    ``underlying`` is ``"basket"``, ``"max"``, ``"min"`` or ``"asset"`` (then ``asset`` is the
    index; the YAML form is ``underlying: {asset: i}``). ``weights`` is a tuple of d floats for a
    basket (default all ones), else None; the basket value is ``sum(w S) / sum(w)``.
    ``exercise_dates`` is the number m of equally spaced exercise dates on (0, maturity]
    (1 for european). ``index`` is the position in the portfolio.
    """

    _internal = frozenset({"index", "asset"})

    style: Literal["european", "bermudan", "american"] = Field(description="european, bermudan or american")
    payoff: Literal["call", "put"] = Field(description="call or put")
    underlying: Literal["basket", "max", "min", "asset"] = Field(description="basket, max, min or {asset: i}")
    asset: Int | None = Field(
        None, ge=0, validate_default=True, description="the asset's index (from 0), written underlying: {asset: i}")
    weights: Annotated[tuple[Num, ...], Field(min_length=1)] | None = Field(
        None, description="basket weights, one per asset (default all 1): the basket is sum(w S) / sum(w)")
    strike: Num = Field(gt=0, description="the strike K > 0")
    maturity: Num = Field(gt=0, description="the maturity T > 0, in years")
    exercise_dates: Int | None = Field(
        None, ge=1, validate_default=True, description="exercise dates equally spaced on (0, maturity]; american: 50 a "
                                                       "year by default; european: 1")
    quantity: Num = Field(1.0, description="the position: positive long, negative short, not 0")
    name: str | None = Field(
        None, min_length=1, description="a label for the report (default: its id, else its index and description)")
    id: str | None = Field(None, min_length=1, description="the trade's id (unique in a desk's book)")
    index: int = 0

    @classmethod
    def _prepare(cls, data):
        problems = []
        u = data.get("underlying")
        if isinstance(u, Mapping):
            for k in u:
                if k != "asset":
                    problems.append((("underlying", str(k)), _unknown_key(k, ["asset"])))
            data = {**data, "underlying": "asset", "asset": u.get("asset")}
        return data, problems

    @classmethod
    def _loc(cls, loc):
        return ("underlying", *loc) if loc and loc[0] == "asset" else loc

    @field_validator("asset")
    @classmethod
    def _asset_given(cls, v, info: ValidationInfo):
        if v is None and info.data.get("underlying") == "asset":
            raise _fail("required: write underlying: {asset: i} with i the index of the asset (from 0)")
        return v

    @field_validator("weights")
    @classmethod
    def _weights_basket(cls, v, info: ValidationInfo):
        u = info.data.get("underlying")
        if v is not None and u is not None and u != "basket":
            raise _fail(f"weights apply only to underlying: basket (this contract's underlying is {u}): remove them")
        if v is not None and abs(math.fsum(v)) <= 1e-12 * math.fsum(abs(w) for w in v):
            raise _fail("must not sum to zero: the basket is the weighted average sum(w S) / sum(w)")
        return v

    @field_validator("exercise_dates")
    @classmethod
    def _exercise_for_style(cls, v, info: ValidationInfo):
        style = info.data.get("style")
        if style == "european":
            if v not in (None, 1):
                raise _fail(f"a european contract exercises only at maturity, got {v} dates: "
                            "remove exercise_dates or use style: bermudan")
            return 1
        if style == "bermudan" and v is None:
            raise _fail("required for style: bermudan: the number m of equally spaced exercise dates on "
                        "(0, maturity]")
        if style == "american" and v is None and info.data.get("maturity") is not None:
            return max(1, math.ceil(AMERICAN_DATES_PER_YEAR * info.data["maturity"] - 1e-9))
        return v

    @field_validator("quantity")
    @classmethod
    def _nonzero(cls, v):
        if v == 0:
            raise _fail("must be nonzero: positive for a long position, negative for a short one")
        return v

    @property
    def n_exercise(self) -> int:
        """The number m of exercise dates (1 for european)."""
        return self.exercise_dates

    def exercise_times(self) -> np.ndarray:
        """The m exercise dates ``maturity * (1..m) / m``, shape (m,), float64."""
        m = self.exercise_dates
        return self.maturity * np.arange(1, m + 1, dtype=np.float64) / m

    @property
    def description(self) -> str:
        """``"bermudan put basket"``, ``"european call asset 0"``, ..."""
        u = f"asset {self.asset}" if self.underlying == "asset" else self.underlying
        return f"{self.style} {self.payoff} {u}"


class Hazards(_Section):
    """``counterparty.hazards``: a piecewise-constant hazard rate, ``rates[k]`` up to ``times[k]``."""

    times: Annotated[tuple[Annotated[Num, Field(gt=0)], ...], Field(min_length=1)] = Field(
        description="the ends of the rates' intervals, increasing, in years")
    rates: Annotated[tuple[Annotated[Num, Field(ge=0)], ...], Field(min_length=1)] = Field(
        description="the hazard rate on each interval, per year (flat beyond the last)")

    @field_validator("times")
    @classmethod
    def _increasing(cls, v):
        for k in range(1, len(v)):
            if v[k] <= v[k - 1]:
                raise _fail(f"must be increasing: entry [{k}] = {v[k]} follows {v[k - 1]}")
        return v

    @field_validator("rates")
    @classmethod
    def _same_length(cls, v, info: ValidationInfo):
        times = info.data.get("times")
        if times is not None and len(times) != len(v):
            raise _fail(f"has {len(v)} entries but times has {len(times)}: give one rate per time")
        return v


class Counterparty(_Section):
    """``counterparty``: recovery and exactly one of ``hazard_rate``, ``hazards``, ``cds_spreads``."""

    recovery: Num = Field(0.4, ge=0, lt=1, description="the recovery rate R of the counterparty's default")
    hazard_rate: Annotated[Num, Field(ge=0)] | None = Field(None, description="a flat hazard rate, per year")
    hazards: Hazards | None = Field(None, description="piecewise-constant hazard rates")
    cds_spreads: Annotated[dict[Annotated[TenorKey, Field(gt=0)], Annotated[Num, Field(gt=0)]],
                           Field(min_length=1)] | None = Field(
        None, description="par CDS spreads by tenor in years (e.g. {1: 0.01, 5: 0.015}), bootstrapped into hazards")

    _SPECS: ClassVar[tuple[str, ...]] = ("hazard_rate", "hazards", "cds_spreads")

    @classmethod
    def _prepare(cls, data):
        given = [k for k in cls._SPECS if data.get(k) is not None]
        if not given:
            return data, [((), "give one of hazard_rate (flat, e.g. 0.02), hazards ({times: [...], rates: [...]}) "
                               "or cds_spreads ({tenor: spread})")]
        if len(given) > 1:
            return data, [((), f"give only one of hazard_rate, hazards, cds_spreads; got {' and '.join(given)}")]
        return data, []

    def _finish(self):
        if self.cds_spreads is not None:
            self._set(cds_spreads=dict(sorted(self.cds_spreads.items())))

    @property
    def kind(self) -> str:
        """``"flat"`` (hazard_rate), ``"piecewise"`` (hazards) or ``"cds"`` (cds_spreads)."""
        return "flat" if self.hazard_rate is not None else "piecewise" if self.hazards is not None else "cds"


MLMC_LEVEL_PATHS = 2**27   # outer paths per level: level l keys outer paths l * 2^27 + i (cva.market.rng's 2^32 keys)


class SqrtOuter(_Section):
    """``inner_paths: {sqrt_outer: c}``: c * sqrt(outer_paths) inner paths."""

    sqrt_outer: Num = Field(gt=0, description="c in c * sqrt(outer_paths) inner paths")


def _inner_paths(v):
    if isinstance(v, SqrtOuter):
        return v
    if isinstance(v, Mapping):
        return SqrtOuter.model_validate(v)
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise _fail(f"must be an integer >= 2 or {{sqrt_outer: c}}, got {_show(v)}")
    return _INNER_INT.validate_python(v)


_INNER_INT = TypeAdapter(Annotated[int, Field(ge=2, le=rng.PATH_LIMIT)])


def _target_rmse(v):
    """``simulation.target_rmse``: an absolute error > 0, or a relative one as a string ``"0.1%"``."""
    if isinstance(v, str):
        text = v.strip()
        try:
            x = float(text[:-1]) if text.endswith("%") else None
        except ValueError:
            x = None
        if x is None or not (0 < x < 100):
            raise _fail(f"must be a number > 0 or a percentage such as \"0.1%\" (0 < x < 100), got {_show(v)}")
        return text
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise _fail(f"must be a number > 0 or a percentage such as \"0.1%\", got {_show(v)}")
    return float(v)


class Simulation(_Section):
    """``simulation``: grid, path counts, the nested estimator, regression basis and LSM options.

    ``estimator``: ``mlmc`` (antithetic multilevel nested estimator with the Richardson step on the finest
    level; levels of ``min_inner_paths`` to ``inner_paths`` inner paths, doubling), ``extrapolated`` (the
    Richardson step on one level: 2 g(P_M) - (g(P_a) + g(P_b)) / 2) or ``plain`` (with its bias estimate);
    see :mod:`cva.engine.estimators`.
    """

    dates: Int = Field(10, ge=1, description="exposure dates, equally spaced on (0, T], T the longest maturity")
    outer_paths: Int = Field(
        4096, ge=2, le=rng.PATH_LIMIT, description="outer paths (per level of mlmc without target_rmse: the variance a "
                                                   "plain run of this many would have)")
    pricing_paths: Int = Field(
        100_000, ge=2, le=rng.PATH_LIMIT, description="paths of `cva price` (plain LSM at t = 0)")
    inner_paths: Annotated[int | SqrtOuter, BeforeValidator(_inner_paths)] = Field(
        256, description="inner paths per outer path and date (the finest level's), an integer from 2 to "
                         f"{rng.PATH_LIMIT}; or {{sqrt_outer: c}}")
    basis: Literal["linear", "quadratic", "laguerre"] = Field(
        "linear", description="the LSM regressors: linear, quadratic (with the cross terms) or laguerre (one asset)")
    payoff_regressor: Flag = Field(False, description="add the payoff as a regressor")
    itm_only: Flag = Field(True, description="regress on the in-the-money inner paths only (Longstaff & Schwartz)")
    antithetic: Flag = Field(False, description="antithetic inner paths (pairs z, -z)")
    outer_antithetic: Flag = Field(
        True, description="antithetic outer paths (pairs z, -z; the standard errors from the pair means): "
                           "outer_paths, pilot_paths and level_paths must be even")
    out_of_sample: Flag = Field(
        False, description="`cva price`: also the low-biased price of the policy on independent paths")
    chunk: Annotated[Int, Field(ge=2)] | None = Field(
        None, description="outer paths per chunk (default: from the free memory; on a cluster, chunks in a "
                          "multiple of the workers)")
    estimator: Literal["mlmc", "extrapolated", "plain"] = Field(
        "extrapolated", description="how the bias of the finite inner sample is removed: extrapolated, mlmc or plain "
                                    "(see the README)")
    target_rmse: Annotated[float | str, BeforeValidator(_target_rmse)] | None = Field(
        None, description="mlmc: the root mean square error to reach, absolute or relative (\"0.25%\")")
    min_inner_paths: Int = Field(16, ge=2, description="mlmc: the fewest inner paths of a level (the coarsest level), "
                                                       "as far as the three levels the estimator needs allow")
    pilot_paths: Int = Field(
        512, ge=2, le=rng.PATH_LIMIT, description="mlmc: outer paths per level before the allocation")
    level_paths: tuple[Annotated[Int, Field(ge=2, le=MLMC_LEVEL_PATHS)], ...] | None = Field(
        None, description="mlmc: a fixed plan, outer paths per level from the coarsest")
    max_inner_paths: Int = Field(
        16384, ge=4, le=rng.PATH_LIMIT, description="mlmc with target_rmse: the most inner paths a level added for the "
                                                    "bias may have")
    control_variate: Flag = Field(
        False, description="the CVA and DVA with the netting set's European twin (Black-Scholes along the outer "
                           "paths) as control variate; one netting set (portfolio: + counterparty:) only")

    def _check(self):
        n = self.inner_paths_for()
        if n > rng.PATH_LIMIT:
            return [(("inner_paths",), f"sqrt_outer gives {n} inner paths for {self.outer_paths} outer paths, more "
                                       f"than {rng.PATH_LIMIT}: use a smaller sqrt_outer")]
        problems = []
        if self.outer_antithetic:
            for key in ("outer_paths", "pilot_paths", "level_paths"):
                counts = getattr(self, key)
                counts = () if counts is None else counts if isinstance(counts, tuple) else (counts,)
                if any(c % 2 for c in counts):
                    problems.append(((key,), f"must be even with outer_antithetic (pairs of outer paths), got "
                                             f"{_show(getattr(self, key))}"))
        if self.estimator != "mlmc":
            parts = 2 if self.estimator == "plain" else 4                           # halves, or quarters too
            if n % parts or n // parts < 2:
                problems.append((("inner_paths",), f"estimator {self.estimator} splits the inner paths into {parts} "
                                                   f"equal parts of >= 2: use a multiple of {parts} >= {2 * parts}, "
                                                   f"got {n}"))
            for key in ("target_rmse", "level_paths"):
                if getattr(self, key) is not None:
                    problems.append(((key,), f"is for estimator mlmc only (estimator is {self.estimator})"))
            return problems
        levels = self.mlmc_levels()
        if len(levels) < 3 or levels[0] < 2:
            problems.append((("inner_paths",), f"estimator mlmc needs at least 3 levels (inner paths M / 4, M / 2, "
                                               f"M): use a multiple of 4 >= 8, got {n}; or estimator: plain"))
        if self.max_inner_paths < n:
            problems.append((("max_inner_paths",), f"must be >= inner_paths ({n}), got {self.max_inner_paths}"))
        if self.level_paths is not None:
            if self.target_rmse is not None:
                problems.append((("level_paths",), "a fixed plan and target_rmse exclude each other: give one"))
            elif len(levels) >= 3 and len(self.level_paths) != len(levels):
                problems.append((("level_paths",), f"has {len(self.level_paths)} entries, expected one per level: "
                                                   f"{len(levels)} (inner paths {', '.join(map(str, levels))})"))
        return problems

    def mlmc_levels(self) -> list[int]:
        """The inner paths per level of ``mlmc``: ``inner_paths`` halved while even and >= ``min_inner_paths``, and
        at least twice."""
        from cva.engine.estimators import level_counts

        return level_counts(self.inner_paths_for(), self.min_inner_paths)

    def inner_paths_for(self, outer_paths: int | None = None) -> int:
        """Inner paths per (outer path, date): the fixed count, or c sqrt(outer_paths) rounded to the estimator's
        parts (a multiple of 2 for ``plain``, of 4 for the others, and at least two of them)."""
        if isinstance(self.inner_paths, SqrtOuter):
            n = self.outer_paths if outer_paths is None else outer_paths
            unit = 2 if self.estimator == "plain" else 4
            return unit * max(2, round(self.inner_paths.sqrt_outer * math.sqrt(n) / unit))
        return self.inner_paths


class Regression(_Section):
    """``regression``: options of ``linalg_gpu.solve_small`` for the LSM normal equations, and their dtype
    (``auto``: float64 for the Laguerre basis, else the run's; ``run``; ``float64``: see
    :func:`cva.engine.basis.regression_dtype`)."""

    method: Literal["auto", "ldlt", "householder_pcr", "eig_truncate"] = Field(
        "auto", description="the solver of the normal equations: auto is the robust strategy (LDL^T, then Householder +"
                            " PCR, then the truncated eigen-solve)")
    cond_max: Num = Field(
        1e5, gt=1, description="eigenvalues of magnitude below max |lambda| / cond_max are discarded by the "
                                   "eigen-solve")
    rtol: Annotated[Num, Field(gt=0)] | None = Field(
        None, description="the relative residual that sends a system to the next method (default 8 n eps)")
    dtype: Literal["auto", "run", "float64"] = Field(
        "auto", description="auto: float64 for the laguerre basis, else the run's; run; float64")


class Output(_Section):
    """``output``: the run directory (default ``reports/<run.name>``) and the PFE quantile of the report."""

    dir: Annotated[str, BeforeValidator(_plain_text)] | None = Field(
        None, min_length=1, description="the run directory (default reports/<run.name>)")
    pfe_quantile: Num = Field(0.975, gt=0, lt=1, description="the quantile of the PFE, in (0, 1)")


def _period(v):
    """``csa.margin_period_of_risk``: years (a number > 0) or calendar days as ``"10d"`` (/ 365)."""
    if isinstance(v, str):
        text = v.strip()
        try:
            days = float(text[:-1]) if text.endswith("d") else None
        except ValueError:
            days = None
        if days is None or not days > 0:
            raise _fail(f"must be years > 0 or calendar days such as \"10d\", got {_show(v)}")
        return days / 365.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise _fail(f"must be years > 0 or calendar days such as \"10d\", got {_show(v)}")
    return float(v)


class CSA(_Section):
    """``csa``: the netting set's collateral agreement, ORE's classical model: the collateral at t is set from the
    value at t - margin_period_of_risk, C = IA + (V - H)^+ (the counterparty posts) - (-V - H)^+ (we post),
    zero where |the call| < MTA; the exposure is (V(t) - C(t))^+ (:mod:`cva.xva.collateral`)."""

    threshold: Num = Field(0.0, ge=0, description="H, below which no collateral is called (both parties)")
    minimum_transfer_amount: Num = Field(0.0, ge=0, description="MTA: smaller calls are not made")
    independent_amount: Num = Field(0.0, description="IA held from the counterparty (negative: posted by us)")
    margin_period_of_risk: Annotated[float, BeforeValidator(_period)] = Field(
        description="years between the last margin call and the close-out, e.g. 0.04 or \"10d\"")
    posting: Literal["bilateral", "counterparty", "us"] = Field(
        "bilateral", description="who posts variation margin: both, the counterparty only, or we only")


class NettingSet(_Section):
    """``counterparties[i].netting_sets[j]``: a netting set, its collateral agreement and its contracts (with
    ``trades_file``, more come from the CSV's rows that name it)."""

    name: str = Field(min_length=1, description="the netting set's name (unique in the book)")
    csa: CSA | None = Field(None, description="its collateral agreement (none: uncollateralized)")
    portfolio: tuple[Contract, ...] = Field((), description="its contracts, as in portfolio")


class DeskCounterparty(Counterparty):
    """``counterparties[i]``: a counterparty of the desk: ``name``, its recovery and credit curve (as
    ``counterparty``), and its netting sets."""

    name: str = Field(min_length=1, description="the counterparty's name (unique)")
    netting_sets: Annotated[tuple[NettingSet, ...], Field(min_length=1)] = Field(
        description="its netting sets: name, optional csa, portfolio")


class Sensitivities(_Section):
    """``sensitivities``: the CVA's derivatives by central differences with common random numbers (the bumped
    markets are valued in every chunk next to the base, on the same paths, only the trades a bump moves); a
    family is computed when its bump is given."""

    spot: Annotated[Num, Field(gt=0, lt=1)] | None = Field(
        None, description="relative spot bump per asset (e.g. 0.01): dCVA/dS_i")
    vol: Annotated[Num, Field(gt=0, lt=1)] | None = Field(
        None, description="absolute volatility bump per asset (e.g. 0.01): dCVA/dsigma_i")
    rate: Annotated[Num, Field(gt=0, lt=0.1)] | None = Field(
        None, description="absolute rate bump (e.g. 0.0001): dCVA/dr")
    hazard: Annotated[Num, Field(gt=0, lt=1)] | None = Field(
        None, description="parallel shift of the counterparty's hazard rates (e.g. 0.0001): dCVA/dlambda")
    exercise_policy: Literal["base", "bumped"] = Field(
        "base", description="base: in a bumped market each inner path of a Bermudan or American trade exercises "
        "when it did in the base market (the pathwise estimator with the exercise time held fixed, Piterbarg 2004): "
        "no regressions of its own; bumped: every bumped market runs its own regressions, as a whole run in that "
        "market would")


_OPTIONAL_SECTIONS = ("run", "simulation", "regression", "output", "sensitivities", "csa", "counterparties",
                      "trades_file", "portfolio", "counterparty", "own_credit")


@dataclass(frozen=True)
class BookEntry:
    """One netting set of the run's book: its counterparty's name and credit section, its name, CSA and the indices
    of its contracts in ``Config.portfolio``."""

    counterparty: str
    credit: Counterparty
    name: str
    csa: CSA | None
    members: tuple[int, ...]


def _raw_contracts(data):
    """(key path, mapping) of each contract of the raw input: under portfolio or under the netting sets."""
    def listed(x):
        return x if isinstance(x, (list, tuple)) else []
    for i, c in enumerate(listed(data.get("portfolio"))):
        yield ("portfolio", i), c
    for a, cp in enumerate(listed(data.get("counterparties"))):
        for b, ns in enumerate(listed(cp.get("netting_sets")) if isinstance(cp, Mapping) else []):
            for i, c in enumerate(listed(ns.get("portfolio")) if isinstance(ns, Mapping) else []):
                yield ("counterparties", a, "netting_sets", b, "portfolio", i), c


class Config(_Section):
    """A validated run configuration (see ``DESIGN.md``). Build it with :func:`load_config`."""

    run: Run = Field(default_factory=Run)
    market: Market = Field(description="the market section (spot, vol, rate, dividend, correlation)")
    portfolio: Annotated[tuple[Contract, ...], Field(min_length=1)] | None = Field(
        None, description="one netting set's contracts (style, payoff, underlying, strike, maturity, ...); a desk "
                          "gives counterparties instead")
    counterparty: Counterparty | None = Field(
        None, description="the counterparty of portfolio: recovery and one of hazard_rate, hazards, cds_spreads")
    counterparties: Annotated[tuple[DeskCounterparty, ...], Field(min_length=1)] | None = Field(
        None, description="a desk: counterparties, each with name, recovery, a credit curve and netting_sets")
    trades_file: str | None = Field(
        None, min_length=1, description="a CSV of trades (id, counterparty, netting_set, style, payoff, underlying, "
                                        "strike, maturity, exercise_dates, quantity[, weights]) added to the netting "
                                        "sets of counterparties; relative to the YAML file")
    own_credit: Counterparty | None = Field(
        None, description="our own recovery and credit curve (as counterparty's): the CVA becomes first to default "
                          "and the DVA is computed")
    simulation: Simulation = Field(default_factory=Simulation)
    regression: Regression = Field(default_factory=Regression)
    output: Output = Field(default_factory=Output)
    sensitivities: Sensitivities | None = Field(None, description="the bumps of the CVA's sensitivities")
    csa: CSA | None = Field(None, description="the collateral agreement of the netting set")

    @classmethod
    def _prepare(cls, data):
        data = {k: v for k, v in data.items() if not (k in _OPTIONAL_SECTIONS and v is None)}
        data, problems = _book_input(data)
        market = data.get("market")
        d = _market_d(market)[0] if isinstance(market, Mapping) else None
        if d is None:
            return _without_rows(data), problems
        for loc, c in _raw_contracts(data):
            if not isinstance(c, Mapping):
                continue
            u = c.get("underlying")
            a = u.get("asset") if isinstance(u, Mapping) else None
            if isinstance(a, int) and not isinstance(a, bool) and a >= d:
                problems.append(((*loc, "underlying", "asset"),
                                 f"{a} is out of range: the market has d = {d} asset{'s' if d > 1 else ''}, "
                                 f"so use 0 <= asset <= {d - 1}" + _trade_row(c)))
            w = c.get("weights")
            if isinstance(w, (list, tuple)) and len(w) > 0 and len(w) != d:
                problems.append(((*loc, "weights"),
                                 f"has {len(w)} entries, expected one per asset (d = {d})" + _trade_row(c)))
        data = _without_rows(data)
        sim = data.get("simulation")
        if isinstance(sim, Mapping) and sim.get("basis") == "laguerre" and d > 1:
            problems.append((("simulation", "basis"),
                             f"laguerre needs a single asset (d = 1) but the market has d = {d}: "
                             "use linear or quadratic"))
        return data, problems

    def _finish(self):
        d = self.market.d

        def normal(c, i):
            weights = c.weights
            if c.underlying == "basket" and weights is None:
                weights = (1.0,) * d
            name = c.name or c.id or f"{i}: {c.description}"
            return c.model_copy(update={"index": i, "weights": weights, "name": name})

        if self.counterparties is None:
            self._set(portfolio=tuple(normal(c, i) for i, c in enumerate(self.portfolio)))
        else:
            contracts, cps = [], []
            for cp in self.counterparties:
                sets = []
                for ns in cp.netting_sets:
                    mine = tuple(normal(c, len(contracts) + k) for k, c in enumerate(ns.portfolio))
                    contracts += mine
                    sets.append(ns.model_copy(update={"portfolio": mine}))
                cps.append(cp.model_copy(update={"netting_sets": tuple(sets)}))
            self._set(counterparties=tuple(cps), portfolio=tuple(contracts))
        if self.output.dir is None:
            self._set(output=self.output.model_copy(update={"dir": f"reports/{self.run.name}"}))

    def _check(self):
        if self.is_desk and self.simulation.control_variate:
            return [(("simulation", "control_variate"), "is for one netting set (portfolio: with counterparty:) so "
                                                        "far, not for counterparties:")]
        limit, d = rng.step_limit(self.d), self.d
        why = f"the random streams key at most {limit} dates with d = {d} asset{'s' if d > 1 else ''}"
        problems = []
        if self.simulation.dates > limit:
            problems.append((("simulation", "dates"), f"must be <= {limit}, got {self.simulation.dates}: {why}"))
        if not self.portfolio:
            return [(("counterparties",), "the netting sets hold no contracts: give their portfolio or trades_file")]
        for i, c in enumerate(self.portfolio):
            if c.exercise_dates > limit:
                default = f" (american: {AMERICAN_DATES_PER_YEAR} a year by default)" if c.style == "american" else ""
                problems.append(((*self.contract_loc(i), "exercise_dates"),
                                 f"must be <= {limit}, got {c.exercise_dates}{default}: {why}"))
        if problems:
            return problems
        grid, T = self.grid_keys()
        for i, c in enumerate(self.portfolio):
            keys = grid_key(c.exercise_times(), T)
            if keys[0] <= 0 or np.any(np.diff(keys) <= 0):
                problems.append(((*self.contract_loc(i), "maturity"),
                                 f"{_show(c.maturity)} with {c.exercise_dates} exercise date(s) is too short next to "
                                 f"the horizon T = {_show(T)}: the exercise dates must lie at least about "
                                 f"1e-{GRID_DIGITS} T apart and after t = 0 to be distinct dates of the simulation "
                                 "grid; use a longer maturity or fewer exercise_dates"))
        for loc, csa in self.csas():
            if csa.margin_period_of_risk >= T:
                problems.append(((*loc, "margin_period_of_risk"),
                                 f"{csa.margin_period_of_risk:.6g} years is not shorter than the horizon "
                                 f"T = {_show(T)}"))
        if not problems and grid.size > limit:
            problems.append((("simulation", "dates"), f"with the exercise dates of the portfolio the simulation grid "
                                                      f"has {grid.size} dates, more than {limit}: {why}; use fewer "
                                                      "dates or exercise_dates"))
        return problems or self._overflow_problems(T)

    def _overflow_problems(self, T) -> list[tuple[tuple, str]]:
        """Inputs whose prices or values leave the run's dtype: a bound on the asset prices (ten standard
        deviations of the log price up to the horizon), then on each contract's value |q| (K + S) and each CSA's
        independent amount, with e^20 to spare for the sums over paths and dates; the values' squares (the
        standard errors', in float64) bound them to e^345 in a float64 run too."""
        dtype = np.dtype(self.run.dtype)
        room = math.log(float(np.finfo(dtype).max)) - 20.0
        values_room = min(room, 0.5 * (math.log(float(np.finfo(np.float64).max)) - 20.0))
        m, problems = self.market, []
        log_s = []
        for a in range(m.d):
            v = m.vol[a]
            spread = (abs(m.rate) + abs(m.dividend[a]) + 0.5 * v * v) * T + 10.0 * v * math.sqrt(T)
            log_s.append(math.log(m.spot[a]) + spread)
            if log_s[-1] > room:
                key = "vol" if spread > math.log(m.spot[a]) else "spot"
                problems.append((("market", key), f"{_show((m.vol if key == 'vol' else m.spot)[a])} (asset {a}) "
                                                  f"gives asset prices near e^{log_s[-1]:.0f} by the horizon, beyond "
                                                  f"the {dtype.name} range of the run (e^{room + 20:.0f})"))
        if problems:
            return problems
        for i, c in enumerate(self.portfolio):
            if c.underlying == "asset":
                log_u = log_s[c.asset]
            else:
                scale = sum(abs(w) for w in c.weights) / abs(sum(c.weights)) if c.underlying == "basket" else 1.0
                log_u = max(log_s) + math.log(scale)
            log_value = math.log(abs(c.quantity)) + max(math.log(c.strike), log_u) + math.log(2.0)
            if log_value > values_room:
                key = "quantity" if math.log(abs(c.quantity)) > max(math.log(c.strike), log_u) else "strike"
                problems.append(((*self.contract_loc(i), key), f"{_show(getattr(c, key))} gives contract values near "
                                                        f"e^{log_value:.0f}, beyond what the run can sum and square "
                                                        f"(e^{values_room:.0f} in {dtype.name})"))
        tiny = float(np.finfo(dtype).tiny)                   # below it a spot or strike would round towards 0
        problems += [(("market", "spot"), f"{_show(x)} (asset {a}) is below the smallest normal {dtype.name} "
                                          f"({tiny:.3g}): the run would round it towards 0")
                     for a, x in enumerate(m.spot) if x < tiny]
        problems += [((*self.contract_loc(i), "strike"), f"{_show(c.strike)} is below the smallest normal "
                                                         f"{dtype.name} ({tiny:.3g}): the run would round it to 0")
                     for i, c in enumerate(self.portfolio) if c.strike < tiny]
        for loc, csa in self._csas():              # (a threshold or MTA is only compared: any size is a setting)
            x = abs(csa.independent_amount)
            if x > 0 and math.log(x) + math.log(2.0) > values_room:
                problems.append(((*loc, "independent_amount"), f"{_show(csa.independent_amount)} is beyond what the "
                                                               f"run can sum and square (e^{values_room:.0f} in "
                                                               f"{dtype.name})"))
        return problems

    def _csas(self):
        """(key path, CSA) of every collateral agreement in the book."""
        if self.counterparties is None:
            return [] if self.csa is None else [(("csa",), self.csa)]
        return [(("counterparties", i, "netting_sets", j, "csa"), ns.csa) for i, cp in enumerate(self.counterparties)
                for j, ns in enumerate(cp.netting_sets) if ns.csa is not None]

    # -- derived quantities

    @property
    def d(self) -> int:
        """The number of assets (``market.d``)."""
        return self.market.d

    @property
    def is_desk(self) -> bool:
        """Whether the book is given by ``counterparties`` (else ``portfolio`` and ``counterparty``)."""
        return self.counterparties is not None

    @property
    def horizon(self) -> float:
        """T, the longest maturity of the portfolio."""
        return max(c.maturity for c in self.portfolio)

    def exposure_times(self) -> np.ndarray:
        """The ``simulation.dates`` exposure dates ``T * (1..n) / n`` on (0, T], shape (n,)."""
        n = self.simulation.dates
        return self.horizon * np.arange(1, n + 1, dtype=np.float64) / n

    def grid_keys(self) -> tuple[np.ndarray, float]:
        """The simulation grid (the exposure and every exercise date) as its sorted distinct keys
        :func:`grid_key` (t / T rounded), and T (the last exposure date)."""
        exposure = self.exposure_times()
        T = float(exposure[-1])
        times = np.concatenate([exposure, self.margin_times()] + [c.exercise_times() for c in self.portfolio])
        return np.unique(grid_key(times, T)), T

    def margin_times(self) -> np.ndarray:
        """The dates t_k - margin_period_of_risk after 0 whose values set the collateral, for every CSA (none
        without one)."""
        lags = [self.exposure_times() - csa.margin_period_of_risk for _, csa in self.csas()]
        return np.concatenate([lag[lag > 0] for lag in lags]) if lags else np.empty(0)

    def csas(self) -> list[tuple[tuple, CSA]]:
        """(key path, CSA) of every collateral agreement: ``csa``, or those of the netting sets."""
        if self.counterparties is None:
            return [] if self.csa is None else [(("csa",), self.csa)]
        return [(("counterparties", a, "netting_sets", b, "csa"), ns.csa) for a, cp in enumerate(self.counterparties)
                for b, ns in enumerate(cp.netting_sets) if ns.csa is not None]

    def contract_loc(self, i) -> tuple:
        """The key path of contract ``i`` of ``portfolio`` (the flattened book) in the input."""
        if self.counterparties is None:
            return ("portfolio", i)
        for a, cp in enumerate(self.counterparties):
            for b, ns in enumerate(cp.netting_sets):
                if i < len(ns.portfolio):
                    return ("counterparties", a, "netting_sets", b, "portfolio", i)
                i -= len(ns.portfolio)
        raise IndexError(i)

    def book(self) -> list[BookEntry]:
        """The netting sets of the run: those of ``counterparties``, or ``portfolio`` as the one netting set of
        ``counterparty`` (named "counterparty" and "netting set")."""
        if self.counterparties is None:
            return [BookEntry("counterparty", self.require_counterparty(), "netting set", self.csa,
                              tuple(range(len(self.portfolio))))]
        out, first = [], 0
        for cp in self.counterparties:
            for ns in cp.netting_sets:
                out.append(BookEntry(cp.name, cp, ns.name, ns.csa, tuple(range(first, first + len(ns.portfolio)))))
                first += len(ns.portfolio)
        return out

    def require_counterparty(self) -> Counterparty:
        """The counterparty section; raises :class:`ConfigError` when it is missing (``cva run``)."""
        if self.counterparty is None:
            raise ConfigError(["counterparty: required for a CVA run: give recovery and one of hazard_rate, "
                               "hazards or cds_spreads, e.g. {recovery: 0.4, hazard_rate: 0.02}"])
        return self.counterparty

    def regression_dtype(self) -> np.dtype:
        """The dtype of the LSM regressions: ``regression.dtype`` for this run's dtype and basis
        (:func:`cva.engine.basis.regression_dtype`)."""
        return regression_dtype(self.regression.dtype, self.run.dtype, self.simulation.basis)

    def summary(self) -> str:
        """One line: name, d, contracts, dtype (and the regressions' where it differs), backend."""
        n = len(self.portfolio)
        rd = self.regression_dtype().name
        extra = "" if rd == self.run.dtype else f" ({rd} regressions)"
        return (f"{self.run.name}: d = {self.d} asset{'s' if self.d > 1 else ''}, {n} contract{'s' if n > 1 else ''}, "
                f"{self.run.dtype}{extra}, backend {self.run.backend}")

    def to_dict(self) -> dict:
        """The normalized configuration as plain YAML/JSON data, in the input's form (it loads again; a desk's
        trades_file is read into its netting sets)."""
        out = self.model_dump(mode="json", exclude_none=True)
        out["market"].pop("factor_model", None)
        repair = out["market"].pop("correlation_repair", None)
        if repair is not None:
            out["market"]["correlation"] = repair["input"]                    # repaired again when loaded
        if self.counterparties is not None:
            out.pop("portfolio")
            out.pop("trades_file", None)
        portfolios = [out["portfolio"]] if "portfolio" in out else \
            [ns["portfolio"] for cp in out["counterparties"] for ns in cp["netting_sets"]]
        for c in (c for p in portfolios for c in p):
            c.pop("index")
            if c["underlying"] == "asset":
                c["underlying"] = {"asset": c.pop("asset")}
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON with sorted keys: the form a cluster's tasks carry (and cache by)."""
        return json.dumps(self.to_dict(), sort_keys=True)


def _trade_row(c) -> str:
    """" (trades_file row r)" for a contract read from the CSV."""
    return f" (trades_file row {c['row']})" if isinstance(c, Mapping) and "row" in c else ""


def _book_input(data) -> tuple[dict, list[tuple[tuple, str]]]:
    """The raw input's book: ``portfolio`` (+ ``counterparty``, ``csa``) or ``counterparties`` (+ ``trades_file``,
    whose rows join the netting sets they name), not both; ids unique in a desk."""
    from cva.io.trades import read_trades

    problems = []
    if data.get("counterparties") is None and data.get("trades_file") is None:
        if data.get("portfolio") is None:
            problems.append((("portfolio",), "required: a list of contracts (or counterparties with netting_sets)"))
        return data, problems
    for key in ("portfolio", "counterparty", "csa"):
        if data.get(key) is not None:
            where = {"portfolio": "counterparties[i].netting_sets[j].portfolio (or trades_file)",
                     "counterparty": "counterparties[i] (name, recovery, credit curve)",
                     "csa": "counterparties[i].netting_sets[j].csa"}[key]
            problems.append(((key,), f"a desk with counterparties gives it under {where}: remove {key}"))
    cps = data.get("counterparties")
    if cps is None:
        return data, problems + [(("counterparties",), "required with trades_file: the counterparties and their "
                                                       "netting sets the trades name")]
    if not isinstance(cps, (list, tuple)) or not all(isinstance(cp, Mapping) for cp in cps):
        return data, problems
    cps = [{**cp, "netting_sets": [dict(ns) if isinstance(ns, Mapping) else ns for ns in cp.get("netting_sets") or []]}
           for cp in cps]
    where, names = {}, {}
    for a, cp in enumerate(cps):
        if cp.get("name") in names:
            problems.append((("counterparties", a, "name"),
                             f"{cp.get('name')!r} is also counterparties[{names[cp['name']]}]: names are unique"))
        names.setdefault(cp.get("name"), a)
        for b, ns in enumerate(cp["netting_sets"]):
            if not isinstance(ns, Mapping):
                continue
            key = ns.get("name")
            if isinstance(key, str) and key in {k[1] for k in where}:
                problems.append((("counterparties", a, "netting_sets", b, "name"),
                                 f"{key!r} is used twice: netting-set names are unique in the book"))
            where[(cp.get("name"), key)] = ns
    tf = data.get("trades_file")
    if tf is not None:
        if not isinstance(tf, str) or not tf:
            return data, problems + [(("trades_file",), f"must be the path of a CSV file, got {_show(tf)}")]
        rows, bad = read_trades(tf)
        problems += [(("trades_file",), msg) for msg in bad]
        for row in rows:
            ns = where.get((row["counterparty"], row["netting_set"]))
            if ns is None:
                known = [n for (c, n) in where if c == row["counterparty"]]
                what = (f"netting_set {row['netting_set']!r} is not a netting set of counterparty "
                        f"{row['counterparty']!r} (it has {', '.join(map(repr, known))})"
                        if known or row["counterparty"] in names else
                        f"counterparty {row['counterparty']!r} is not in counterparties")
                problems.append((("trades_file",), f"row {row['row']}: {what}"))
                continue
            trade = {k: v for k, v in row.items() if k not in ("counterparty", "netting_set")}
            try:
                Contract.model_validate({k: v for k, v in trade.items() if k != "row"})
            except ValidationError as exc:
                problems += [(("trades_file",), f"row {row['row']}, column {line}") for line in _problems(exc)]
                continue
            ns["portfolio"] = [*(ns.get("portfolio") or []), trade]
    seen = {}
    for loc, c in _raw_contracts({"counterparties": cps}):
        if not isinstance(c, Mapping):
            continue
        ident = c.get("id")
        if ident is None:
            continue
        if ident in seen:
            problems.append(((*loc, "id"), f"{ident!r} is used twice (also at {seen[ident]}){_trade_row(c)}"))
        seen.setdefault(ident, "trades_file row " + str(c["row"]) if "row" in c else _dotted(loc))
    return {**data, "counterparties": cps}, problems


def _without_rows(data) -> dict:
    """The input with the trades_file row numbers (kept for the messages of ``_prepare``) taken out."""
    if data.get("counterparties") is None or not isinstance(data["counterparties"], list):
        return data
    cps = [{**cp, "netting_sets": [{**ns, "portfolio": [{k: v for k, v in c.items() if k != "row"}
                                                        if isinstance(c, Mapping) else c for c in ns["portfolio"]]}
                                   if isinstance(ns, Mapping) and isinstance(ns.get("portfolio"), list) else ns
                                   for ns in cp["netting_sets"]]} for cp in data["counterparties"]]
    return {**data, "counterparties": cps}


def grid_key(t, T) -> np.ndarray:
    """The key of the dates ``t`` on the simulation grid of horizon ``T``: t / T rounded to
    :data:`GRID_DIGITS` digits (dates equal to 12 digits relative to T are one date)."""
    return np.round(np.asarray(t, dtype=np.float64) / T, GRID_DIGITS)


# ---------------------------------------------------------------------------------------------
# reading


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The safe loader (libyaml's C parser where present) that refuses duplicate keys and reads ``1e5`` as a
    number (YAML 1.2)."""


MAX_YAML_BYTES = 1 << 20   # a configuration (with its portfolio) is kilobytes; a larger file is a mistake
MAX_YAML_DEPTH = 32        # sections nest four deep at most


def _construct_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:
            continue                                     # unhashable: construct_mapping reports it
        if first is not None:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (first at line {first + 1})",
                                                    key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(f"^{EXPONENT_FLOAT.pattern}$"),
                              list("-+0123456789."))


def _read_yaml(path: Path):
    src = str(path)
    if not path.exists():
        raise ConfigError(["file not found"], src)
    if path.is_dir():
        raise ConfigError(["is a directory, not a YAML file"], src)
    try:
        with open(path, "rb") as f:                         # (read with a bound: /dev/zero has no size)
            raw = f.read(MAX_YAML_BYTES + 1)
        if len(raw) > MAX_YAML_BYTES:
            size = path.stat().st_size
            raise ConfigError([f"the file has {f'{size:,} bytes' if size > MAX_YAML_BYTES else 'no end'}, more than "
                               f"a configuration's limit of {MAX_YAML_BYTES:,} bytes: is it the right file?"], src)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"cannot read the file: {getattr(exc, 'strerror', None) or exc}"], src) from None
    depth = _nesting_depth(text)
    if depth > MAX_YAML_DEPTH:
        raise ConfigError([f"the YAML nests {depth} levels deep, more than {MAX_YAML_DEPTH}: a configuration's "
                           "sections nest four deep"], src)
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"invalid YAML{where}: {what}"], src) from None
    if data is None:
        raise ConfigError(["the file is empty: a configuration needs at least market and portfolio"], src)
    return data


def _nesting_depth(text: str) -> int:
    """The deepest nesting of the YAML's collections, from libyaml's events (no recursion, no objects)."""
    depth = deepest = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):  # noqa: S506
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                deepest = max(deepest, depth)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        pass                                             # the loader reports it with its line
    return deepest


def load_config(source) -> Config:
    """The validated configuration from a YAML file, a mapping, or a :class:`Config` (returned as is).

    Parameters
    ----------
    source : str, os.PathLike, Mapping or Config
        A path to a YAML file, the parsed mapping, or a configuration.

    Returns
    -------
    Config
        Frozen and normalized (see the module docstring).

    Raises
    ------
    ConfigError
        With every problem found, each ``"key.path: what is wrong"``; also for a missing or
        unreadable file, a YAML syntax error (with its line and column) and a top level that is
        not a mapping.
    TypeError
        When ``source`` is none of the above (a programming error, not a user's).
    """
    if isinstance(source, Config):
        return source
    src = None
    if isinstance(source, (str, os.PathLike)):
        src = str(source)
        data = _read_yaml(Path(source))
        tf = data.get("trades_file") if isinstance(data, Mapping) else None
        if isinstance(tf, str) and tf and not Path(tf).is_absolute():
            data = {**data, "trades_file": str(Path(source).parent / tf)}            # relative to the YAML file
    elif isinstance(source, Mapping):
        data = source
    else:
        raise TypeError(f"load_config: source must be a path, a mapping or a Config, got {type(source).__name__}")
    if not isinstance(data, Mapping):
        raise ConfigError([f"the top level must be a mapping of sections ({', '.join(Config._keys())}), "
                           f"got {_show(data)}"], src)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_problems(exc), src) from None


def validate_config(source) -> list[str]:
    """The problems of a configuration (``[]`` when it is valid); never raises for a user's mistake."""
    try:
        load_config(source)
    except ConfigError as exc:
        return exc.problems
    except TypeError as exc:
        return [str(exc)]
    return []
