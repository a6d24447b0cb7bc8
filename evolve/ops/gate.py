"""``memevolve gate``: the decision contract on two trace files of any memory system, journaled like a candidate.

The two files (trace-contract records, or a system's log through an adapter, :mod:`evolve.observe.adapters`) are
paired by sample id; mismatched id sets are refused with the difference listed. The comparison dossier is the loop's
(:func:`evolve.verify.dossier.compare_traces`): the objective's paired report, DCR@tau over the failure/discordance
set, context cost, confabulation, secondary outcome, the hypothesis check; the gain test is adjusted over the
family the caller names (``family``: the other tests of the same round, id -> p), as the loop adjusts a round.
The verdict is committed to a gate store as one round holding one candidate record (``gate-NNNN``) and its journal
entries, so ``show``, ``report``, ``candidates`` and ``journal verify`` read it; a gate run that names a loop
escalation (``answers``) records that key as its direction and is listed by ``memevolve escalations``.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from evolve.errors import UserError
from evolve.files import file_sha256
from evolve.loop.config import RunConfig
from evolve.loop.rules import recorded_rules, rules_of
from evolve.ops.history import History
from evolve.observe.adapters import read_traces
from evolve.observe.contract import ContractError
from evolve.observe.ladder import RESULTS
from evolve.observe.objective import LABEL, Objective, outcomes
from evolve.observe.summarize import context_words
from evolve.observe.trace import Trace
from evolve.state.bundle import RoundBundle
from evolve.state.content import by_reference
from evolve.state.record import CandidateRecord
from evolve.state.records import dump_record, record_hash, report_hash
from evolve.state.stores import StoreSet
from evolve.verify.comparison import Comparison
from evolve.verify.decision import Decision, Stage, decide, journal_type
from evolve.verify.dossier import compare_traces, examples, failure_set
from evolve.verify.hypothesis import EVERY, Prediction, predicted
from evolve.verify.multiplicity import Adjustment, adjust
from evolve.verify.outcomes import ContextCost

#: The gate's own name in a multiple-testing family.
SELF = "gate"
#: The journal entry re-deciding an earlier member of a named family.
REDECIDE = "REDECIDE"
#: Ids listed per side when the id sets differ.
SHOWN_IDS = 10


@dataclass(frozen=True)
class GateInput:
    """What one gate run compares, and under what."""

    base: Path
    candidate: Path
    config: RunConfig
    adapter: str = "jsonl"
    #: What the change is for and the failure category it should move; both ``None``: gated without a hypothesis
    #: (``--no-hypothesis``), which the verdict records.
    hypothesis: str | None = None
    prediction: Prediction | None = None
    answers: str | None = None
    #: Other tests of the gain family: id -> raw p (and of the secondary outcome's family).
    family: Mapping[str, float] = field(default_factory=dict)
    secondary_family: Mapping[str, float] = field(default_factory=dict)
    #: A named family in the gate store (``--family NAME``): this run's verdict and those of the family's earlier
    #: members are adjusted together, the earlier ones re-decided (:func:`journal`).
    family_name: str | None = None


@dataclass(frozen=True)
class GateResult:
    record: CandidateRecord
    comparison: Comparison
    decision: Decision
    #: Size of the failure/discordance set DCR was computed over.
    n_failures: int
    #: The other tests' ids in the gain and secondary families.
    family: frozenset[str] = frozenset()
    #: The rules it was decided under (a named family re-decides with them).
    config: RunConfig = field(default_factory=RunConfig)
    #: The earlier members of its named family whose verdict it changed: the ``REDECIDE`` payloads journaled.
    redecided: list[dict] = field(default_factory=list)


def family(option: str, tests: list[tuple[str, float]]) -> dict[str, float]:
    """The ``option`` (``--family-p ID=P``, repeated) tests as id -> p; :class:`UserError` for an id given twice (the
    last would win unseen) or for the gate's own name in the family (it would replace the gate's p)."""
    counts = Counter(name for name, _ in tests)
    twice = sorted(name for name, count in counts.items() if count > 1)
    if twice:
        raise UserError(f"{option} {twice[0]}: given {counts[twice[0]]} times; give each other test of the family "
                        "once")
    if SELF in counts:
        raise UserError(f"{option} {SELF}: is the gate's own name in the family; name only the other tests")
    return dict(tests)


def _listed(ids: set[str]) -> str:
    shown = sorted(ids)[:SHOWN_IDS]
    return ", ".join(shown) + (f", ... (+{len(ids) - SHOWN_IDS})" if len(ids) > SHOWN_IDS else "")


def paired_traces(base: Path, candidate: Path, adapter: str, objective: Objective = "accuracy"
                  ) -> tuple[list[Trace], list[Trace]]:
    """Both files' traces, diagnosed under ``objective``; :class:`ContractError` when their id sets differ, or a
    sample's category, listing them."""
    left, right = read_traces(base, adapter, objective), read_traces(candidate, adapter, objective)
    a, b = {t.question_id for t in left}, {t.question_id for t in right}
    if a != b:
        parts = [f"{len(a - b)} only in {base}: {_listed(a - b)}" if a - b else "",
                 f"{len(b - a)} only in {candidate}: {_listed(b - a)}" if b - a else ""]
        raise ContractError(f"the two trace files hold different sample ids ({'; '.join(p for p in parts if p)}); "
                            "a paired comparison needs the same samples in both")
    category = {t.question_id: t.category for t in left}
    moved = {t.question_id: (category[t.question_id], t.category) for t in right
             if t.category != category[t.question_id]}
    if moved:
        first = min(moved)
        raise ContractError(f"{len(moved)} sample(s) have another category in {candidate} than in {base}: "
                            f"{_listed(set(moved))} (e.g. {first}: {moved[first][0]!r} vs {moved[first][1]!r}); a "
                            "paired comparison needs the same samples in both")
    return left, right


def _unjudged(path: Path, traces: list[Trace]) -> str | None:
    """How many scored samples of ``path`` lack a valid judge (the accuracy objective's outcome), if any."""
    missing = {t.question_id for t in traces if t.scored and RESULTS not in t.stages}
    if not missing:
        return None
    return f"{len(missing)} of {sum(t.scored for t in traces)} scored sample(s) in {path}: {_listed(missing)}"


def _adjustments(comparison: Comparison, gate: GateInput) -> None:
    """The gain test's (and the secondary outcome's) p adjusted over the named family, as the loop adjusts a
    round's candidates (a family of one keeps its raw p)."""
    method = gate.config.acceptance.multiple_testing
    raw = {SELF: comparison.paired.mcnemar_p, **gate.family}
    if method == "none" or len(raw) < 2:
        return
    comparison.multiple_testing = Adjustment(method, list(raw), raw[SELF], adjust(raw, method)[SELF])
    if comparison.secondary is not None:
        secondary = {SELF: comparison.secondary.mcnemar_p, **gate.secondary_family}
        comparison.secondary_testing = Adjustment(method, list(secondary), secondary[SELF],
                                                  adjust(secondary, method)[SELF])


def hypothesis_of(gate: GateInput) -> dict | None:
    """The hypothesis a gate run was given, as its record and verdict keep it (``None``: gated without one)."""
    if gate.prediction is None:
        return None
    return {"text": gate.hypothesis or "", "predict": str(gate.prediction)}


def evaluate(gate: GateInput) -> GateResult:
    """Read, pair, compare and decide (nothing written); :class:`UserError` for bad input."""
    config = gate.config
    objective = config.objective
    base, cand = paired_traces(gate.base, gate.candidate, gate.adapter, objective)
    if objective == "accuracy":
        unjudged = [u for u in (_unjudged(gate.base, base), _unjudged(gate.candidate, cand)) if u is not None]
        if unjudged:
            raise UserError(f"objective accuracy needs every scored sample's judge, and "
                            f"{'; '.join(unjudged)} have no valid one (no \"judge\", or one the trace contract "
                            "refuses, e.g. \"correct\" not true or false); add the judge's verdicts, mark "
                            "unjudged samples \"scored\": false, or gate under objective evidence or answer")
    n = len(outcomes(base, objective).keys() & outcomes(cand, objective).keys())
    if n == 0:
        raise UserError(f"no sample counts under objective {objective} ({LABEL[objective]}) in both files")
    if gate.prediction is not None and gate.prediction.category != EVERY:
        categories = {t.category for t in cand}
        if gate.prediction.category not in categories:
            raise UserError(f"--predict {gate.prediction}: no sample has category {gate.prediction.category!r} "
                            f"(categories: {', '.join(sorted(categories))})")
    cost = ContextCost(*(context_words([t for t in side if t.scored])["mean"] for side in (base, cand)))
    comparison = compare_traces(base, cand, config.acceptance, objective=objective, seed=config.seed, cost=cost,
                                prediction=gate.prediction, diagnosed=True)
    _adjustments(comparison, gate)
    decision = decide(comparison, config.acceptance, config.cost if config.cost.active else None)
    record = CandidateRecord(
        "", 0, {"key": gate.answers or SELF, "why": gate.hypothesis or "-", "base": str(gate.base),
                "candidate": str(gate.candidate), "adapter": gate.adapter, "hypothesis": hypothesis_of(gate),
                **({"family": gate.family_name} if gate.family_name else {})},
        gate.answers or SELF, file_sha256(gate.base),
        {"benchmark": f"gate:{gate.base.name} vs {gate.candidate.name}",
         "benchmark_hash": hashlib.sha256("\n".join(sorted(t.question_id for t in base)).encode()).hexdigest(),
         "judge": "as recorded in the traces", "n_questions": len(base), "objective": objective,
         "rules": rules_of(config.acceptance, config.cost)},
        strategy_hash=file_sha256(gate.candidate))
    record.paired, record.dcr, record.cost = comparison.paired, comparison.dcr, comparison.cost
    record.confabulation, record.secondary, record.hypothesis = (comparison.confabulation, comparison.secondary,
                                                                 comparison.hypothesis)
    record.multiple_testing, record.secondary_testing = comparison.multiple_testing, comparison.secondary_testing
    record.examples = examples(comparison.paired, base, cand)
    record.close(decision, Stage.DECISION)
    return GateResult(record, comparison, decision, len(failure_set(outcomes(base, objective),
                                                                     outcomes(cand, objective))),
                      frozenset(gate.family) | frozenset(gate.secondary_family), config)


def _decision_now(history: History, record: CandidateRecord) -> Decision:
    """A record's verdict as it stands: its last ``REDECIDE`` entry's, else its own."""
    found = [e.payload for e in history.entries
             if e.type == REDECIDE and e.payload.candidate_id == record.candidate_id]
    return Decision.from_dict(found[-1].decision) if found else record.decision


def _family_adjustments(records: list[CandidateRecord], method: str) -> dict[str, tuple[Adjustment | None,
                                                                                       Adjustment | None]]:
    """Each member's gain (and secondary) test adjusted over the family's members, in their order."""
    ids = [r.candidate_id for r in records]
    gain = adjust({r.candidate_id: r.paired.mcnemar_p for r in records}, method)
    with_secondary = [r for r in records if r.secondary is not None]
    secondary = adjust({r.candidate_id: r.secondary.mcnemar_p for r in with_secondary}, method)
    return {r.candidate_id: (
        Adjustment(method, ids, r.paired.mcnemar_p, gain[r.candidate_id]),
        Adjustment(method, [m.candidate_id for m in with_secondary], r.secondary.mcnemar_p,
                   secondary[r.candidate_id]) if r.secondary is not None else None) for r in records}


def _join_family(result: GateResult, history: History | None, name: str) -> list[dict]:
    """Adjust ``result``'s record (its id already given) with the earlier members of family ``name`` in the store,
    decide it again, and return a ``REDECIDE`` payload for each earlier member whose verdict that changes.
    :class:`UserError` when the rules adjust nothing (``multiple_testing: none``)."""
    method = result.config.acceptance.multiple_testing
    if method == "none":
        raise UserError(f"--family {name}: acceptance.multiple_testing is none, so a family adjusts nothing; set "
                        "holm, bonferroni or bh in the run config")
    record = result.record
    members = [r for r in (history.records if history is not None else [])
               if r.direction.get("family") == name and r.comparison is not None]
    if not members:  # a family of one keeps its raw p
        return []
    adjusted = _family_adjustments([*members, record], method)
    record.multiple_testing, record.secondary_testing = adjusted[record.candidate_id]
    config = result.config
    record.close(decide(record.comparison, config.acceptance, config.cost if config.cost.active else None),
                 Stage.DECISION)
    changed = []
    for member in members:
        member.multiple_testing, member.secondary_testing = adjusted[member.candidate_id]
        acceptance, cost = recorded_rules(member.rules or {})
        before, after = _decision_now(history, member), decide(member.comparison, acceptance,
                                                               cost if cost.active else None)
        if (after.verdict, after.rule) != (before.verdict, before.rule):
            changed.append({"candidate_id": member.candidate_id, "family": name, "by": record.candidate_id,
                            "previous": before.to_dict(), "decision": after.to_dict(),
                            "multiple_testing": member.multiple_testing.to_dict(),
                            "secondary_testing": (member.secondary_testing.to_dict()
                                                  if member.secondary_testing else None)})
    return changed


def journal(result: GateResult, stores: Path, escalations: set[str] | None = None) -> dict:
    """Commit the gate's record to the gate store ``stores`` as its next round (id ``gate-NNNN``) with its CANDIDATE
    and verdict journal entries; returns the verdict's entry. A record answering an escalation must name one of
    ``escalations``, and the families must not name the record's own id (:class:`UserError` otherwise, nothing
    written). A record of a named family is adjusted with the family's earlier members, which are decided again: a
    changed verdict is journaled in the same commit as a ``REDECIDE`` entry (``result.redecided``)."""
    record = result.record
    if record.symptom != SELF and escalations is not None and record.symptom not in escalations:
        raise UserError(f"--answers {record.symptom}: no such escalation (known: "
                        f"{', '.join(sorted(escalations)) or 'none'})")
    with StoreSet(stores) as store:
        n = store.last_committed_round + 1
        if f"gate-{n:04d}" in result.family:
            raise UserError(f"--family-p gate-{n:04d}: is the id of this gate run's own record; name only the other "
                            "tests of the family")
        record.candidate_id, record.round = f"gate-{n:04d}", n
        record.examples = by_reference(record.examples, store.content)
        name = record.direction.get("family")
        history = History(stores) if n > 1 else None
        result.redecided[:] = _join_family(result, history, name) if name else []
        bundle = RoundBundle()
        bundle.records["candidate_outcomes"] = [dump_record(record)]
        bundle.journal = [
            ("CANDIDATE", {"candidate_id": record.candidate_id, "strategy_hash": record.strategy_hash,
                           "parent_hash": record.parent_hash, "diff": {}, "decided_by": record.decided_by,
                           "gate": {"base": record.direction["base"], "candidate": record.direction["candidate"],
                                    "answers": record.symptom if record.symptom != SELF else None}}),
            (journal_type(record.verdict), {
                "candidate_id": record.candidate_id, "strategy_hash": record.strategy_hash,
                "decision": record.decision.to_dict(), "hypothesis": record.direction.get("hypothesis"),
                "applied": False, "report_hash": report_hash(record),
                "record_hash": record_hash(record), "restore_to": record.parent_hash}),
            *((REDECIDE, payload) for payload in result.redecided)]
        store.commit_round(n, bundle)
        return store.journal.find(journal_type(record.verdict), candidate_id=record.candidate_id)[-1]


def _family_p(records: Mapping[str, CandidateRecord], ids: list[str], own: str, secondary: bool) -> dict[str, float]:
    """The raw p of each other member of a recorded family, as the loop adjusted it (a fully compared candidate's
    paired p, or its secondary p; a probe-stopped one's probe p)."""
    out = {}
    for cid in ids:
        if cid == own:
            continue
        r = records[cid]
        if secondary:
            out[cid] = r.secondary.mcnemar_p
        else:
            out[cid] = r.paired.mcnemar_p if r.decided_by == Stage.DECISION else r.probe.mcnemar_p
    return out


def replay_args(record: CandidateRecord, records: Mapping[str, CandidateRecord]) -> list[str]:
    """The ``memevolve gate`` options that decide a fully compared candidate of a loop's stores again from trace files
    of its parent and of itself: its hypothesis, and the other members of its round's families with their raw p."""
    args = ["--adapter", "memevolve"]
    prediction = predicted(record.symptom) if record.hypothesis is not None else None
    args += (["--hypothesis", record.symptom, "--predict", str(prediction)] if prediction is not None
             else ["--no-hypothesis"])
    if prediction is not None and not record.hypothesis.binding:
        args += ["--predicted-by", "planner"]
    for option, adjustment, secondary in (("--family-p", record.multiple_testing, False),
                                          ("--family-secondary-p", record.secondary_testing, True)):
        if adjustment is not None:
            for cid, p in _family_p(records, adjustment.family, record.candidate_id, secondary).items():
                args += [option, f"{cid}={p!r}"]
    return args
