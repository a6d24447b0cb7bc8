"""Governance subcommands: the FEATURE_FLAG registry (``flags``, ``flags --verify``), ``escalations`` and ``erase``.

Exit codes: 0 success, 1 refused (nothing to re-verify, a budget stop), 2 bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evolve.cli.defaults import config_path
from evolve.cli.workflow import stores_arg


def cmd_flags(args: argparse.Namespace) -> int:
    from evolve.ops.flags import flag_registry, flagged_record, flags_table, reverified_text
    from evolve.ops.history import History

    if args.verify is not None:
        return _verify(args)
    view = History(args.stores)
    if args.candidate_id:
        flagged_record(view, args.candidate_id)
    flags = [f for f in flag_registry(view, args.round) if args.candidate_id in (None, f.record.candidate_id)]
    if not flags:
        print("no FEATURE_FLAG candidates match")
        return 0
    print(flags_table(flags))
    print("\nreasons:")
    for f in flags:
        print(f"  {f.record.candidate_id}: {f.record.reason}")
        for entry in f.reverified:
            print(f"    re-verified: {reverified_text(entry)}")
    print(f"\n{len(flags)} flagged candidate(s), none applied; re-verify one against the current strategy: "
          "memevolve flags --verify ID")
    return 0


def _verify(args: argparse.Namespace) -> int:
    """Re-verify one flagged candidate under the run config; print the paired figures and the journal entry."""
    from evolve.loop.budget import BudgetExhausted
    from evolve.loop.config import ConfigError, load_config
    from evolve.ops.flags import flagged_record
    from evolve.ops.history import History
    from evolve.ops.reverify import NothingToVerify, reverify
    from evolve.runtime.usage import RequestLimitReached

    flagged_record(History(args.stores), args.verify)  # bad ids are refused before the config is read
    path = config_path(args.config)
    if path is None:
        raise ConfigError("flags --verify: no run config to evaluate on; give --config PATH or set $MEMEVOLVE_CONFIG")
    config = load_config(path).model_copy(update={"stores": Path(args.stores).resolve()})
    try:
        result, entry = reverify(config, args.verify)
    except (NothingToVerify, BudgetExhausted, RequestLimitReached) as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    c, d = result.comparison, result.decision
    p = c.paired
    print(f"re-verified {args.verify} (flagged in round {result.record.round}: {result.record.reason})")
    print(f"  change    {', '.join(f'{k}={v!r}' for k, v in result.record.changes.items())}")
    print(f"  current   {result.current_hash}")
    print(f"  candidate {result.candidate_hash} (the change applied to the current strategy; not stored, not applied)")
    print(f"paired comparison on {p.n} questions ({config.objective}): current {p.acc_baseline:.3f} -> "
          f"candidate {p.acc_candidate:.3f}  Δ {p.delta:+.4f}  McNemar p={p.mcnemar_p:.4g}  "
          f"{p.confidence:.0%} CI [{p.ci_low:+.4f}, {p.ci_high:+.4f}] ({p.ci_method})")
    print(f"  improved {len(p.improved)}, regressed {len(p.regressed)}; DCR@{config.acceptance.dcr_tau} "
          f"{c.dcr:.3f}; context words {c.cost.words_parent:.1f} -> {c.cost.words_candidate:.1f}")
    if c.holdout:
        print(f"  holdout: {c.holdout.n} questions, Δ {c.holdout.delta:+.4f}, McNemar p={c.holdout.mcnemar_p:.4g}")
    print(f"the decision contract would now say {d.verdict.value} (rule {d.rule}): {d.reason}")
    print(f"journal entry {entry['index']} {entry['type']}; nothing was applied (only a run changes the strategy)")
    return 0


def cmd_escalations(args: argparse.Namespace) -> int:
    from evolve.ops.escalations import escalations, escalations_table
    from evolve.ops.history import History
    from evolve.ops.monitors import monitor_regressions, monitors_table

    view = History(args.stores)
    items, fell = escalations(view), monitor_regressions(view)
    if fell:
        print("monitored slices regressed again (accepted with monitoring):")
        print(monitors_table(fell) + "\n")
    if not items:
        print("no escalations and no blocked candidate classes")
        return 0
    print(escalations_table(items))
    print("\nreasons:")
    print("\n".join(f"  {e.key}: {e.reason}" for e in items))
    print(f"\n{sum(e.entry is not None for e in items)} escalated, {sum(e.entry is None for e in items)} blocked "
          "below the run config's escalation_threshold")
    return 0


def candidate_id(text: str) -> str:
    """An argparse type: a candidate id (not empty or blank)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a candidate id, e.g. r001-c02 (memevolve flags lists them)")
    return text


def cmd_erase(args: argparse.Namespace) -> int:
    import json

    from evolve.errors import EvolveError
    from evolve.loop.tracking import existing_tracking_uri
    from evolve.ops.erasure import Erasure, find_manifests
    from evolve.ops.erasure_turn import parse_turn
    from evolve.serve.pseudonym import USER_KEY_ENV

    tracking = args.tracking_uri or [uri for uri in (existing_tracking_uri(None),) if uri]
    try:
        manifests = find_manifests([Path(p) for p in args.export or []])
        turns = [parse_turn(t) for t in args.turn or []]
        if args.from_service:
            named, found = _service_turns(args.from_service, manifests)
            turns += found
            if not turns:
                if not named:
                    print(f"nothing to erase: the service's records ({args.from_service}) name no erased or purged "
                          "turn")
                    return 0
                users = len({name for name, _ in named})
                print(f"error: the service's records ({args.from_service}) name {len(named)} erased or purged turn(s) "
                      f"of {users} user(s), none of a user these exports hold: the exports hold other users, or the "
                      f"service names its users with a key (${USER_KEY_ENV}) this command was not given",
                      file=sys.stderr)
                return 1
        report = Erasure(args.user or [], manifests, [Path(args.stores)], [Path(c) for c in args.cache or []],
                         [] if args.no_tracking else tracking, outside=args.follow_outside, turns=turns).run()
    except (EvolveError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    refused = report.refused()
    if args.json:
        print(json.dumps(report.to_dict(), indent=1, sort_keys=True))
        return 1 if refused else 0
    if turns:
        print(f"erasure {report.request} at {report.erased_at}: {report.turns} turn(s) of {len(report.subjects)} "
              f"conversation(s)" + (f"; {report.already} erased before" if report.already else ""))
        if not report.turns:
            print("  found nowhere: the exports' manifests list every turn named as erased before; nothing changed")
            return 0
    else:
        print(f"erasure {report.request} at {report.erased_at}: {len(report.subjects)} conversation(s)")
    for export, n in report.exports.items():
        print(f"  export {export}: " + (f"{n} turn(s) and {report.questions[export]} question(s) citing or quoting "
                                        "them removed" if turns else f"{n} sample(s) removed"))
    for directory, n in report.cache_files.items():
        print(f"  cache {directory}: {n} file(s) deleted")
    for uri, runs in report.tracking.items():
        print(f"  tracking {uri}: {len(runs)} run(s) held the words")
        for run in runs:
            print(f"    run {run.run_id}: {len(run.redacted)} artifact(s) redacted, {len(run.deleted)} deleted")
    if not report.tracking:
        print("  tracking: no MLflow store reached (none given with --tracking-uri, none at $MLFLOW_TRACKING_URI or "
              "experiments/mlflow.db)")
    for root, counts in report.stores.items():
        print(f"  stores {root}: {counts['side_files']} side file(s) redacted, {counts['records_rewritten']} "
              f"record(s) with inline words rewritten, artifacts of {counts['runs']} tracked run(s); ERASE journal "
              f"entry {counts['journal_entry']}")
    if not report.found:
        print("  found nowhere: no export, cache, side file, record or tracked run held these users' words (the "
              "request is journaled all the same); check the user ids")
    for run_id, path, why in refused:
        print(f"NOT ERASED: artifact {path} of MLflow run {run_id} still holds the words: its artifact store cannot "
              f"delete or rewrite it ({why}); delete it in the store itself")
    return 1 if refused else 0


def _service_turns(spec: str, manifests: list[Path]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The turns the service's audit at ``spec`` says it erased or purged ((user's name, turn id)), and those of users
    the manifests list ((user id, turn id))."""
    from evolve.errors import UserError
    from evolve.ops.erasure_turn import exported_turns
    from evolve.ops.manifest import read_manifest
    from evolve.serve.audit import AUDIT_FILE, erased_turns, open_audit
    from evolve.serve.stores import POSTGRES_SCHEMES

    if not manifests:
        raise UserError("--from-service needs --export: a turn's words are read from the exports holding it")
    if not spec.startswith(POSTGRES_SCHEMES) and not (Path(spec) / AUDIT_FILE).is_file():
        raise UserError(f"--from-service {spec}: no audit here ({AUDIT_FILE}; not a data directory a service wrote)")
    audit = open_audit(spec)
    named = erased_turns(audit)
    return named, exported_turns(named, {m: read_manifest(m) for m in manifests}, audit.names.of)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the governance subcommands to ``sub``."""
    p = sub.add_parser("flags", help="the FEATURE_FLAG registry: flagged candidates with reasons and status; "
                                     "--verify ID re-evaluates one against the current strategy")
    p.add_argument("candidate_id", nargs="?", type=candidate_id, help="only this flagged candidate")
    stores_arg(p)
    p.add_argument("--round", type=int, help="only candidates of this round")
    p.add_argument("--verify", metavar="CANDIDATE_ID", type=candidate_id,
                   help="apply the flagged change to the current strategy, compare the two paired on the run "
                        "config's benchmark, print the figures and journal them (REVERIFY); never applies it")
    p.set_defaults(func=cmd_flags)

    p = sub.add_parser("escalations", help="candidate classes blocked for needing a schema or framework change: "
                                           "round, reason, candidates, status; and regressions of slices accepted "
                                           "with monitoring")
    stores_arg(p)
    p.set_defaults(func=cmd_escalations)

    p = sub.add_parser("erase", help="erase users' (or single turns') words from every copy the optimizer made: "
                                     "exported benchmark files, candidate and gate examples, LLM and embedding "
                                     "caches, MLflow artifacts (journaled, ERASE); exits 1 if an artifact store "
                                     "refused to rewrite one")
    p.add_argument("--user", nargs="+", metavar="USER", help="the users (their conversations' ids) to erase")
    p.add_argument("--turn", nargs="+", action="extend", metavar="USER:ID",
                   help="erase single turns instead (user id, colon, turn id, e.g. ann:D1:3; repeatable): the turn, "
                        "the questions citing or quoting it and every copy quoting its words (docs/how-to/serve.md, "
                        "\"One turn\", says what quotes a turn); its words are read from the exports of --export")
    p.add_argument("--from-service", metavar="DATA_DIR|POSTGRES_URL",
                   help="erase the turns the service erased (DELETE .../turns/ID) or purged (retention), as its "
                        "audit records them, that the exports of --export hold or erased before (their users named "
                        "as the audit names them, under $MEMEVOLVE_USER_KEY)")
    p.add_argument("--export", nargs="+", metavar="MANIFEST|DIR",
                   help="export manifests (`capture-export` writes them), or folders holding them: the users are "
                        "removed from each export; without --user, every user they list is erased")
    p.add_argument("--follow-outside", action="store_true",
                   help="reach an export a manifest names outside the manifest's own folder (refused otherwise: an "
                        "edited manifest must not make the erasure rewrite a file that was never exported)")
    stores_arg(p)
    p.add_argument("--cache", nargs="+", metavar="DIR", help="further cache directories (an `eval --cache` "
                                                             "directory); the stores' own caches and "
                                                             "$MEMEVOLVE_EMBEDDING_CACHE are always reached")
    tracked = p.add_mutually_exclusive_group()
    tracked.add_argument("--tracking-uri", nargs="+", metavar="URI",
                         help="MLflow tracking stores whose runs' artifacts to redact (default $MLFLOW_TRACKING_URI, "
                              "or experiments/mlflow.db if present)")
    tracked.add_argument("--no-tracking", action="store_true", help="reach no MLflow tracking store")
    p.add_argument("--json", action="store_true", help="print the report as JSON (counts, no words, no user ids)")
    p.set_defaults(func=cmd_erase)
