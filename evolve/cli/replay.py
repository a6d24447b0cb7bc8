"""``memevolve replay`` (serving vs a candidate on captured traffic, journaled, optional automatic rollback) and
``memevolve capture-export`` (captured conversations as a LoCoMo benchmark file)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evolve.cli.workflow import stores_arg


def _data_of(logs: list[Path]) -> str | None:
    """The service data directory the recall logs lie in (``<data>/users/<user>/recalls.jsonl``), if one."""
    for log in logs:
        if len(log.parents) > 2 and log.parent.parent.name == "users":
            return str(log.parents[2])
    return None


def _torn(path: Path, line: int, data: bytes) -> None:
    """Report a torn last line a reader skips (a crash cut the service's append short)."""
    print(f"warning: {path}: line {line}: torn last line skipped ({len(data)} bytes of an append a crash cut short; "
          "left in place)", file=sys.stderr)


def _data_dir(data: str) -> dict[Path, str]:
    """A service data directory as an output's protected path (a database URL protects nothing here)."""
    from evolve.ops.outputs import protect
    from evolve.serve.stores import POSTGRES_SCHEMES

    return {} if data.startswith(POSTGRES_SCHEMES) else protect([data], "the service's data directory")


def _candidate(stores: str, ref: str, parts):
    from evolve.canonical import sha256_hex
    from evolve.serve.strategy import Loaded, load_candidate
    from evolve.strategy.artifact import load_strategy, strategy_hash

    path = Path(ref)
    if path.is_file():
        strategy = load_strategy(path)
        return Loaded(parts.runtime(strategy), strategy_hash(strategy), f"file {path}",
                      sha256_hex(path.read_bytes()), "candidate", None)
    return load_candidate(stores, ref, parts)


def cmd_replay(args: argparse.Namespace) -> int:
    from evolve.errors import EvolveError
    from evolve.files import StoreError, atomic_write_json, reading_only
    from evolve.ops.history import History
    from evolve.ops.outputs import check_output_file, protect, served_files
    from evolve.ops.serving import Refused as RollbackRefused
    from evolve.runtime.embedder import default_embedder
    from evolve.serve.answers import answer_map, category_map, load_answers
    from evolve.serve.replay import read_recalls, recall_logs, replay, stored_recalls, text
    from evolve.serve.stores import open_backend
    from evolve.serve.strategy import RuntimeParts, ServingRefused, load_serving
    from evolve.serve.verdict import auto_rollback, contract_rules, journal_replay, rollback_triggers

    try:
        view = History(args.stores)
    except StoreError as exc:
        print(f"error: replay journals its verdict in the stores: {exc}", file=sys.stderr)
        return 2
    try:
        logs = recall_logs(args.log or [])
        data = args.data or _data_of(logs)
        if data is None:
            print("error: pass --data: the recall logs do not lie in a service data directory "
                  "(<data>/users/<user>/recalls.jsonl)" if logs else "error: pass --log or --data", file=sys.stderr)
            return 2
        out = None
        if args.json:  # written after the verdict is journaled: every check is made now
            read = {**protect([args.stores], "the stores this replay journals in"), **served_files(view.entries),
                    **protect([args.serving], "the serving file"), **_data_dir(data),
                    **protect(logs, "a recall log this replay reads"),
                    **protect([args.answers] if args.answers else [], "the answers file")}
            out = check_output_file("--json", args.json, protected=read, new_dirs=False)
        backend = open_backend(data)
        with reading_only(_torn):  # the service's logs: a torn last line is skipped, never repaired from here
            records = read_recalls(logs) if logs else stored_recalls(backend)
        entries = load_answers(args.answers) if args.answers else []
        rules = contract_rules(view)
        if args.alpha is not None:
            rules = rules.model_copy(update={"alpha": args.alpha})
        parts = RuntimeParts(default_embedder())
        serving = load_serving(args.stores, args.serving, parts, args.allow_untracked)
        candidate = _candidate(args.stores, args.candidate, parts)
        with reading_only(_torn):
            report = replay(records, backend, serving, candidate, answer_map(entries),
                            categories=category_map(entries), rules=rules)
    except ServingRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    except (EvolveError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    entry = journal_replay(args.stores, report, logs, args.candidate)
    print(text(report))
    print(f"journaled: REPLAY entry {entry.index}")
    if out is not None:
        atomic_write_json(out, entry.payload.model_dump(mode="json"))
        print(f"wrote {args.json}")
    triggers, notes = rollback_triggers(args.stores, args.serving, serving, candidate, report)
    for note in notes:
        print(f"note: {note}")
    for trigger in triggers:
        print(f"rollback trigger: {trigger}")
    if triggers and args.auto_rollback:
        try:
            result = auto_rollback(args.stores, args.serving, triggers, entry, args.serving_dir, args.allow_outside)
        except RollbackRefused as exc:
            print(f"automatic rollback refused: {exc}", file=sys.stderr)
            return 1
        print(f"rolled back {result.target} to {result.served.strategy_hash[:12]} (ROLLBACK entry "
              f"{result.entry.index}, automatic)")
    elif triggers:
        print("not rolled back: pass --auto-rollback to roll back on these triggers")
    return 0


def cmd_capture_export(args: argparse.Namespace) -> int:
    from evolve.errors import EvolveError
    from evolve.files import atomic_write_json, reading_only
    from evolve.ops.manifest import default_manifest, manifest_of, write_manifest
    from evolve.ops.outputs import check_output_file, protect
    from evolve.serve.answers import load_answers
    from evolve.serve.export import export_benchmark
    from evolve.serve.stores import open_backend

    try:
        read = {**_data_dir(args.data), **protect([args.answers] if args.answers else [], "the answers file")}
        out = check_output_file("--out", args.out, protected=read)
        manifest = check_output_file("--manifest", args.manifest or str(default_manifest(Path(args.out))),
                                     protected={**read, **protect([args.out], "the exported benchmark file")})
        answers = load_answers(args.answers) if args.answers else []
        with reading_only(_torn):
            samples = export_benchmark(open_backend(args.data), args.user or [], answers)
    except (EvolveError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    atomic_write_json(out, samples)
    write_manifest(manifest, manifest_of(out, manifest, samples, [s["sample_id"] for s in samples]))
    questions = sum(len(s["qa"]) for s in samples)
    unanswered = sum(len(s["unanswered"]) for s in samples)
    print(f"wrote {args.out}: {len(samples)} conversation(s), {questions} answered question(s), {unanswered} "
          f"unanswered (listed for labelling); manifest {manifest} (what `memevolve erase` reads)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="serving strategy vs a candidate on captured recalls, paired by request; "
                                      "journals the verdict (REPLAY)")
    p.add_argument("--log", nargs="+", metavar="RECALL_LOG",
                   help="recall logs (recalls*.jsonl) or directories holding them, e.g. the service's data directory "
                        "(default: every recall the --data store holds, e.g. a postgresql:// store)")
    p.add_argument("--serving", default="strategies/serving.yaml",
                   help="serving file; used only if it checks out against the journal (default: %(default)s)")
    p.add_argument("--candidate", required=True, metavar="CANDIDATE_ID|FILE",
                   help="a recorded candidate's id, or a strategy file")
    stores_arg(p)
    p.add_argument("--data", help="the service's store (data directory or postgresql:// URL) the memory is rebuilt "
                                  "from (default: the directory the logs lie in)")
    p.add_argument("--answers", metavar="ANSWERS_YAML", help="the operator's answers, for answer-in-context (and the "
                                                            "categories they name, for the slices)")
    p.add_argument("--alpha", type=float, help="significance level (default: the alpha of the decision contract the "
                                               "stores were made under, else 0.05)")
    p.add_argument("--auto-rollback", action="store_true",
                   help="roll the serving file back when the serving strategy regresses against the one a rollback "
                        "restores, or a slice accepted with monitoring regressed since its promotion")
    p.add_argument("--allow-untracked", action="store_true", help="also replay a serving file no journal tracks")
    p.add_argument("--serving-dir", help="directory serving files must lie in (for --auto-rollback)")
    p.add_argument("--allow-outside", action="store_true", help="allow a serving file outside the serving directory")
    p.add_argument("--json", metavar="PATH", help="also write the journaled figures as JSON to PATH, in an existing "
                                                  "directory; checked before anything is journaled (never inside "
                                                  "stores, the service's data, a serving or strategy file)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("capture-export", help="captured conversations as a LoCoMo-format benchmark file")
    p.add_argument("--data", required=True, help="the service's store (data directory or postgresql:// URL)")
    p.add_argument("--user", nargs="+", metavar="USER", help="users to export (default: every user with memory)")
    p.add_argument("--out", required=True, help="benchmark file to write (JSON); checked before anything is read "
                                                "(never inside stores, the service's data, a serving or strategy "
                                                "file)")
    p.add_argument("--answers", metavar="ANSWERS_YAML", help="the operator's answers: these questions become qa items")
    p.add_argument("--manifest", metavar="PATH", help="where the manifest (users and turn ids per file, read by "
                                                      "`memevolve erase`) goes (default: beside --out, "
                                                      "<name>.manifest.json)")
    p.set_defaults(func=cmd_capture_export)
