"""Engineer workflow subcommands: diff, candidates, show, promote, rollback, journal verify, serving, report
(``flags`` and ``escalations`` are in :mod:`evolve.cli.governance`).

Exit codes: 0 success, 1 different / refused / verification failed, 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evolve.cli.defaults import CONFIG_HELP
from evolve.safe_text import MAX_OPERATOR_CHARS, operator_text

if TYPE_CHECKING:
    from evolve.ops.history import History
    from evolve.ops.serving import ChangeResult
    from evolve.strategy.diff import StrategyDiff

DEFAULT_SERVING = "strategies/serving.yaml"
#: ``candidates --decision`` choices (the verdicts of :class:`evolve.verify.decision.Verdict`, lower case).
DECISION_CHOICES = ("accept", "accept_with_monitor", "feature_flag", "reject")


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (absolute otherwise)."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _print_diff(diff: "StrategyDiff | None", what: str) -> None:
    if diff is None:
        print(f"{what}: (previous file is not YAML)")
    elif diff.empty:
        print(f"{what}: no differences")
    else:
        print(f"{what}:\n{_indent(diff.render())}")


def cmd_diff(args: argparse.Namespace) -> int:
    from evolve.strategy.artifact import load_strategy, strategy_hash
    from evolve.strategy.diff import diff_strategies

    a, b = load_strategy(args.a), load_strategy(args.b)
    diff = diff_strategies(a, b)
    if args.format == "json":
        print(json.dumps({"a": {"path": args.a, "hash": strategy_hash(a)},
                          "b": {"path": args.b, "hash": strategy_hash(b)},
                          "equal": diff.empty, **diff.to_dict()}, indent=2, sort_keys=True))
    else:
        print(f"--- {args.a} ({strategy_hash(a)[:12]})\n+++ {args.b} ({strategy_hash(b)[:12]})")
        print(diff.render() if not diff.empty else "no differences")
    return 0 if diff.empty else 1


def cmd_candidates(args: argparse.Namespace) -> int:
    from evolve.ops.history import History
    from evolve.ops.review import candidates_table, select

    view = History(args.stores)
    records = select(view.records, args.round, args.decision)
    if not records:
        print("no candidates match")
        return 0
    print(candidates_table(records, view))
    print(f"\n{len(records)} candidate(s); full record: memevolve show ID --stores {_shown(Path(args.stores))}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from evolve.ops.history import History
    from evolve.ops.review import render_record

    view = History(args.stores)
    record = view.record(args.candidate_id)
    if record is None:
        print(f"error: no candidate {args.candidate_id!r} in {view.layout.store('candidate_outcomes')}",
              file=sys.stderr)
        return 2
    print(render_record(record, view))
    return 0


def _print_change(result: "ChangeResult", done: str, stores: str, approval: str | None = None) -> None:
    print(f"{done} {_shown(result.target)}")
    print(f"  new      {result.served.strategy_hash}  (copy {Path(stores) / result.served.copy})")
    if result.previous is None:
        print("  old      none (no serving file before)")
    else:
        print(f"  old      {result.previous.strategy_hash}  (restore point {Path(stores) / result.previous.copy})")
    if result.entry is not None:
        print(f"  journal  entry {result.entry.index} {result.entry.type}")
    if approval is not None:
        print(f"  approval {approval}")
    _print_diff(result.diff, "diff old -> new")


def _recover(stores: str) -> None:
    """Finish a promote or rollback a crash interrupted, and say what was done."""
    from evolve.ops.serving import recover
    recovered = recover(stores)
    if recovered is not None:
        print(recovered.describe(), file=sys.stderr)


def operator_arg(blank: bool = False):
    """An argparse type: operator text as :func:`evolve.safe_text.operator_text` bounds it (blank allowed if
    ``blank``)."""
    def check(text: str) -> str:
        try:
            return operator_text(text, blank=blank)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return check


def cmd_promote(args: argparse.Namespace) -> int:
    from evolve.ops.drift import approval, approval_text
    from evolve.ops.serving import Refused, promote

    if args.reason is not None and args.approver is None:
        print("error: promote --reason: needs --approver NAME (who approves the promotion)", file=sys.stderr)
        return 2
    approved = approval(args.approver, args.reason) if args.approver is not None else None
    _recover(args.stores)
    try:
        result = promote(args.stores, args.candidate, args.to, accept_monitor=args.accept_monitor,
                         dry_run=args.dry_run, serving_dir=args.serving_dir, allow_outside=args.allow_outside,
                         approval=approved)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return 1
    label = f"{result.record.candidate_id} ({result.record.verdict})"
    _print_change(result, f"dry run, nothing written: would promote {label} to" if args.dry_run
                  else f"promoted {label} to", args.stores, approval_text(approved))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    from evolve.ops.serving import Refused, rollback

    _recover(args.stores)
    try:
        result = rollback(args.stores, args.target, args.to, serving_dir=args.serving_dir,
                          allow_outside=args.allow_outside)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return 1
    _print_change(result, "rolled back", args.stores)
    return 0


def cmd_journal_verify(args: argparse.Namespace) -> int:
    """The first line is the verdict: ``ok: ...`` exactly when the command exits 0, ``verification failed...``
    otherwise."""
    from evolve.ops.change import pending_change
    from evolve.files import StoreError
    from evolve.ops.drift import serving_status, serving_targets
    from evolve.loop.tracking import existing_tracking_uri
    from evolve.ops.history import History
    from evolve.ops.witness import anchor_problems, tracking_anchors, witness_anchors

    view = History(args.stores)
    try:
        intent = pending_change(view.layout)
    except StoreError as exc:
        print(f"verification failed: a serving change was started and not finished, and it cannot be finished now: "
              f"{exc}")
        return 1
    if intent is not None:
        try:
            _recover(args.stores)
        except StoreError as exc:
            print(f"verification failed: a serving change ({intent.type}) was started at {intent.written_at} and not "
                  f"finished, and it cannot be finished now: {exc}")
            return 1
        view = History(args.stores)
    result = view.verify_journal()
    if not result.ok:
        print(f"verification failed at entry {result.first_bad_index}: {result.reason}")
        return 1
    targets = dict.fromkeys(Path(t).resolve() for t in [*args.serving, *serving_targets(view.entries)])
    anchors = [a for t in targets for a in witness_anchors(t, view.root)]
    uri = existing_tracking_uri(args.tracking_uri)
    if uri is not None:
        anchors += tracking_anchors(uri, view.root)
    problems = anchor_problems(anchors, result.hashes) + view.record_problems()
    if problems:
        print(f"verification failed: the journal's {result.n} entries chain, but:")
        print("\n".join(f"  {p}" for p in problems))
        return 1
    statuses = [s for s in (serving_status(view, t) for t in targets) if s.entry or s.current]
    bad = [s for s in statuses if not s.ok]
    keyed = " (MACs present but not checked: set MEMEVOLVE_JOURNAL_KEY)" if result.unchecked_macs else ""
    checked = (f"{result.n} entries{keyed}; {len(view.records)} candidate records match their journaled decisions; "
               f"{len(anchors)} external head(s) checked ({len(targets)} serving file(s)"
               f"{', tracking ' + uri if uri else ', no tracking store'})")
    if bad:
        print(f"verification failed: {len(bad)} serving file(s) do not match the journal "
              f"({', '.join(s.state for s in bad)}); the journal itself checks out: {checked}")
    else:
        print(f"ok: {checked}")
    for status in statuses:
        print(f"serving {_shown(status.target)}: {status.describe()}")
    return 1 if bad else 0


def cmd_serving(args: argparse.Namespace) -> int:
    from evolve.ops.drift import serving_status
    from evolve.ops.history import History
    from evolve.runtime import MemoryRuntime
    from evolve.files import StoreError
    from evolve.strategy.artifact import load_strategy, strategy_hash

    strategy = load_strategy(args.path)
    runtime = MemoryRuntime(strategy)
    try:
        view: History | None = History(args.stores)
    except StoreError as exc:
        print(f"note: {exc}")
        view = None
    status = serving_status(view, args.path)
    print(f"serving {_shown(status.target)}")
    print(f"  strategy     {strategy_hash(strategy)}  (name {strategy.get('name', '-')}, version "
          f"{strategy.get('version', '-')})")
    print(f"  lineage      {_lineage(view, strategy)}")
    print(f"  file sha256  {status.current.file_sha256}")
    print(f"  runtime      loaded: MemoryRuntime with embedder {runtime.embedder.name}")
    print(f"  {status.describe()}")
    return 0 if status.ok else 1


def _lineage(view: "History | None", strategy: dict) -> str:
    """How the stores evolved ``strategy`` from its baseline: the baseline's name and version, then each accepted
    candidate (e.g. ``baseline v1 + r001-c02 + r003-c01``)."""
    from evolve.strategy.artifact import strategy_hash

    chain = view.lineage(strategy_hash(strategy)) if view is not None else []
    if not chain:
        return f"{strategy.get('name', '-')} v{strategy.get('version', '-')} (no evolved change in these stores)"
    base = view.get_strategy(chain[0].parent_hash) if view.strategy_path(chain[0].parent_hash).is_file() else {}
    steps = " + ".join(r.candidate_id for r in chain)
    return (f"{base.get('name', strategy.get('name', '-'))} v{base.get('version', strategy.get('version', '-'))} + "
            f"{steps} ({len(chain)} accepted change(s))")


def cmd_report(args: argparse.Namespace) -> int:
    from evolve.ops.history import History
    from evolve.ops.outputs import check_output_file, served_files
    from evolve.files import StoreError

    view = History(args.stores)
    served = served_files(view.entries)
    out = check_output_file("--out", args.out, protected=served)
    markdown = check_output_file("--markdown", args.markdown, protected=served) if args.markdown else None
    if markdown == out:
        raise StoreError(f"--markdown {args.markdown}", "refused: the same file as --out; nothing was written")
    from evolve.ops.report import write_report  # plotting libraries: imported once the paths are accepted

    write_report(view, out, markdown)
    print(f"wrote {args.out}" + (f" and {args.markdown}" if args.markdown else ""))
    return 0


def stores_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--stores", help="stores directory (default: the run config's stores, else stores/)")
    p.set_defaults(resolve_stores=True)


def _serving_args(p: argparse.ArgumentParser) -> None:
    from evolve.ops.targets import SERVING_DIR_ENV

    p.add_argument("--serving-dir", help=f"directory serving files must lie in (default ${SERVING_DIR_ENV} or "
                                         "strategies/)")
    p.add_argument("--allow-outside", action="store_true", help="allow a serving file outside the serving directory")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the workflow subcommands to ``sub``."""
    p = sub.add_parser("diff", help="path-level diff of two strategy files (exit 1 if they differ)")
    p.add_argument("a", help="strategy file A")
    p.add_argument("b", help="strategy file B")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: %(default)s)")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("candidates", help="table of recorded candidates with their evidence summary")
    stores_arg(p)
    p.add_argument("--round", type=int, help="only candidates of this round")
    p.add_argument("--decision", choices=DECISION_CHOICES, help="only candidates with this verdict")
    p.set_defaults(func=cmd_candidates)

    p = sub.add_parser("show", help="the complete record of one candidate")
    p.add_argument("candidate_id", help="candidate id, e.g. r001-c02 (memevolve candidates lists them)")
    stores_arg(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("promote", help="serve a strategy with a recorded ACCEPT decision")
    p.add_argument("candidate", metavar="CANDIDATE_ID|PATH",
                   help="an accepted candidate's id, or a strategy file whose strategy was accepted")
    p.add_argument("--to", required=True, help=f"serving file, e.g. {DEFAULT_SERVING}")
    stores_arg(p)
    p.add_argument("--accept-monitor", action="store_true", help="also allow ACCEPT_WITH_MONITOR decisions")
    p.add_argument("--dry-run", action="store_true", help="check and show the diff; write nothing")
    p.add_argument("--approver", type=operator_arg(), metavar="NAME",
                   help=f"who approves the promotion, journaled and witnessed (without it the promotion is recorded "
                        f"as unapproved); at most {MAX_OPERATOR_CHARS} characters, shown with control characters "
                        f"escaped")
    p.add_argument("--reason", metavar="TEXT", type=operator_arg(blank=True),
                   help=f"why it is approved (needs --approver); at most {MAX_OPERATOR_CHARS} characters, shown with "
                        f"control characters escaped")
    _serving_args(p)
    p.set_defaults(func=cmd_promote)

    p = sub.add_parser("rollback", help="re-serve the previous serving file (or one a journal entry installed)")
    p.add_argument("--to", type=int, metavar="ENTRY_INDEX", help="journal index of a PROMOTE/ROLLBACK entry")
    stores_arg(p)
    p.add_argument("--target", default=DEFAULT_SERVING, help="serving file to roll back (default: %(default)s)")
    _serving_args(p)
    p.set_defaults(func=cmd_rollback)

    p = sub.add_parser("journal", help="journal checks")
    jsub = p.add_subparsers(dest="journal_command", required=True)
    v = jsub.add_parser("verify", help="verify the hash chain, the candidate records and the heads witnessed "
                                       "outside the stores, and check serving files for drift")
    stores_arg(v)
    v.add_argument("--serving", action="append", default=[DEFAULT_SERVING], metavar="PATH",
                   help=f"serving file whose witness to check (repeatable; {DEFAULT_SERVING} always)")
    v.add_argument("--tracking-uri", help="MLflow tracking URI whose round runs' journal heads to check "
                                          "(default $MLFLOW_TRACKING_URI, or experiments/mlflow.db if present)")
    v.set_defaults(func=cmd_journal_verify)

    p = sub.add_parser("serving", help="load the serving strategy and say which journal entry put it there")
    p.add_argument("--path", default=DEFAULT_SERVING, help="serving file (default: %(default)s)")
    stores_arg(p)
    p.set_defaults(func=cmd_serving)

    p = sub.add_parser("report", help="self-contained HTML report (plus an optional Markdown summary)")
    stores_arg(p)
    p.add_argument("--out", required=True, metavar="PATH", help="HTML file to write (replaced if present)")
    p.add_argument("--markdown", metavar="PATH", help="also write a Markdown summary here")
    p.set_defaults(func=cmd_report)
