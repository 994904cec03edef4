"""The bias of the plain nested CVA with the in-sample inner LSM against an out-of-sample (cross-fitted) one:
the policy fitted on one half of the inner paths and valued on the other, both ways, paired with the exact
reference of tests/bermudan_reference.py on the same outer paths (CPU).

Usage::

    python benchmarks/tools/measure_inner_policy.py [--case "atm long put"] [--outer 2048] [--inner 128 512]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from bermudan_reference import paired_difference, reference_cva  # noqa: E402
from test_bias import CASES  # noqa: E402
from test_bias import _config as case_config  # noqa: E402

import cva  # noqa: E402
from cva.engine import lsm, nested  # noqa: E402

IN_SAMPLE = nested.longstaff_schwartz


def cross_fitted(S, times, payoff_fn, basis_fn, rate, *, keys=None, splits=0, **kw):
    """The whole inner set's value from the halves' policies applied to the other half (splits ignored)."""
    res = IN_SAMPLE(S, times, payoff_fn, basis_fn, rate, keys=keys, **kw)
    B, M = S.shape[:2]
    kw = {k: v for k, v in kw.items() if k != "condition_sample"}
    halves = S.reshape((2 * B, M // 2) + S.shape[2:])
    fit = IN_SAMPLE(halves, times, payoff_fn, basis_fn, rate, keys=[f"{k}:x" for k in keys], **kw)
    swapped = [None if c is None else c.reshape((B, 2) + c.shape[1:])[:, ::-1].reshape(c.shape)
               for c in fit.coefficients]
    V = lsm.apply_policy(halves, times, swapped, payoff_fn, basis_fn, rate, t0=kw.get("t0", 0.0))
    res.value = V.mean(axis=1).reshape(B, 2).mean(axis=1)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", default="atm long put", choices=list(CASES))
    ap.add_argument("--outer", type=int, default=2048)
    ap.add_argument("--inner", type=int, nargs="+", default=[128, 512])
    args = ap.parse_args(argv)
    for M in args.inner:
        for name, fn in (("in-sample", IN_SAMPLE), ("cross-fitted", cross_fitted)):
            nested.longstaff_schwartz = fn
            cfg = case_config(Path(tempfile.mkdtemp()), args.case, estimator="plain", inner=M, outer=args.outer)
            res = cva.run(cfg, progress=False)
            ref = reference_cva(cfg, paths="engine", outer_paths=args.outer)
            d, se = paired_difference(res.contributions, ref.contributions)
            print(f"{args.case} M={M:5d} {name:13s} bias {d:+.6f} +- {se:.6f} ({100 * d / ref.cva:+.2f} %)", flush=True)
    nested.longstaff_schwartz = IN_SAMPLE


if __name__ == "__main__":
    main()
