"""Plain JSONL: each line already is a contract record (``trace_version`` may be left out: the current one)."""
from __future__ import annotations

from evolve.observe.contract import TRACE_VERSION


def record(line: dict) -> dict:
    """The line as a contract record."""
    return line if "trace_version" in line else {"trace_version": TRACE_VERSION, **line}
