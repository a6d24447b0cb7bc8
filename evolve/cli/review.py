"""``memevolve review ID``: the review page of a candidate's (or a gate verdict's) discordant questions, their
root-cause labels exported and imported, and two reviewers' agreement (exit 0 done, 2 bad input)."""
from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

from evolve.cli.defaults import CONFIG_HELP, config_path
from evolve.errors import UserError

#: A gate verdict's id.
GATE_ID = re.compile(r"^gate-\d{4,}$")


def _history(stores: str, candidate_id: str):
    """The history holding ``candidate_id``: the stores, or for a gate verdict their gate store."""
    from evolve.ops.history import History
    from evolve.state.layout import StoreLayout

    view = History(stores)
    if view.record(candidate_id) is None and GATE_ID.match(candidate_id):
        gate = StoreLayout(Path(stores)).gate
        if gate.joinpath("state.json").is_file():
            view = History(gate)
    if view.record(candidate_id) is None:
        raise UserError(f"no candidate {candidate_id!r} in {view.layout.store('candidate_outcomes')}")
    return view


def _evaluator(args: argparse.Namespace, view):
    """Evaluate a stored strategy again under the run config and keep its run directory under ``runs/review``."""
    from evolve.loop.config import load_config
    from evolve.loop.setup import RunSetup
    from evolve.ops.review_traces import REVIEW_RUNS

    path = config_path(args.config)
    if path is None:
        raise UserError("--evaluate needs the run config the candidate was decided under (--config)")
    setup = RunSetup.prepare(load_config(path))
    harness = setup.harness()[0]

    def evaluate(digest: str) -> Path:
        run = harness.evaluate(view.get_strategy(digest), setup.question_ids, desc=f"review {digest[:12]}")
        return run.write(REVIEW_RUNS / digest[:16])

    return evaluate


def _sides(args: argparse.Namespace, view, record):
    from evolve.ops.review import objective_of
    from evolve.loop.config import load_config
    from evolve.ops.review_traces import default_roots, gate_sides, given_sides, run_sides

    objective = objective_of(record)
    if args.traces:
        return given_sides(record, objective, (Path(args.traces[0]), Path(args.traces[1])), args.adapter)
    if "base" in record.direction and "candidate" in record.direction:  # a gate verdict
        return gate_sides(record, objective)
    path = config_path(args.config)
    roots = [Path(r) for r in args.runs] or default_roots(load_config(path, check_files=False).tracking_uri
                                                          if path is not None else None)
    return run_sides(record, objective, roots, _evaluator(args, view) if args.evaluate else None)


def _agreement(args: argparse.Namespace) -> int:
    """Print Cohen's kappa of the two label files of ``--agreement``."""
    from evolve.observe.labels import read_labels
    from evolve.ops.audit import agreement

    a, b = args.agreement
    files = read_labels(a), read_labels(b)
    for name, labels in zip((a, b), files):
        other = next((label for label in labels if label.candidate_id != args.candidate_id), None)
        if other is not None:
            raise UserError(f"{name}: labels question {other.question_id} of {other.candidate_id}, not of "
                            f"{args.candidate_id}")
    result = agreement(*files, (a, b))

    def fmt(k: float | None) -> str:
        return "undefined" if k is None else f"{k:.3f}"

    print(f"{result.n} questions labelled in both; observed agreement {result.observed:.3f}; Cohen's kappa "
          f"{fmt(result.kappa)}")
    for label, kappa in result.per_label.items():
        print(f"  {label}: kappa {fmt(kappa)}")
    return 0


def cmd_review(args: argparse.Namespace) -> int:
    from evolve.observe.labels import read_labels, write_labels
    from evolve.ops.audit import (checked_import, discordances, discordant_ids, journal_labels, journaled_labels,
                                  prefilled)
    from evolve.ops.outputs import check_output_file
    from evolve.files import atomic_write_text

    if args.agreement:
        return _agreement(args)
    view = _history(args.stores, args.candidate_id)
    record = view.record(args.candidate_id)
    if args.import_labels:
        labels = checked_import(record, read_labels(args.import_labels), args.import_labels)
        if not labels:
            raise UserError(f"{args.import_labels}: no confirmed label (set confirmed to true for the labels a "
                            "reviewer has checked); nothing imported")
        entry = journal_labels(view.root, record.candidate_id, labels, args.import_labels)
        corrected = sum(label.corrected for label in labels)
        print(f"imported {len(labels)} confirmed label(s) of {record.candidate_id} ({corrected} correct the ladder): "
              f"journal entry {entry['index']} LABELS in {view.root}; the next round's planning reads them")
        return 0
    discordant_ids(record)  # refuses a record without a full comparison before any trace is looked for
    parent, candidate = _sides(args, view, record)
    items = discordances(record, parent, candidate)
    labels = prefilled(record, items, journaled_labels(view, record.candidate_id))
    if args.export_labels:
        out = check_output_file("--export-labels", args.export_labels)
        write_labels(out, labels)
        print(f"wrote {len(labels)} label(s) to {args.export_labels}")
        return 0
    from evolve.ops.promotable import said
    from evolve.ops.review_page import render_review

    out = check_output_file("--out", args.out or Path("runs") / f"review-{record.candidate_id}.html")
    atomic_write_text(out, render_review(record, items, labels, (parent, candidate), said(view, record)))
    causes = Counter(str(d.ladder) for d in items)
    print(f"wrote {out}: {len(items)} discordances ({len(record.paired.improved)} improved, "
          f"{len(record.paired.regressed)} regressed), {sum(label.confirmed for label in labels)} labelled; "
          "failing side's root cause: " + ", ".join(f"{c} {n}" for c, n in sorted(causes.items())))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``review`` to ``sub``."""
    from evolve.observe.adapters import ADAPTERS

    p = sub.add_parser("review", help="the review page of a candidate's or gate verdict's discordant questions, "
                                      "with both traces side by side; label export, import and agreement "
                                      "(docs: how-to/review.md)")
    p.add_argument("candidate_id", help="candidate id (r001-c02) or gate verdict id (gate-0001)")
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--stores", help="stores directory (default: the run config's stores, else stores/); a gate "
                                    "verdict is also looked for in their gate store")
    p.add_argument("--out", metavar="PATH", help="HTML file to write (default: runs/review-ID.html)")
    p.add_argument("--runs", action="append", default=[], metavar="DIR",
                   help="directory to look for run directories (summary.json + traces.jsonl) in; repeatable "
                        "(default: runs/ and the run config's local MLflow artifacts, experiments/mlartifacts unless "
                        "its tracking_uri says otherwise)")
    p.add_argument("--traces", nargs=2, metavar=("BASE", "CANDIDATE"), help="the two sides' trace files")
    p.add_argument("--adapter", choices=sorted(ADAPTERS), default="memevolve",
                   help="how --traces files are read (default: %(default)s)")
    p.add_argument("--evaluate", action="store_true",
                   help="evaluate a side found in no run directory again under the run config (kept under "
                        "runs/review/)")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--export-labels", metavar="FILE", help="write the labels (.csv or .jsonl) instead of the page")
    action.add_argument("--import-labels", metavar="FILE",
                        help="journal the confirmed labels of FILE (.csv or .jsonl) for the next round's planning")
    action.add_argument("--agreement", nargs=2, metavar=("A", "B"),
                        help="Cohen's kappa of two reviewers' label files, overall and per label")
    p.set_defaults(func=cmd_review, resolve_stores=True)
