"""The ``cva`` command line: ``cva run CONFIG``, ``cva price CONFIG``, ``cva validate CONFIG``,
``cva bench CONFIG`` and ``cva schema``.

A user's mistake (a bad path, an invalid config, a bad option value, a run too large for the
memory) exits with status 2 and one line per problem on stderr, without a traceback; output that
cannot be written (a full disk, a closed pipe) exits with 1 and one line; Ctrl-C exits with 130.
This module only wires :mod:`cva.io.config` to the engines; the engines are imported when a command
needs them.
"""

from __future__ import annotations

import argparse
import datetime
import errno
import json
import os
import platform
import shlex
import sys
import tempfile
from pathlib import Path

from cva import __version__
from cva.io.config import ConfigError, load_config
from cva.market.rng import PATH_LIMIT

EXIT_OK, EXIT_OUTPUT, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class _UsageError(Exception):
    """A mistake on the command line itself; the message is one line."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors raised as ``_UsageError`` instead of exiting."""

    def error(self, message):
        raise _UsageError(f"{self.prog}: {message} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an unknown argument after a command is that command's error (``cva run --help``)."""
        args, extras = self.parse_known_args(args, namespace)
        if extras:
            getattr(args, "parser", self).error(f"unrecognized arguments: {' '.join(extras)}")
        return args


def _integer_in(low: int, high: int | None = None):
    """An argparse type: an integer >= ``low`` (and <= ``high``), else a one-line error."""
    bounds = f">= {low}" + ("" if high is None else f" and <= {high}")

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {bounds}, got {text!r}") from None
        if n < low or (high is not None and n > high):
            raise argparse.ArgumentTypeError(f"must be an integer {bounds}, got {n}")
        return n

    return parse


def _directory(text: str) -> str:
    """An argparse type: a non-empty path."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


_paths, _chunk, _count = _integer_in(2, PATH_LIMIT), _integer_in(2), _integer_in(1)


def _build_parser() -> _Parser:
    parser = _Parser(prog="cva", description="Nested Monte Carlo CVA for portfolios with Bermudan contracts.")
    parser.add_argument("--version", action="version", version=f"cva {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("run", help="nested Monte Carlo CVA of the netting set; writes the run directory",
                       description="Run the nested Monte Carlo CVA of CONFIG and write summary.json, exposures.csv, "
                                   "solver_stats.csv, plots and report.html to the run directory.")
    p.add_argument("config", metavar="CONFIG", help="the YAML configuration")
    p.add_argument("--out", type=_directory, metavar="DIR",
                   help="the run directory (default: output.dir, else reports/<run.name>)")
    p.add_argument("--backend", choices=("auto", "cpu", "gpu"), help="override run.backend")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in the run directory")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the earlier run in a non-empty run directory (its files only)")
    p.add_argument("--keep-chunks", action="store_true",
                   help="keep the chunk files (per-path values) after the run is complete")
    p.add_argument("--yes", action="store_true",
                   help="run even when the estimate before the run is over the limit (4 h)")
    p.add_argument("--seed", type=_integer_in(0, 2**32 - 1), metavar="N", help="override run.seed")
    p.add_argument("--outer", type=_paths, metavar="N", help="override simulation.outer_paths")
    p.add_argument("--inner", type=_paths, metavar="N", help="override simulation.inner_paths")
    p.add_argument("--dtype", choices=("float32", "float64"), help="override run.dtype")
    p.add_argument("--estimator", choices=("extrapolated", "mlmc", "plain"), help="override simulation.estimator")
    p.add_argument("--cluster", metavar="SPEC",
                   help="override run.cluster: the outer chunks as dask tasks on local, local:N, local-cuda or "
                        "tcp://HOST:PORT")
    p.add_argument("--chunk", type=_chunk, metavar="N",
                   help="outer paths per chunk, >= 2 (default: simulation.chunk, else with --resume the "
                        "interrupted run's, else from free memory)")
    p.set_defaults(func=_cmd_run, parser=p)

    p = sub.add_parser("validate", help="check a configuration file and print its summary",
                       description="Check CONFIG; print 'CONFIG: ok (summary)' or one line per problem.")
    p.add_argument("config", metavar="CONFIG", help="the YAML configuration")
    p.set_defaults(func=_cmd_validate, parser=p)

    p = sub.add_parser("schema", help="the configuration reference (markdown), generated from the config models",
                       description="Print the configuration reference, every key with its type, bounds, default and "
                                   "meaning, or write it with --out (the repository keeps it in docs/config.md).")
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead of printing it")
    p.set_defaults(func=_cmd_schema, parser=p)

    p = sub.add_parser("price", help="price every contract at t = 0 by plain LSM (ignores the counterparty)",
                       description="Price every contract of CONFIG at t = 0 by Longstaff-Schwartz on "
                                   "simulation.pricing_paths paths.")
    p.add_argument("config", metavar="CONFIG", help="the YAML configuration")
    p.add_argument("--json", metavar="FILE", help="also write the prices and the run's metadata as JSON")
    p.add_argument("--backend", choices=("auto", "cpu", "gpu"), help="override run.backend")
    p.add_argument("--paths", type=_paths, metavar="N", help="override simulation.pricing_paths")
    p.add_argument("--out-of-sample", action="store_true", default=None,
                   help="also price with the LSM policy on an independent path set (low-biased price)")
    p.set_defaults(func=_cmd_price, parser=p)

    p = sub.add_parser("analyze", help="market analytics: stress against base (GSVD)",
                       description="Analyses of the market sections of configurations.")
    asub = p.add_subparsers(dest="analysis", metavar="ANALYSIS")
    asub.required = True
    q = asub.add_parser("stress", help="the directions a stressed market amplifies most, against a base market",
                        description="The generalized SVD of the log-return covariance factors of STRESS and BASE: "
                                    "the positions whose variance the stress multiplies most, with the factors.")
    q.add_argument("base", metavar="BASE", help="the base configuration (its market section)")
    q.add_argument("stress", metavar="STRESS", help="the stressed configuration (its market section)")
    q.add_argument("--out", type=_directory, metavar="DIR", help="write stress.json and stress.png there")
    q.add_argument("--overwrite", action="store_true", help="replace stress.json and stress.png in DIR")
    q.set_defaults(func=_cmd_analyze_stress, parser=q)

    p = sub.add_parser("bench", help="time the nested CVA of CONFIG on this machine, stage by stage",
                       description="Run the nested CVA of CONFIG --repeat times into a temporary directory and "
                                   "print the seconds per stage, outer paths and regression systems per second, "
                                   "and the CVA of each run. On the GPU the first run also compiles the kernels.")
    p.add_argument("config", metavar="CONFIG", help="the YAML configuration")
    p.add_argument("--backend", choices=("auto", "cpu", "gpu"), help="override run.backend")
    p.add_argument("--outer", type=_paths, metavar="N", help="override simulation.outer_paths")
    p.add_argument("--inner", type=_paths, metavar="N", help="override simulation.inner_paths")
    p.add_argument("--repeat", type=_count, default=3, metavar="R", help="runs to time (default 3)")
    p.add_argument("--json", metavar="FILE", help="also write the runs and the machine as JSON")
    p.set_defaults(func=_cmd_bench, parser=p)
    return parser


def _cmd_analyze_stress(args) -> int:
    from cva.market.model import BlackScholes
    from cva.market.stress import plot, stress_directions

    models = []
    for path in (args.base, args.stress):
        try:
            models.append(BlackScholes.from_market(load_config(path).market))
        except ConfigError as exc:
            raise _UsageError("\n".join(f"{path}: {p}" for p in exc.problems)) from None
    names = ("stress.json", "stress.png")
    there = [n for n in names if args.out and (Path(args.out) / n).exists()]
    if there and not args.overwrite:
        raise _UsageError(f"{args.out}: {', '.join(there)} exist: use --overwrite to replace them")
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise _UsageError(f"--out {args.out}: is a file, not a directory")
    res = stress_directions(*models)
    d = res.ratios.size
    print(f"stress {args.stress} against base {args.base}: d = {d} assets, variance ratios and positions "
          "(base volatility 1)")
    for j in range(d):
        w = ", ".join(f"{x:+.3g}" for x in res.directions[:, j])
        print(f"  direction {j + 1}: variance x {res.ratios[j]:.4g}  weights [{w}]")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        files = {"stress.json": json.dumps({"base": args.base, "stress": args.stress, **res.to_json()}, indent=2)
                 .encode(), "stress.png": plot(res)}
        for name, data in files.items():
            (out / name).write_bytes(data)
        print(f"wrote {out / 'stress.json'} and {out / 'stress.png'}")
    return EXIT_OK


def _cmd_schema(args) -> int:
    from cva.io.schema import markdown

    text = markdown() + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        Path(args.out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), args.out) from None
    print(f"wrote {args.out}")
    return EXIT_OK


def _cmd_validate(args) -> int:
    config = load_config(args.config)
    _check_backend(config.run.backend, args, config)
    line = f"{args.config}: ok ({config.summary()})"
    if config.counterparty is not None or config.is_desk:                    # (a pricing-only file: no run)
        from cva.backend import resolve_backend
        from cva.engine.plan import describe_cost, run_cost

        gpu = config.run.backend != "cpu" if config.run.cluster is not None else \
            resolve_backend(config.run.backend)[0].__name__ != "numpy"                 # (a cluster's: its workers')
        line += f"; a run: {describe_cost(run_cost(config, 'gpu' if gpu else 'cpu'))}"
    print(line)
    return EXIT_OK


def _check_backend(backend, args, config):
    """A backend this machine cannot run is a usage error; a cluster's (``run.cluster``) is its workers' to run."""
    if config.run.cluster is not None and args.command in ("run", "validate"):
        return
    from cva.backend import resolve_backend  # imported only when used: it pulls in the engine

    try:
        resolve_backend(backend)                                   # no GPU for `gpu` is the user's mistake
    except ValueError as exc:
        where = f"--backend {backend}" if getattr(args, "backend", None) else f"{args.config}: run.backend"
        raise _UsageError(f"{where}: {exc}") from None


def _writable(folder):
    """Raises the OSError of creating a file in ``folder``, if any (also right for root, unlike os.access)."""
    with tempfile.TemporaryFile(dir=folder):
        pass


def _check_run_dir(args, config):
    """Create the run directory (but for --resume) and check that it takes files, before any work."""
    path = Path(args.out or config.output.dir)
    where = f"--out {args.out}" if args.out else f"{args.config}: output.dir {path}"
    try:
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        if not args.resume:
            path.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            _writable(path)
    except OSError as exc:
        raise _UsageError(f"{where}: cannot use it as the run directory: {exc.strerror or exc}") from None


def _with_overrides(config, args):
    """The config with the command line's --seed, --outer, --inner, --dtype, --estimator, --cluster (validated again: a
    ConfigError names the key)."""
    keys = {("run", "seed"): args.seed, ("simulation", "outer_paths"): args.outer,
            ("simulation", "inner_paths"): args.inner, ("run", "dtype"): args.dtype,
            ("simulation", "estimator"): args.estimator, ("run", "cluster"): getattr(args, "cluster", None)}
    if all(v is None for v in keys.values()):
        return config
    data = config.to_dict()
    for (section, key), value in keys.items():
        if value is not None:
            data.setdefault(section, {})[key] = value
    return load_config(data)


def _cmd_run(args) -> int:
    config = _with_overrides(load_config(args.config), args)
    config.book()                                  # the counterparty (or counterparties) a run needs
    backend = args.backend or config.run.backend
    _check_backend(backend, args, config)
    _check_run_dir(args, config)
    from cva.io.rundir import RunDirectoryError
    from cva.runner import run

    if args.resume and args.overwrite:
        raise _UsageError("cva run: --resume and --overwrite exclude each other (see cva run --help)")
    try:
        result = run(config, out=args.out, backend=backend, resume=args.resume, chunk=args.chunk,
                     overwrite=args.overwrite, keep_chunks=args.keep_chunks, confirm=args.yes)
    except RunDirectoryError as exc:
        raise _UsageError(str(exc)) from None
    except KeyboardInterrupt:
        again = ["cva", "run", args.config, "--out", args.out or config.output.dir, "--resume"]
        again += ["--backend", args.backend] if args.backend else []
        again += ["--chunk", str(args.chunk)] if args.chunk else []
        for flag in ("seed", "outer", "inner", "dtype", "estimator", "cluster"):
            again += [f"--{flag}", str(getattr(args, flag))] if getattr(args, flag) is not None else []
        print(f"cva: interrupted; the finished chunks are saved: continue with {shlex.join(again)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    lo, hi = result.ci
    s = result.summary
    bias = f"inner-sample bias {s['bias_estimate']:.3g} {'left in' if s['estimator'] == 'plain' else 'removed'}"
    what = (f"{len(s['counterparties'])} counterparties, {s['netting_sets']} netting sets" if config.is_desk else
            f"EPE {s['EPE']:.6g}, EEPE {s['EEPE']:.6g}")
    print(f"CVA = {result.cva:.6g} +- {result.stderr:.3g} ({s['estimator']}, {bias}; 95% interval with the remaining "
          f"bias [{lo:.6g}, {hi:.6g}]); {what}; {s['elapsed_seconds']:.1f} s on {s['device']}")
    if "dva" in s:
        print(f"DVA = {s['dva']:.6g} +- {s['dva_stderr']:.3g}; CVA and DVA first to default")
    print(f"report: {result.out_dir / 'report.html'}")
    return EXIT_OK


def _cmd_price(args) -> int:
    config = load_config(args.config)
    _check_json_target(args)
    backend = args.backend or config.run.backend
    paths = args.paths or config.simulation.pricing_paths
    out_of_sample = config.simulation.out_of_sample if args.out_of_sample is None else args.out_of_sample

    _check_backend(backend, args, config)
    from cva.engine.pricing import price

    try:
        df = price(config, backend=backend, paths=paths, out_of_sample=out_of_sample)
    except MemoryError as exc:
        where = "--paths" if args.paths else "simulation.pricing_paths"
        raise MemoryError(f"out of memory pricing on {paths} paths ({where}): {exc}; use fewer paths") from exc
    used = df.attrs.get("backend", backend) if hasattr(df, "attrs") else backend
    header = (f"{config.run.name}: {len(config.portfolio)} contract(s), LSM on {paths} paths, backend {used}, "
              f"{config.run.dtype}, seed {config.run.seed}" + (", out of sample" if out_of_sample else ""))
    print(header)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.6f}"))
    if args.json is not None:
        document = {
            "config": str(args.config),
            "run": config.run.name,
            "backend": used,
            "paths": paths,
            "out_of_sample": out_of_sample,
            "dtype": config.run.dtype,
            "seed": config.run.seed,
            "basis": config.simulation.basis,
        }
        for key, value in getattr(df, "attrs", {}).items():           # the pricer's metadata (timing, solver)
            if key not in document:
                try:
                    document[key] = json.loads(json.dumps(value))
                except (TypeError, ValueError):
                    document[key] = str(value)
        document["prices"] = json.loads(df.to_json(orient="records"))
        _write_json(args.json, document)
    return EXIT_OK


def _cmd_bench(args) -> int:
    from cva.bench import bench, with_paths  # imported only when used: they pull in the engine
    from cva.engine.nested import STAGES

    config = load_config(args.config)
    config.book()                                  # the counterparty (or counterparties) a run needs
    config = with_paths(config, args.outer, args.inner)
    _check_json_target(args)
    backend = args.backend or config.run.backend
    _check_backend(backend, args, config)

    df = bench(config, backend=backend, repeat=args.repeat)
    a = df.attrs
    print(f"cva bench {a['name']}: {a['device']}, {a['dtype']}; {a['outer_paths']} outer x {a['inner_paths']} "
          f"inner paths, chunk {a['chunk']}; {len(df)} run(s)")
    print(f"{'run':>3} {'total s':>8} {'engine s':>8} {'outer/s':>9} {'solve Msys/s':>12}  stages [s]")
    for row in df.to_dict("records"):
        stages = ", ".join(f"{s} {row[f'{s}_seconds']:.3f}" for s in STAGES if row[f"{s}_seconds"] > 0)
        note = " (compiles the kernels)" if row["first"] else ""
        rate = f"{row['solve_systems_per_s'] / 1e6:12.3f}" if row["systems"] else f"{'-':>12}"   # no regressions
        print(f"{row['run']:3d} {row['seconds']:8.3f} {row['engine_seconds']:8.3f} {row['outer_paths_per_s']:9.1f} "
              f"{rate}  {stages}{note}")
    last = df.iloc[-1]
    print(f"CVA = {last['cva']:.6g} +- {last['stderr']:.3g}; {last['systems']} regression systems, "
          f"method mix {a['method_mix']}")
    if args.json is not None:
        document = {"config": str(args.config), "date": datetime.datetime.now().isoformat(timespec="seconds"), **a,
                    "cpu": platform.processor() or platform.machine(),
                    "runs": json.loads(df.to_json(orient="records"))}
        _write_json(args.json, document)
    return EXIT_OK


def _check_json_target(args):
    """--json names a file that can be written (before any work)."""
    if args.json is not None:
        path = Path(args.json)
        parent = path.resolve().parent
        if path.is_dir():
            raise _UsageError(f"--json {args.json}: is a directory, not a file")
        if not parent.is_dir():
            raise _UsageError(f"--json {args.json}: the directory {parent} does not exist")
        try:
            _writable(parent)
            if path.exists() and not os.access(path, os.W_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        except OSError as exc:
            raise _UsageError(f"--json {args.json}: cannot write: {exc.strerror or exc}") from None


def _write_json(path, document):
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
            fh.write("\n")
    except OSError as exc:                                         # a full disk: output, not usage (exit 1)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    print(f"wrote {path}")


def _silence_stdout():
    """Point stdout at /dev/null, so that the interpreter's flush at the exit does not fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):                                  # not a file (a test's capture)
        pass


def main(argv=None) -> int:
    """Run the ``cva`` command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _build_parser()
    args = None
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:                                  # --help, --version
            return exc.code if isinstance(exc.code, int) else EXIT_OK
        status = args.func(args)
        sys.stdout.flush()                                         # a write error here, not at the exit
        return status
    except ConfigError as exc:
        source = getattr(args, "config", None) or exc.source
        for problem in exc.problems:
            print(f"{source}: {problem}" if source else problem, file=sys.stderr)
        return EXIT_USAGE
    except _UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, MemoryError) as exc:                       # a valid config the engine cannot run
        source = getattr(args, "config", None)
        print(f"{source}: {exc}" if source else f"cva: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:                                         # stdout full or closed, a full disk
        _silence_stdout()
        where = exc.filename or "the output"
        print(f"cva: cannot write {where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_OUTPUT
    except KeyboardInterrupt:
        print("cva: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
