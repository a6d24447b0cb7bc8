"""``memevolve canary start|set|stop|status``: the canary beside a serving file, changed only through the journal
(each change a ``CANARY`` entry with an approver and a reason); every running ``memevolve serve`` of that file follows
it within its reload interval.

Exit codes: 0 done, 2 refused or bad input (nothing journaled).
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from evolve.cli.argtypes import share
from evolve.cli.workflow import DEFAULT_SERVING, operator_arg, stores_arg
from evolve.safe_text import MAX_OPERATOR_CHARS, escaped

if TYPE_CHECKING:
    from evolve.state.entries import JournalEntry


def journal_start(stores: str, serving: str, candidate: str, fraction: float, approver: str, reason: str | None,
                  override_cap: bool, allow_untracked: bool = False) -> int:
    """Journal a canary start and say so; 2 (and the reason on stderr) when refused."""
    from evolve.ops import canary
    from evolve.ops.drift import approval

    try:
        entry = canary.start(stores, serving, candidate, fraction, approval(approver, reason), override_cap,
                             allow_untracked=allow_untracked)
    except canary.Refused as exc:
        print(exc, file=sys.stderr)
        return 2
    _print_entry(entry)
    return 0


def _print_entry(entry: JournalEntry) -> None:
    p = entry.payload
    what = {"start": f"started: {p.candidate_id} ({p.verdict}) serves {p.fraction:g} of the users of",
            "change": f"changed: {p.candidate_id} serves {p.fraction:g} (was {p.previous_fraction}) "
                      "of the users of",
            "stop": f"stopped: {p.candidate_id} serves nobody; users go back to"}[p.action]
    given = p.approval
    reason = f": {escaped(given['reason'])}" if given.get("reason") else ""
    print(f"canary {what} {p.target}")
    print(f"  journal  entry {entry.index} CANARY ({p.action})")
    print(f"  approval approved by {escaped(given['approver'])}{reason}")
    if p.cap_override:
        print(f"  cap      overridden: {p.fraction:g} > {p.cap:g}")


def cmd_canary(args: argparse.Namespace) -> int:
    from evolve.ops import canary
    from evolve.ops.drift import approval
    from evolve.ops.history import History

    if args.canary_command == "status":
        view = History(args.stores)
        current, last = canary.running(view.entries, args.serving), canary.latest(view.entries, args.serving)
        if current is None:
            print(f"no canary runs beside {args.serving}" + ("" if last is None else
                  f" (the last, {last.payload.candidate_id}, was stopped by {last.payload.by} in entry "
                  f"{last.index})"))
            return 0
        print(f"canary {current.candidate_id} serves {current.fraction:g} of the users of {args.serving} (started in "
              f"entry {current.start_index}, fraction set in entry {current.entry.index})")
        return 0
    if args.canary_command == "start":
        return journal_start(args.stores, args.serving, args.candidate, args.fraction, args.approver, args.reason,
                             args.override_cap, args.allow_untracked)
    given = approval(args.approver, args.reason)
    try:
        if args.canary_command == "set":
            entry = canary.change(args.stores, args.serving, args.fraction, given, args.override_cap)
        else:
            entry = canary.stop(args.stores, args.serving, given)
    except canary.Refused as exc:
        print(exc, file=sys.stderr)
        return 2
    _print_entry(entry)
    return 0


def approval_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    """``--approver`` and ``--reason`` as ``promote`` takes them."""
    p.add_argument("--approver", type=operator_arg(), metavar="NAME", required=required,
                   help=f"who approves it, journaled; at most {MAX_OPERATOR_CHARS} characters")
    p.add_argument("--reason", metavar="TEXT", type=operator_arg(blank=True),
                   help=f"why, journaled (required to override the cap); at most {MAX_OPERATOR_CHARS} characters")


def cap_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--override-cap", action="store_true",
                   help="allow a fraction above the canary cap, 0.5 of users (needs --reason; the override is "
                        "journaled)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("canary", help="start, change or stop the canary beside a serving file (journaled with an "
                                      "approver; running services follow it)")
    csub = p.add_subparsers(dest="canary_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        stores_arg(q)
        q.add_argument("--serving", default=DEFAULT_SERVING, help="serving file the canary runs beside "
                                                                  "(default: %(default)s)")

    q = csub.add_parser("start", help="serve an accepted candidate to a share of users (stable hash of the user id)")
    q.add_argument("candidate", metavar="CANDIDATE_ID", help="a candidate recorded ACCEPT or ACCEPT_WITH_MONITOR")
    q.add_argument("--fraction", type=share, required=True, help="share of users, in (0, 1]")
    common(q)
    approval_args(q)
    cap_arg(q)
    q.add_argument("--allow-untracked", action="store_true",
                   help="run it beside a serving file these stores did not promote (as `serve --allow-untracked` "
                        "serves it); a missing file is refused all the same")
    q = csub.add_parser("set", help="change the running canary's share of users")
    q.add_argument("--fraction", type=share, required=True, help="share of users, in (0, 1]")
    common(q)
    approval_args(q)
    cap_arg(q)
    q = csub.add_parser("stop", help="stop the running canary: its users go back to the serving strategy")
    common(q)
    approval_args(q)
    q = csub.add_parser("status", help="which canary the journal says runs beside the serving file")
    common(q)
    for q in csub.choices.values():
        q.set_defaults(func=cmd_canary)
