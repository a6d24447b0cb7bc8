"""This project's own ``traces.jsonl`` (what ``memevolve eval`` writes): each line a serialised
:class:`~evolve.observe.trace.Trace`, turned into a contract record by :func:`evolve.observe.contract.from_trace`."""
from __future__ import annotations

from evolve.observe.contract import from_trace
from evolve.observe.trace import Trace


def record(line: dict) -> dict:
    """The harness trace as a contract record."""
    return from_trace(Trace.from_dict(line))
