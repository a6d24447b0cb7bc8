"""Plain-text formatting shared by the engineer views (review, flags, monitors, escalations, report): short
values, a candidate's change in one line, numbers and confidence intervals, and aligned tables."""
from __future__ import annotations

from typing import Any

from evolve.state.record import CandidateRecord
from evolve.strategy.artifact import LINEAGE
from evolve.verify.statistics import PairedReport


def short(value: Any, width: int = 24) -> str:
    text = value if isinstance(value, str) and "\n" not in value else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def change_summary(record: CandidateRecord, width: int = 60) -> str:
    """The policy paths a candidate changed, ``path old→new``; the direction when no candidate was built."""
    diff = record.diff or {}
    parts = [f"{p} {short(a, 12)}→{short(b, 12)}" for p, (a, b) in sorted(diff.get("changed", {}).items())
             if p not in LINEAGE]
    parts += [f"+{p}={short(v, 12)}" for p, v in sorted(diff.get("added", {}).items()) if p not in LINEAGE]
    parts += [f"-{p}" for p, v in sorted(diff.get("removed", {}).items()) if p not in LINEAGE]
    if not parts:
        return f"({record.direction['key']}: not built)"
    return short(", ".join(parts), width)


def fmt_num(x: float | None, spec: str = "+.3f") -> str:
    return "-" if x is None else format(x, spec)


def fmt_ci(paired: PairedReport | None) -> str:
    if paired is None or paired.ci_low is None:
        return "-"
    return f"[{paired.ci_low:+.3f},{paired.ci_high:+.3f}]"


def text_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return ""
    head = list(rows[0])
    widths = {h: max(len(h), *(len(r[h]) for r in rows)) for h in head}
    lines = ["  ".join(h.ljust(widths[h]) for h in head).rstrip()]
    lines += ["  ".join(r[h].ljust(widths[h]) for h in head).rstrip() for r in rows]
    return "\n".join(lines)
