"""The run directory of ``cva run``: its lock, its manifest (run.json), the chunk files and the
atomic writes of every output.

A run directory holds one run. A run takes an exclusive lock on ``<dir>/.lock`` (``filelock``:
``flock`` on POSIX, released by the kernel when the process dies) for its whole life, so a second
run into a directory in use is refused. A fresh run refuses a directory that holds anything but
that lock unless asked to overwrite; then it removes the files of the earlier run only (the
names below), never a file it did not write. Chunk files carry the config hash, their index and
their first outer path, checked on resume. ``summary.json`` is written last, with
``"status": "complete"``; until then the run is unfinished, and ``--resume`` completes it from its
chunks, which are removed only after that (unless kept).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np

LOCK = ".lock"
MANIFEST = "run.json"
CHUNKS = "chunks"

#: Keys that cannot change a nested run's per-path values (``cva price``'s, the run directory, the PFE's quantile):
#: not in its config hash.
UNHASHED = (("simulation", "pricing_paths"), ("simulation", "out_of_sample"), ("output", "dir"),
            ("output", "pfe_quantile"))


class RunDirectoryError(ValueError):
    """The run directory cannot be used as asked (in use, not empty, a foreign chunk); one line."""


class ResumeError(RunDirectoryError):
    """The run directory cannot be resumed with this config / backend."""


# ---------------------------------------------------------------------------------------------
# the config hash


def hashed_config(cfg) -> dict:
    """The normalized config as JSON data, without the keys of :data:`UNHASHED` (run.json keeps it)."""
    data = json.loads(json.dumps(cfg.to_dict(), default=str))
    for section, key in UNHASHED:
        data.get(section, {}).pop(key, None)
    return data


def config_hash(cfg) -> str:
    """The hash of :func:`hashed_config`: equal for configs that give a run the same numbers."""
    return hashlib.sha256(json.dumps(hashed_config(cfg), sort_keys=True).encode()).hexdigest()[:16]


def changed_keys(old, new, key="") -> list[str]:
    """The dotted keys at which two configs of :func:`hashed_config` differ, with the values where short."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [k for name in sorted(old.keys() | new.keys(), key=str)
                for k in changed_keys(old.get(name), new.get(name), f"{key}.{name}" if key else str(name))]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [k for i, (a, b) in enumerate(zip(old, new, strict=True)) for k in changed_keys(a, b, f"{key}[{i}]")]
    if old == new:
        return []
    scalar = not isinstance(old, (dict, list)) and not isinstance(new, (dict, list))
    return [f"{key} (was {json.dumps(old)}, now {json.dumps(new)})" if scalar else key]


# ---------------------------------------------------------------------------------------------
# lock, fresh start, atomic writes


@contextlib.contextmanager
def locked(out_dir: Path):
    """Hold the run directory's lock; a :class:`RunDirectoryError` if another run holds it."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(out_dir / LOCK), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunDirectoryError(f"{out_dir} is in use by another run (it holds {out_dir / LOCK}); wait for it "
                                f"to finish or choose another run directory") from None
    try:
        yield
    finally:
        lock.release()


def earlier_run_files(out_dir: Path, outputs) -> list[Path]:
    """The files of an earlier run in ``out_dir``: its manifest, outputs, chunks and temporary files."""
    names = [MANIFEST, *(n for n in outputs if "*" not in n)]
    found = [out_dir / n for n in names if (out_dir / n).is_file()]
    found += sorted(p for n in outputs if "*" in n for p in out_dir.glob(n) if p.is_file())     # exposures/*.csv
    found += sorted((out_dir / CHUNKS).glob("level*_*.npz")) if (out_dir / CHUNKS).is_dir() else []
    found += [p for p in out_dir.glob("*.tmp*") if p.is_file() and p.name.split(".tmp")[0] in names]
    return found


def start_fresh(out_dir: Path, outputs, overwrite: bool):
    """Refuse a non-empty run directory unless ``overwrite`` and it holds an earlier run (its run.json); then remove
    the earlier run's files only. A directory of files but no run is refused even with ``overwrite``: files named
    as a run's outputs there (a trades.csv, say) are the user's, not an earlier run's."""
    entries = sorted(p.name for p in out_dir.iterdir() if p.name != LOCK
                     and not (p.name == CHUNKS and p.is_dir() and not any(p.iterdir())))   # (a failed start's)
    if not entries:
        return
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    if not overwrite:
        raise RunDirectoryError(f"{out_dir} is not empty ({shown}): use --overwrite (overwrite=True) to replace "
                                f"the run in it, --resume to continue it, or another run directory")
    try:
        read_manifest(out_dir / MANIFEST)
    except ResumeError:
        raise RunDirectoryError(f"{out_dir} holds no earlier run (no {MANIFEST} of one) but {shown}: --overwrite "
                                f"replaces a run's files only; use an empty or new run directory") from None
    for path in earlier_run_files(out_dir, outputs):
        path.unlink(missing_ok=True)
    for folder in {(out_dir / n).parent for n in outputs if "*" in n}:
        with contextlib.suppress(OSError):
            folder.rmdir()                                            # only if empty
    with contextlib.suppress(OSError):
        (out_dir / CHUNKS).rmdir()                                    # only if empty: nothing else is ours


def atomic_write(path: Path, write):
    """``write(tmp)`` a temporary file beside ``path``, fsync it and rename it over ``path``.

    A failure removes the temporary file and raises an ``OSError`` whose filename is ``path``.
    """
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: Path, text: str):
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_bytes(path: Path, data: bytes):
    atomic_write(path, lambda tmp: tmp.write_bytes(data))


# ---------------------------------------------------------------------------------------------
# manifest and chunks


def read_manifest(path: Path) -> dict:
    """The run.json of an interrupted run; a :class:`ResumeError` if it is missing or unreadable."""
    if not path.exists():
        raise ResumeError(f"cannot resume: {path} does not exist (run without --resume first)")
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:                       # a directory, not UTF-8, not JSON
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ResumeError(f"cannot resume: {path} is unreadable ({why}); run without --resume") from None
    chunk = old.get("chunk") if isinstance(old, dict) else None
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise ResumeError(f"cannot resume: {path} is unreadable (not the manifest of a run); run without --resume")
    return old


#: What a chunk file holds (run.json's ``chunk_values``): the aggregate of :meth:`cva.xva.desk.Book.aggregate`,
#: and the solver statistics' samples as arrays (:meth:`cva.engine.nested.DateStats.to_state`). A run directory
#: whose chunks hold something else (the value cube itself, an aggregate that also held the uncollateralized netting
#: sets' values twice, one kept in float64 for a float32 run, the samples in the JSON, or the gross values and the
#: trades' contributions of every inner set, before) cannot be resumed.
CHUNK_VALUES = ("netting-set aggregate in the run's dtype, gross values under a CSA only; gross values and "
                "contributions of the first three inner sets; statistics' samples as arrays")


def check_resumable(out_dir: Path, old: dict, manifest: dict):
    """A :class:`ResumeError` naming what differs between the interrupted run's manifest and this one."""
    keys = []
    if old.get("config_hash") != manifest["config_hash"] and isinstance(old.get("config"), dict):
        keys = changed_keys(old["config"], manifest["config"])
    said = ("config", "config_hash", "outer_paths", "chunks", "dtype") if keys else ("config",)   # by the keys
    diff = [f"the config changed at {', '.join(keys)}"] if keys else []
    diff += [f"{k} was {old.get(k)!r}, now {manifest[k]!r}" for k in manifest
             if k not in said and old.get(k) != manifest[k]]
    if diff:
        raise ResumeError(f"cannot resume {out_dir}: " + "; ".join(diff) + " (run without --resume to start over)")


def chunk_path(out_dir: Path, level: int, index: int) -> Path:
    return out_dir / CHUNKS / f"level{level}_{index:05d}.npz"


def save_chunk(out_dir: Path, level: int, index: int, values, meta: dict, config_hash: str, arrays=None):
    """A chunk's per-path values and its own statistics, stamped with the config hash, level and index: the
    ``.npz`` of :func:`numpy.savez` (``values``, ``meta`` as JSON, and each of ``arrays`` {name: array} as its own
    member), with the values in one write. (numpy's writes a zip member 16 MB at a time, each copied while holding
    the GIL, which the thread receiving a cluster's next result needs meanwhile; one write's checksum and copy to
    the file release it.)"""
    head = json.dumps({"config_hash": config_hash, "level": level, "index": index, **meta})
    values = np.asarray(values, order="C")
    arrays = arrays or {}
    if {"values", "meta"} & set(arrays):
        raise ValueError(f"arrays: the names values and meta are the chunk's own, got {sorted(arrays)}")

    def write(tmp):
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            with z.open("values.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(values))
                f.write(memoryview(values.reshape(-1)).cast("B"))
            with z.open("meta.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.array(head))
            for name, a in arrays.items():
                with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.asarray(a), allow_pickle=False)
    atomic_write(chunk_path(out_dir, level, index), write)


def load_chunks(out_dir: Path, config_hash: str, level: int) -> list[tuple[np.ndarray, dict]]:
    """A level's finished chunks in order as (values, meta), meta's ``arrays`` the ``arrays`` of
    :func:`save_chunk`, up to the first missing one; an unreadable chunk (an OS crash while it was written) is
    removed and computed again; one of another run or place is refused, naming the file."""
    done = []
    for i in range(10**5):
        f = chunk_path(out_dir, level, i)
        try:
            with np.load(f, allow_pickle=False) as z:
                values, meta = z["values"], json.loads(str(z["meta"]))
                arrays = {name: z[name] for name in z.files if name not in ("values", "meta")}
        except FileNotFoundError:
            break
        except Exception:
            f.unlink(missing_ok=True)
            break
        stamp = {k: meta.get(k) for k in ("config_hash", "level", "index")} if isinstance(meta, dict) else {}
        if stamp != {"config_hash": config_hash, "level": level, "index": i}:
            raise ResumeError(f"cannot resume {out_dir}: {f} is not a chunk of this run (it says {stamp or meta!r}; "
                              f"this run: config hash {config_hash!r}, level {level}, index {i}); remove it or run "
                              f"without --resume")
        done.append((values, {**meta, "arrays": arrays}))
    return done


def remove_chunks(out_dir: Path):
    for f in sorted((out_dir / CHUNKS).glob("level*_*.npz")):
        f.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (out_dir / CHUNKS).rmdir()


def read_summary_status(out_dir: Path):
    """The ``status`` of the run directory's summary.json, or None where it is missing or unreadable."""
    try:
        return json.loads((out_dir / "summary.json").read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError, AttributeError):
        return None
