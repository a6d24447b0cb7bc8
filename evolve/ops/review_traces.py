"""Where both sides' traces of a recorded comparison are: the trace files a gate verdict names, or, for a loop
candidate, the run directories holding an evaluation of its parent and of itself.

A candidate record keeps the paired outcome of every question, not the traces. A *run directory* is any directory
holding ``summary.json`` and ``traces.jsonl``: what ``memevolve eval --out`` writes, and what a tracked round logs
for its observed strategy (every candidate's parent) and for each fully compared candidate in a local MLflow
artifact store; one is used when its summary names the strategy's
hash and the record's benchmark. With ``evaluate``, a side found nowhere is evaluated again with the run config's
harness (deterministic roles reproduce the loop's traces) and written as a run directory under ``runs/review/``,
where the next review finds it. Every trace read must reproduce the record's outcome of its question.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from evolve.errors import UserError
from evolve.files import file_sha256
from evolve.observe.adapters import records as contract_records
from evolve.observe.contract import ContractError, to_trace
from evolve.observe.objective import Objective, success
from evolve.observe.trace import Trace, TraceError
from evolve.state.record import CandidateRecord

#: Where ``memevolve eval`` writes run directories.
EVAL_RUNS = Path("runs")
#: Where ``evaluate`` writes the run directories it makes.
REVIEW_RUNS = EVAL_RUNS / "review"


def default_roots(tracking_uri: str | None) -> list[Path]:
    """Where run directories are looked for when none is named: ``runs/`` and the local artifact store of
    ``tracking_uri`` (a run config's; ``None``: the default tracking URI)."""
    from evolve.loop.tracking import artifact_dir, default_tracking_uri

    return [EVAL_RUNS, artifact_dir(tracking_uri or default_tracking_uri())]


class TracesNotFound(UserError):
    """A side's traces are in none of the places looked at; the message lists them and how to provide them."""


@dataclass(frozen=True)
class Side:
    """One side's traces of the questions asked for, and where they were read."""

    traces: dict[str, Trace]
    source: str


def _own_traces(path: Path, wanted: set[str]) -> dict[str, Trace]:
    """The ``wanted`` questions' traces of a ``traces.jsonl`` this project wrote (every field kept)."""
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{line_no}: not JSON ({exc.msg})") from None
            if isinstance(record, dict) and record.get("question_id") in wanted:
                try:
                    out[record["question_id"]] = Trace.from_dict(record, f"{path}:{line_no}")
                except TraceError as exc:
                    raise UserError(str(exc)) from None
    return out


def _contract_traces(path: Path, adapter: str, wanted: set[str]) -> dict[str, Trace]:
    """The ``wanted`` samples of a trace file of any system, read through ``adapter`` (item lists kept)."""
    try:
        return {r["id"]: to_trace(r) for _, r in contract_records(path, adapter) if r["id"] in wanted}
    except (ContractError, FileNotFoundError) as exc:
        raise UserError(f"{path}: {exc}") from None


def _summary_keys(path: Path) -> tuple[str | None, str | None]:
    """``(strategy_hash, benchmark_hash)`` a run directory's ``summary.json`` names (``None`` if unreadable)."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    if not isinstance(summary, dict):
        return None, None
    return summary.get("strategy_hash"), summary.get("benchmark_hash")


def run_dirs(roots: Iterable[Path]) -> dict[tuple[str, str], list[Path]]:
    """The run directories under ``roots`` by ``(strategy_hash, benchmark_hash)``, newest first."""
    found: dict[tuple[str, str], list[Path]] = {}
    for root in roots:
        if not root.is_dir():
            continue
        for summary in root.rglob("summary.json"):
            keys = _summary_keys(summary)
            if None not in keys and (summary.parent / "traces.jsonl").is_file():
                found.setdefault(keys, []).append(summary.parent)
    return {k: sorted(v, key=lambda d: (d / "traces.jsonl").stat().st_mtime, reverse=True) for k, v in found.items()}


def _reproduces(traces: dict[str, Trace], expected: dict[str, bool], objective: Objective) -> str | None:
    """Why ``traces`` do not hold the recorded outcome of every question of ``expected`` (``None`` if they do)."""
    missing = sorted(expected.keys() - traces.keys())
    if missing:
        return f"lacks {len(missing)} of the {len(expected)} questions (e.g. {missing[0]})"
    differs = sorted(q for q, ok in expected.items() if success(traces[q], objective) is not ok)
    if differs:
        return (f"does not reproduce the recorded outcome of {len(differs)} question(s) (e.g. {differs[0]}: recorded "
                f"{'success' if expected[differs[0]] else 'failure'})")
    return None


def expected_outcomes(record: CandidateRecord) -> tuple[dict[str, bool], dict[str, bool]]:
    """The recorded outcome of each discordant question, parent side and candidate side."""
    p = record.paired
    parent = {**{q: False for q in p.improved}, **{q: True for q in p.regressed}}
    return parent, {q: not ok for q, ok in parent.items()}


def gate_sides(record: CandidateRecord, objective: Objective) -> tuple[Side, Side]:
    """Both sides of a gate verdict, from the files it names (which must still hash as recorded)."""
    d = record.direction
    sides = []
    for path, digest, expected in zip((Path(d["base"]), Path(d["candidate"])),
                                      (record.parent_hash, record.strategy_hash), expected_outcomes(record)):
        if not path.is_file():
            raise TracesNotFound(f"{record.candidate_id}: the trace file {path} the verdict was made on is gone; "
                                 "pass --traces BASE CANDIDATE")
        if file_sha256(path) != digest:
            raise TracesNotFound(f"{record.candidate_id}: {path} has changed since the verdict (sha256 "
                                 f"{file_sha256(path)[:12]}, recorded {digest[:12]}); pass --traces BASE CANDIDATE")
        traces = _contract_traces(path, d.get("adapter", "jsonl"), set(expected))
        if (why := _reproduces(traces, expected, objective)) is not None:
            raise UserError(f"{path} {why}")
        sides.append(Side(traces, str(path)))
    return sides[0], sides[1]


def given_sides(record: CandidateRecord, objective: Objective, files: tuple[Path, Path],
                adapter: str) -> tuple[Side, Side]:
    """Both sides from two trace files named by the reviewer (``adapter`` ``memevolve``: this project's traces)."""
    sides = []
    for path, expected in zip(files, expected_outcomes(record)):
        if not path.is_file():
            raise UserError(f"--traces {path}: no such file")
        traces = (_own_traces(path, set(expected)) if adapter == "memevolve" else
                  _contract_traces(path, adapter, set(expected)))
        if (why := _reproduces(traces, expected, objective)) is not None:
            raise UserError(f"--traces {path} {why}")
        sides.append(Side(traces, str(path)))
    return sides[0], sides[1]


def run_sides(record: CandidateRecord, objective: Objective, roots: list[Path],
              evaluate: Callable[[str], Path] | None = None) -> tuple[Side, Side]:
    """Both sides of a loop candidate from the run directories under ``roots``; ``evaluate`` (strategy hash -> a new
    run directory) makes a side found nowhere."""
    found = run_dirs(roots)
    benchmark = (record.harness or {}).get("benchmark_hash")
    sides, refused = [], []
    for name, digest, expected in zip(("parent", "candidate"), (record.parent_hash, record.strategy_hash),
                                      expected_outcomes(record)):
        side = None
        for directory in found.get((digest, benchmark), []):
            traces = _own_traces(directory / "traces.jsonl", set(expected))
            why = _reproduces(traces, expected, objective)
            if why is None:
                side = Side(traces, str(directory / "traces.jsonl"))
                break
            refused.append(f"{directory / 'traces.jsonl'} {why}")
        if side is None and evaluate is not None:
            path = evaluate(digest) / "traces.jsonl"
            traces = _own_traces(path, set(expected))
            if (why := _reproduces(traces, expected, objective)) is not None:
                raise UserError(f"the {name} evaluated again ({path}) {why}: its harness is not the record's")
            side = Side(traces, f"{path} (evaluated again)")
        if side is None:
            looked = ", ".join(str(r) for r in roots) or "no directory"
            raise TracesNotFound(
                f"{record.candidate_id}: no run directory under {looked} holds the {name}'s traces (strategy "
                f"{digest[:12]}, benchmark {str(benchmark)[:12]})" + (f"; refused: {'; '.join(refused)}" if refused
                                                                       else "")
                + f"; pass --runs DIR, --traces BASE CANDIDATE, or --evaluate to evaluate it again under the run "
                  f"config (written under {REVIEW_RUNS})")
        sides.append(side)
    return sides[0], sides[1]
