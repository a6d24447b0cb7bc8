"""The engineer's views of candidate records: selection, the candidates table and the complete record as text."""
from __future__ import annotations

import re
from typing import Iterable

from evolve.state.content import ContentStore, resolved
from evolve.state.entries import PromotePayload
from evolve.state.record import CandidateRecord
from evolve.ops.formatting import change_summary, fmt_ci, fmt_num, text_table
from evolve.ops.history import History
from evolve.observe.objective import LABEL
from evolve.runtime.roles import ANSWER_VERDICTS
from evolve.safe_text import escaped
from evolve.verify.confabulation import safe_rate
from evolve.verify.gates import GateTrail
from evolve.verify.statistics import PairedReport
from evolve.verify.decision import Verdict
from evolve.ops.promotable import said

#: Verdict names accepted by ``--decision``.
DECISIONS = {"accept": "ACCEPT", "accept_with_monitor": "ACCEPT_WITH_MONITOR", "reject": "REJECT",
             "feature_flag": "FEATURE_FLAG"}
#: Short category names for compact per-category columns.
CATEGORY_ABBREV = {"multi_hop": "mh", "temporal": "tmp", "open_domain": "od", "single_hop": "sh",
                   "adversarial": "adv"}
CANDIDATE_ID_RE = re.compile(r"^r\d{3,}-c\d{2,}$")


# ---------------------------------------------------------------- selection and formatting


def select(records: Iterable[CandidateRecord], round: int | None = None,
           decision: str | None = None) -> list[CandidateRecord]:
    """Records of one round and/or one verdict (``decision`` is a key of :data:`DECISIONS`)."""
    verdict = DECISIONS[decision] if decision else None
    return [r for r in records if (round is None or r.round == round) and (verdict is None or r.verdict == verdict)]






def usage_line(by_role: dict[str, dict[str, int]]) -> str:
    """LLM usage per role in words: calls, cache hits, tokens in/out and time waited."""
    return "; ".join(f"{role} {c.get('requests', 0)} calls ({c.get('cache_hits', 0)} cached), "
                     f"{c.get('prompt_tokens', 0)}+{c.get('completion_tokens', 0)} tokens, "
                     f"{c.get('latency_ms', 0) / 1000:.1f}s" for role, c in by_role.items())


#: The keys of a summary's ``answers``: the verdicts, then the kind summaries written before verdicts also had.
ANSWER_KINDS = (*ANSWER_VERDICTS, "confabulated")






def category_deltas(paired: PairedReport | None) -> str:
    """Compact per-category deltas, e.g. ``mh+0.04 sh-0.01``."""
    return " ".join(f"{CATEGORY_ABBREV.get(c, c[:3])}{row['delta']:+.2f}"
                    for c, row in sorted((paired.per_category if paired else {}).items()))


def candidate_row(record: CandidateRecord) -> dict[str, str]:
    """One record as the table's display strings."""
    paired = record.paired
    return {"id": record.candidate_id, "round": str(record.round), "change": change_summary(record),
            "decided_by": record.decided_by, "Δ": fmt_num(paired.delta if paired else None),
            "p": fmt_num(paired.mcnemar_p if paired else None, ".3g"), "CI": fmt_ci(paired),
            "per-category Δ": category_deltas(paired) or "-", "verdict": record.verdict,
            "applied": "yes" if record.applied else "no"}




def candidates_table(records: list[CandidateRecord], view: History) -> str:
    """The records' rows, each saying whether its strategy may reach users (``memevolve show ID`` says why)."""
    def promotable(r: CandidateRecord) -> str:
        sound = said(view, r)
        return "-" if sound is None else "yes" if sound.ok else "no"

    return text_table([{**candidate_row(r), "promotable": promotable(r)} for r in records])


# ---------------------------------------------------------------- the complete record


def objective_of(record: CandidateRecord) -> str:
    """The objective a candidate was decided under (recorded with its harness; ``accuracy`` before that)."""
    return (record.harness or {}).get("objective", "accuracy")


def _gate_lines(gates: GateTrail | None) -> list[str]:
    if gates is None:
        return ["gates: not run"]
    verdict = "passed" if gates.passed else f"refused by {gates.decided_by}"
    width = max(len(g.name) for g in gates.results)
    return [f"gates: {verdict}"] + [f"  {'ok  ' if g.passed else 'FAIL'} {g.name.ljust(width)}  {g.reason}"
                                    for g in gates.results]


def _paired_lines(record: CandidateRecord) -> list[str]:
    p = record.paired
    if not p:
        return ["paired comparison: not run (screened out earlier)"]
    label = LABEL[objective_of(record)]
    lines = [f"paired comparison on {p.n} questions ({label}): parent {p.acc_baseline:.3f} -> candidate "
             f"{p.acc_candidate:.3f}  Δ {p.delta:+.4f}  McNemar p={p.mcnemar_p:.4g}  "
             f"{p.confidence:.0%} CI [{p.ci_low:+.4f}, {p.ci_high:+.4f}] ({p.ci_method})",
             f"  improved {len(p.improved)}, regressed {len(p.regressed)}, both correct "
             f"{len(p.both_correct)}, both wrong {len(p.both_wrong)}; "
             f"DCR@{record.dcr_tau} {fmt_num(record.dcr, '.3f')}"]
    rows = [{"category": c, "n": str(r["n"]), f"parent {label}": f"{r['acc_baseline']:.3f}",
             f"candidate {label}": f"{r['acc_candidate']:.3f}", "Δ": f"{r['delta']:+.3f}"}
            for c, r in sorted(p.per_category.items())]
    lines += ["  " + line for line in text_table(rows).splitlines()]
    if (secondary := secondary_text(record)) is not None:
        lines.append(f"  {secondary}")
    return lines


def secondary_text(record: CandidateRecord) -> str | None:
    """The secondary outcome's comparison in words (``None`` when the record has none)."""
    s = record.secondary
    if s is None:
        return None
    name = LABEL.get(((record.rules or {}).get("acceptance") or {}).get("secondary"), "as recorded")
    adjusted = (f", {record.secondary_testing.method}-adjusted p={record.secondary_testing.p_adjusted:.4g}"
                if record.secondary_testing else "")
    return (f"secondary outcome ({name}) on {s.n} questions: Δ {fmt_num(s.delta, '+.4f')}  McNemar "
            f"p={s.mcnemar_p:.4g}{adjusted}  CI [{fmt_num(s.ci_low, '+.4f')}, {fmt_num(s.ci_high, '+.4f')}]")


def _example_lines(record: CandidateRecord, side: str, content: ContentStore) -> list[str]:
    examples = (resolved(record.examples, content) or {}).get(side, [])
    total = len(getattr(record.paired, side)) if record.paired else 0
    if not total:
        return [f"{side} questions: none"]
    if record.examples is None:  # a gate verdict recorded before gates kept examples
        return [f"{side} questions: {total} (no examples recorded)"]
    lines = [f"{side} questions ({len(examples)} of {total} shown):"]
    for ex in examples:
        lines += [f"  [{ex['question_id']}] ({ex['category']}) {ex['question']}",
                  f"      gold:      {ex['gold']}",
                  f"      parent:    {ex['baseline_answer']!r}  (root cause: {ex['baseline_root_cause'] or 'correct'})",
                  f"      candidate: {ex['candidate_answer']!r}  "
                  f"(root cause: {ex['candidate_root_cause'] or 'correct'})"]
    return lines


def answers_text(summary: dict | None) -> str | None:
    """A summary's answers by verdict (or, written before verdicts, by kind), its safe rate and its confabulated
    answers over both populations (``None`` when nothing was answered)."""
    answers = (summary or {}).get("answers") or {}
    if not answers:
        return None
    counts = ", ".join(f"{kind} {answers[kind]}" for kind in ANSWER_KINDS if kind in answers)
    text = f"answers: {counts}; safe rate (correct + abstain) {fmt_num(safe_rate(answers), '.3f')}"
    if c := (summary or {}).get("confabulation"):
        text += (f"; confabulated {c['flagged']} ({fmt_num(c['over_answers'], '.3f')} of answers, "
                 f"{fmt_num(c['over_non_abstentions'], '.3f')} of non-abstentions)")
    return text


def _answer_lines(record: CandidateRecord) -> list[str]:
    """The candidate's answers by verdict with its safe rate and confabulated answers, and the confabulation guard's
    comparison."""
    lines = []
    if (text := answers_text(record.summary)) is not None:
        lines.append(text)
    if record.confabulation:
        c = record.confabulation
        lines.append(f"confabulation guard: {c.n} questions answered by both, confabulation rate Δ {c.delta:+.4f} "
                     f"(McNemar p={c.mcnemar_p:.4g}, CI [{c.ci_low:+.4f}, {c.ci_high:+.4f}])")
    return lines


def render_record(record: CandidateRecord, view: History) -> str:
    """Everything recorded about one candidate, as plain text."""
    r, direction, harness = record, record.direction, record.harness or {}
    lines = [f"candidate {r.candidate_id} (round {r.round}): {r.verdict}, decided by {r.decided_by} "
             f"(rule {r.decision.rule}); applied: {'yes' if r.applied else 'no'}",
             f"reason: {r.reason}",
             f"direction: {direction['key']} for symptom {r.symptom}",
             f"  why: {escaped(direction.get('why', '-'))}"]
    sound = said(view, r)
    if sound is not None:
        lines.insert(2, f"promotable: {'yes' if sound.ok else 'no'}: {sound.why}")
    if harness:
        schema = f", schema {harness['schema_hash'][:12]}" if harness.get("schema_hash") else ""  # a gate has none
        lines.append(f"harness: {harness.get('benchmark', '?')} (benchmark {harness['benchmark_hash'][:12]}), judge "
                     f"{harness['judge']}, {harness['n_questions']} questions{schema}")
    if r.strategy_hash:
        lines.append(f"strategy: {r.strategy_hash}  {view.strategy_path(r.strategy_hash)}")
    lines.append(f"parent:   {r.parent_hash}  {view.strategy_path(r.parent_hash)}")
    lines += ["", "diff (parent -> candidate):"]
    lines += ["  " + line for line in (r.diff_text or "(no candidate was built)").splitlines()]
    lines += ["", *_gate_lines(r.gates)]
    critic = r.critic
    lines.append(f"critic: {critic.label}{' (blocks)' if critic.blocks else ''}" if critic else "critic: not run")
    lines += [f"  - {reason}" for reason in (critic.reasons if critic else [])]
    if r.evidence_screen:
        e = r.evidence_screen
        lines.append(f"evidence screen (no LLM call): {e.n} questions, all-evidence-packed Δ {e.delta:+.4f}, "
                     f"McNemar p={e.mcnemar_p:.4g}, CI [{e.ci_low:+.4f}, {e.ci_high:+.4f}]")
    probe = r.probe
    lines.append(f"probe: {probe.n} questions ({LABEL[objective_of(r)]}), parent {probe.acc_baseline:.3f} "
                 f"-> candidate {probe.acc_candidate:.3f} (Δ {probe.delta:+.3f})" if probe else "probe: not run")
    if r.llm:
        lines.append("llm (screen, probe and full evaluation): " + usage_line(r.llm))
    if r.cost:
        before, after = r.cost.words_parent, r.cost.words_candidate
        growth = f" ({after / before - 1:+.1%})" if before else ""
        lines.append(f"cost: context words per question {before:.1f} -> {after:.1f}{growth}")
    if r.staleness:
        parent, cand = r.staleness["parent"], r.staleness["candidate"]
        lines.append(f"staleness ({cand['n']} questions with outdated evidence): outdated turn in the context "
                     f"{parent.get('packed', 0):.3f} -> {cand['packed']:.3f}, in the top 5 "
                     f"{parent.get('retrieved@5', 0):.3f} -> {cand['retrieved@5']:.3f}")
    if r.holdout:
        h = r.holdout
        lines.append(f"holdout: {h.n} held-out questions, parent {h.score_parent:.3f} -> candidate "
                     f"{h.score_candidate:.3f} (Δ {h.delta:+.4f}, +{h.improved}/-{h.regressed}, McNemar "
                     f"p={h.mcnemar_p:.4g}, CI [{h.ci_low:+.4f}, {h.ci_high:+.4f}])")
    lines += _answer_lines(r)
    if r.multiple_testing:
        m = r.multiple_testing
        lines.append(f"multiple testing: {m.method} over the round's {len(m.family)} fully compared candidates "
                     f"({', '.join(m.family)}): McNemar p {m.p_raw:.4g} -> adjusted {m.p_adjusted:.4g}")
    lines += ["", *_paired_lines(r), "", *_example_lines(r, "improved", view.content), "",
              *_example_lines(r, "regressed", view.content), "", "restore / promote:",
              f"  parent file (what was current before): {view.strategy_path(r.parent_hash)}"]
    if r.strategy_hash:
        lines.append(f"  candidate file: {view.strategy_path(r.strategy_hash)}")
    if r.strategy_hash and not view.strategy_path(r.strategy_hash).is_file():
        lines.append("  not promotable: no strategy file (a memevolve gate verdict on trace files)")
    elif r.verdict == Verdict.ACCEPT:
        lines.append(f"  promote: memevolve promote {r.candidate_id} --to strategies/serving.yaml")
    elif r.verdict == Verdict.ACCEPT_WITH_MONITOR:
        lines.append(f"  promote: memevolve promote {r.candidate_id} --to strategies/serving.yaml --accept-monitor")
    else:
        lines.append(f"  not promotable ({r.verdict}): only ACCEPT decisions (ACCEPT_WITH_MONITOR with "
                     "--accept-monitor) can be promoted")
    lines.append("  roll back a promotion: memevolve rollback [--to ENTRY_INDEX]")
    lines += _governance_lines(r, view)
    return "\n".join(lines)


def _governance_lines(record: CandidateRecord, view: History) -> list[str]:
    """The candidate's promotions with their approval, and a flagged candidate's re-verifications."""
    from evolve.ops.drift import approval_text
    from evolve.ops.flags import reverifications, reverified_text
    from evolve.ops.monitors import monitor_regressions, regression_text

    lines = [f"  promoted: entry {e.index} ({e.ts[:19]}) to {e.payload.target}, {approval_text(e.payload.approval)}"
             for e in view.entries
             if isinstance(e.payload, PromotePayload) and e.payload.candidate_id == record.candidate_id]
    if record.verdict == Verdict.ACCEPT_WITH_MONITOR:
        fell = monitor_regressions(view, record.candidate_id)
        lines += ["", "monitored slices regressed again:" if fell else
                  "monitored slices: no regression in later rounds or on the holdout"]
        lines += [f"  {regression_text(e)}" for e in fell]
    if record.verdict == Verdict.FEATURE_FLAG:
        again = reverifications(view, record.candidate_id)
        lines += ["", "re-verifications (memevolve flags --verify):" if again else
                  f"re-verifications: none (memevolve flags --verify {record.candidate_id})"]
        lines += [f"  {reverified_text(e)}" for e in again]
    return lines
