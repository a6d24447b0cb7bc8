"""Trace files of any memory system, read as trace-contract records (:mod:`evolve.observe.contract`).

An adapter turns one line (a JSON object) of a system's log into one contract record; :func:`read_traces` streams a
file line by line through it, checks every record, refuses duplicate ids and mixed contract versions (naming the file
and line), and keeps of each record only the slim :class:`~evolve.observe.trace.Trace` the gate compares, so memory
grows with the number of samples, not the size of the file.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

from evolve.files import FileRefused, open_regular
from evolve.observe.adapters import harness, jsonl, mem0, retriever
from evolve.observe.contract import ContractError, check, to_trace
from evolve.observe.objective import Objective, located_cause
from evolve.observe.trace import Trace

#: Each adapter: a function from one log line (a JSON object) to a contract record.
ADAPTERS: dict[str, Callable[[dict], dict]] = {"jsonl": jsonl.record, "memevolve": harness.record,
                                               "mem0": mem0.record, "retriever": retriever.record}
#: Longest line read (one sample's record); a longer one is refused rather than loaded.
MAX_LINE_BYTES = 16 * 1024 * 1024


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    try:
        fh = open_regular(path)
    except FileRefused as exc:
        raise ContractError(f"{path}: {exc.strerror}") from None
    except IsADirectoryError:
        raise ContractError(f"{path}: is a directory, not a trace file") from None
    except FileNotFoundError:
        raise
    except OSError as exc:  # a symbolic link loop, no permission
        raise ContractError(f"{path}: cannot read: {exc.strerror}") from None
    with fh:
        for line_no, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES:
                raise ContractError(f"{path}:{line_no}: line longer than {MAX_LINE_BYTES // 2**20} MiB; one sample's "
                                    "record must be shorter")
            if raw.strip():
                yield line_no, raw


def records(path: str | Path, adapter: str = "jsonl") -> Iterator[tuple[str, dict]]:
    """``(where, record)`` for each line of ``path`` turned into a checked contract record by ``adapter``;
    :class:`ContractError` naming ``file:line`` for a line that is not JSON, that the adapter cannot read, or whose
    record the contract refuses, and for a contract version other than the first line's."""
    if adapter not in ADAPTERS:
        raise ContractError(f"unknown adapter {adapter!r}; expected one of {', '.join(ADAPTERS)}")
    path, version = Path(path), None
    for line_no, raw in _lines(path):
        where = f"{path}:{line_no}"
        try:
            line: Any = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ContractError(f"{where}: not JSON ({exc})") from None
        if not isinstance(line, dict):
            raise ContractError(f"{where}: expected a JSON object, got {type(line).__name__}")
        try:
            record = ADAPTERS[adapter](line)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ContractError(f"{where}: the {adapter} adapter cannot read this line: {exc!r}") from None
        if version is None:
            version = (record.get("trace_version"), line_no)
        elif record.get("trace_version") != version[0]:
            raise ContractError(f"{where}: trace_version {record.get('trace_version')!r} differs from "
                                f"{version[0]!r} on line {version[1]}: mixed contract versions in one file")
        yield where, check(record, where)


def _slim(trace: Trace) -> Trace:
    """``trace`` without the item lists the gate no longer needs once outcomes and stages are known."""
    for name in ("stored_ids", "retrieved", "filtered", "dropped", "packed"):
        setattr(trace, name, [])
    trace.question = trace.gold_answer = ""
    return trace


def read_traces(path: str | Path, adapter: str = "jsonl", objective: Objective = "accuracy") -> list[Trace]:
    """Every sample of ``path`` as a slim trace (outcomes, valid stages, context size, the root cause of its failure
    under ``objective``: :func:`~evolve.observe.objective.located_cause`), in file order; :class:`ContractError` for
    a bad line (see :func:`records`) or an id seen before (naming both lines)."""
    seen: dict[str, str] = {}
    out = []
    for where, record in records(path, adapter):
        if record["id"] in seen:
            raise ContractError(f"{where}: duplicate id {record['id']!r} (first at {seen[record['id']]})")
        seen[record["id"]] = where
        trace = to_trace(record)
        trace.root_cause = located_cause(trace, objective)
        out.append(_slim(trace))
    if not out:
        raise ContractError(f"{path}: no record")
    return out
