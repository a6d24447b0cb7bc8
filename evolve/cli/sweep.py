"""``memevolve sweep --stores S...``: every recorded comparison decided again over a grid of alpha and epsilon, and
the decisions that flip (exit 0 whether or not any flips)."""
from __future__ import annotations

import argparse

from evolve.cli.argtypes import probability


def cmd_sweep(args: argparse.Namespace) -> int:
    from evolve.ops.sweep import sweep, text

    print(text(sweep(args.stores, args.alphas, args.epsilons)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to ``sub``."""
    from evolve.ops.sweep import ALPHAS, EPSILONS

    p = sub.add_parser("sweep", help="decide every recorded comparison of some stores again over a grid of alpha "
                                     "and epsilon and list the decisions that flip")
    p.add_argument("--stores", nargs="+", required=True, metavar="STORES",
                   help="stores directories (a loop's, or a gate store)")
    p.add_argument("--alphas", nargs="+", type=probability, default=list(ALPHAS), metavar="ALPHA",
                   help="alphas of the grid (default: %(default)s)")
    p.add_argument("--epsilons", nargs="+", type=probability, default=list(EPSILONS), metavar="EPSILON",
                   help="epsilon_default values of the grid (default: %(default)s)")
    p.set_defaults(func=cmd_sweep)
