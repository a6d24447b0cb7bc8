"""Read-only view of a stores directory, and the engineer's views of candidate records (table and full record).

:class:`StoreView` reads the stores without taking the run lock and without repairing anything, so it can be
used while a run holds the lock; it never writes. Writers (promote, rollback) use :class:`evolve.state.stores.StoreSet`.
"""
from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

from evolve.strategy.artifact import LINEAGE
from evolve.state.journal import Journal, VerifyResult
from evolve.state.files import StoreError, iter_jsonl, read_json
from evolve.state.stores import read_stored_strategy, stored_strategy_path

#: Verdict names accepted by ``--decision``.
DECISIONS = {"accept": "ACCEPT", "accept_with_monitor": "ACCEPT_WITH_MONITOR", "reject": "REJECT",
             "feature_flag": "FEATURE_FLAG"}
#: Short category names for compact per-category columns.
CATEGORY_ABBREV = {"multi_hop": "mh", "temporal": "tmp", "open_domain": "od", "single_hop": "sh",
                   "adversarial": "adv"}
CANDIDATE_ID_RE = re.compile(r"^r\d{3,}-c\d{2,}$")


class ReadOnlyJournal(Journal):
    """A :class:`Journal` opened for reading only: no torn-tail repair and no head parsing on open."""

    def __init__(self, path: str | Path):  # Journal.__init__ would repair a torn tail, i.e. write
        self.path = Path(path)
        self.repaired_tail = b""

    def append(self, type: str, payload: dict, round: int | None = None, seq: int | None = None) -> dict:
        raise StoreError(self.path, "journal opened read-only; open a StoreSet to append")


class StoreView:
    """Lock-free, read-only access to the stores under ``root``."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not (self.root / "state.json").is_file():
            raise StoreError(self.root, "not a stores directory (no state.json): run `memevolve run` first "
                                        "or pass --stores DIR")
        self.journal = ReadOnlyJournal(self.root / "journal.jsonl")

    @cached_property
    def state(self) -> dict:
        return read_json(self.root / "state.json")

    @cached_property
    def records(self) -> list[dict]:
        """All candidate records, in commit order."""
        return [r for _, r in iter_jsonl(self.root / "candidate_outcomes.jsonl")]

    @cached_property
    def diagnosis(self) -> list[dict]:
        return [r for _, r in iter_jsonl(self.root / "diagnosis_log.jsonl")]

    @cached_property
    def rounds(self) -> list[dict]:
        """Scoreboard rows, one per committed round."""
        return read_json(self.root / "scoreboard.json", {"rounds": []})["rounds"]

    @property
    def harness(self) -> dict | None:
        return self.state.get("harness")

    def record(self, candidate_id: str) -> dict | None:
        return next((r for r in self.records if r["candidate_id"] == candidate_id), None)

    def strategy_path(self, digest: str) -> Path:
        return stored_strategy_path(self.root, digest)

    def stored_strategy(self, digest: str) -> dict:
        """A stored strategy, checked against its hash (:class:`StoreError` if missing or edited)."""
        return read_stored_strategy(self.root, digest)

    def verify_journal(self) -> VerifyResult:
        """Chain check plus the committed head recorded in ``state.json``."""
        return self.journal.verify(anchor=self.state.get("journal_head"))

    def summary_of(self, digest: str) -> dict | None:
        """The latest recorded evaluation summary of a strategy (round observation or candidate run)."""
        found = [d["summary"] for d in self.diagnosis if d.get("strategy_hash") == digest]
        found += [r["summary"] for r in self.records if r.get("strategy_hash") == digest and r.get("summary")]
        return found[-1] if found else None


# ---------------------------------------------------------------- selection and formatting


def select(records: Iterable[dict], round: int | None = None, decision: str | None = None) -> list[dict]:
    """Records of one round and/or one verdict (``decision`` is a key of :data:`DECISIONS`)."""
    verdict = DECISIONS[decision] if decision else None
    return [r for r in records if (round is None or r["round"] == round)
            and (verdict is None or r["decision"]["verdict"] == verdict)]


def short(value: Any, width: int = 24) -> str:
    text = value if isinstance(value, str) and "\n" not in value else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def change_summary(record: dict, width: int = 60) -> str:
    """The policy paths a candidate changed, ``path old→new``; the direction when no candidate was built."""
    diff = record.get("diff") or {}
    parts = [f"{p} {short(a, 12)}→{short(b, 12)}" for p, (a, b) in sorted(diff.get("changed", {}).items())
             if p not in LINEAGE]
    parts += [f"+{p}={short(v, 12)}" for p, v in sorted(diff.get("added", {}).items()) if p not in LINEAGE]
    parts += [f"-{p}" for p, v in sorted(diff.get("removed", {}).items()) if p not in LINEAGE]
    if not parts:
        return f"({record['direction']['key']}: not built)"
    return short(", ".join(parts), width)


def fmt_num(x: float | None, spec: str = "+.3f") -> str:
    return "-" if x is None else format(x, spec)


def fmt_ci(paired: dict) -> str:
    if paired.get("ci_low") is None:
        return "-"
    return f"[{paired['ci_low']:+.3f},{paired['ci_high']:+.3f}]"


def category_deltas(paired: dict) -> str:
    """Compact per-category deltas, e.g. ``mh+0.04 sh-0.01``."""
    return " ".join(f"{CATEGORY_ABBREV.get(c, c[:3])}{row['delta']:+.2f}"
                    for c, row in sorted((paired.get("per_category") or {}).items()))


def candidate_row(record: dict) -> dict[str, str]:
    """One record as the table's display strings."""
    paired = record.get("paired") or {}
    return {"id": record["candidate_id"], "round": str(record["round"]), "change": change_summary(record),
            "decided_by": record["decided_by"], "Δ": fmt_num(paired.get("delta")),
            "p": fmt_num(paired.get("mcnemar_p"), ".3g"), "CI": fmt_ci(paired),
            "per-category Δ": category_deltas(paired) or "-", "verdict": record["decision"]["verdict"],
            "applied": "yes" if record.get("applied") else "no"}


def text_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return ""
    head = list(rows[0])
    widths = {h: max(len(h), *(len(r[h]) for r in rows)) for h in head}
    lines = ["  ".join(h.ljust(widths[h]) for h in head).rstrip()]
    lines += ["  ".join(r[h].ljust(widths[h]) for h in head).rstrip() for r in rows]
    return "\n".join(lines)


def candidates_table(records: list[dict]) -> str:
    return text_table([candidate_row(r) for r in records])


# ---------------------------------------------------------------- the complete record


def _gate_lines(gates: dict | None) -> list[str]:
    if gates is None:
        return ["gates: not run"]
    verdict = "passed" if gates["passed"] else f"refused by {gates['decided_by']}"
    width = max(len(g["name"]) for g in gates["results"])
    return [f"gates: {verdict}"] + [f"  {'ok  ' if g['passed'] else 'FAIL'} {g['name'].ljust(width)}  {g['reason']}"
                                    for g in gates["results"]]


def _paired_lines(record: dict) -> list[str]:
    p = record.get("paired")
    if not p:
        return ["paired comparison: not run (screened out earlier)"]
    lines = [f"paired comparison on {p['n']} questions: parent {p['acc_baseline']:.3f} -> candidate "
             f"{p['acc_candidate']:.3f}  Δ {p['delta']:+.4f}  McNemar p={p['mcnemar_p']:.4g}  "
             f"{p['confidence']:.0%} CI [{p['ci_low']:+.4f}, {p['ci_high']:+.4f}] ({p['ci_method']})",
             f"  improved {len(p['improved'])}, regressed {len(p['regressed'])}, both correct "
             f"{len(p['both_correct'])}, both wrong {len(p['both_wrong'])}; DCR@3 {fmt_num(record.get('dcr'), '.3f')}"]
    rows = [{"category": c, "n": str(r["n"]), "parent": f"{r['acc_baseline']:.3f}",
             "candidate": f"{r['acc_candidate']:.3f}", "Δ": f"{r['delta']:+.3f}"}
            for c, r in sorted(p["per_category"].items())]
    lines += ["  " + line for line in text_table(rows).splitlines()]
    return lines


def _example_lines(record: dict, side: str) -> list[str]:
    examples = (record.get("examples") or {}).get(side, [])
    total = len((record.get("paired") or {}).get(side, []))
    if not total:
        return [f"{side} questions: none"]
    lines = [f"{side} questions ({len(examples)} of {total} shown):"]
    for ex in examples:
        lines += [f"  [{ex['question_id']}] ({ex['category']}) {ex['question']}",
                  f"      gold:      {ex['gold']}",
                  f"      parent:    {ex['baseline_answer']!r}  (root cause: {ex['baseline_root_cause'] or 'correct'})",
                  f"      candidate: {ex['candidate_answer']!r}  "
                  f"(root cause: {ex['candidate_root_cause'] or 'correct'})"]
    return lines


def render_record(record: dict, view: StoreView) -> str:
    """Everything recorded about one candidate, as plain text."""
    d, direction = record["decision"], record["direction"]
    harness = record.get("harness") or {}
    lines = [f"candidate {record['candidate_id']} (round {record['round']}): {d['verdict']}, decided by "
             f"{record['decided_by']} (rule {d['rule']}); applied: {'yes' if record.get('applied') else 'no'}",
             f"reason: {d['reason']}",
             f"direction: {direction['key']} for symptom {record['symptom']}",
             f"  why: {direction.get('why', '-')}"]
    if harness:
        lines.append(f"harness: {harness.get('benchmark', '?')} (benchmark {harness['benchmark_hash'][:12]}), judge "
                     f"{harness['judge']}, {harness['n_questions']} questions, schema "
                     f"{str(harness.get('schema_hash', '?'))[:12]}")
    if record["strategy_hash"]:
        lines.append(f"strategy: {record['strategy_hash']}  {view.strategy_path(record['strategy_hash'])}")
    lines.append(f"parent:   {record['parent_hash']}  {view.strategy_path(record['parent_hash'])}")
    lines += ["", "diff (parent -> candidate):"]
    lines += ["  " + line for line in (record.get("diff_text") or "(no candidate was built)").splitlines()]
    lines += ["", *_gate_lines(record.get("gates"))]
    critic = record.get("critic")
    lines.append(f"critic: {critic['label']}{' (blocks)' if critic['blocks'] else ''}" if critic else "critic: not run")
    lines += [f"  - {reason}" for reason in (critic or {}).get("reasons", [])]
    probe = record.get("probe")
    lines.append(f"probe: {probe['n']} questions, parent {probe['acc_baseline']:.3f} -> candidate "
                 f"{probe['acc_candidate']:.3f} (Δ {probe['delta']:+.3f})" if probe else "probe: not run")
    lines += ["", *_paired_lines(record), "", *_example_lines(record, "improved"), "",
              *_example_lines(record, "regressed"), "", "restore / promote:",
              f"  parent file (what was current before): {view.strategy_path(record['parent_hash'])}"]
    if record["strategy_hash"]:
        lines.append(f"  candidate file: {view.strategy_path(record['strategy_hash'])}")
    if d["verdict"] == "ACCEPT":
        lines.append(f"  promote: memevolve promote {record['candidate_id']} --to strategies/serving.yaml")
    elif d["verdict"] == "ACCEPT_WITH_MONITOR":
        lines.append(f"  promote: memevolve promote {record['candidate_id']} --to strategies/serving.yaml "
                     "--accept-monitor")
    else:
        lines.append(f"  not promotable ({d['verdict']}): only ACCEPT decisions (ACCEPT_WITH_MONITOR with "
                     "--accept-monitor) can be promoted")
    lines.append("  roll back a promotion: memevolve rollback [--to ENTRY_INDEX]")
    return "\n".join(lines)
