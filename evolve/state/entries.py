"""The decision journal's entry types and one payload model per type, checked when entries are read.

The journal stores each payload as the dict its writer built (the chain hashes those bytes); :func:`read_entry`
turns a stored entry into a :class:`JournalEntry` whose ``payload`` is its type's model. Keys that some writers
omit, or that older versions did not write, default to ``None`` (or empty); any other missing or unknown key is a
:class:`PayloadError` naming the entry and the field.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evolve.errors import EvolveError
from evolve.observe.labels import LabelsImport
from evolve.verify.confirmation import Confirmation


class EntryType(str, Enum):
    """Every entry type the journal accepts (its value is the stored ``type``)."""

    ROUND = "ROUND"              # a round started or finished (summary)
    CANDIDATE = "CANDIDATE"      # a candidate strategy was proposed or evaluated
    ACCEPT = "ACCEPT"            # a candidate passed verification
    REJECT = "REJECT"            # a candidate failed a gate, the critic or verification
    RESTORE = "RESTORE"          # state restored from a checkpoint generation (e.g. after corruption)
    PROMOTE = "PROMOTE"          # a recorded accept was installed as a serving file
    ROLLBACK = "ROLLBACK"        # a serving file was restored to a file an earlier entry installed or replaced
    ESCALATE = "ESCALATE"        # a problem needs a human decision
    FLAG = "FLAG"                # an anomaly worth attention that needs no decision
    RECOVER = "RECOVER"          # crash recovery finished an interrupted round or repaired a store
    BUDGET_STOP = "BUDGET_STOP"  # a run stopped before a round because its next evaluation would pass the budget
    REVERIFY = "REVERIFY"        # a flagged change was evaluated again against the current strategy (never applied)
    RULES = "RULES"              # the decision rules changed by a human decision (old rules, new rules, reason)
    MONITOR = "MONITOR"          # a slice accepted with monitoring regressed again (a later round, or the holdout)
    REPLAY = "REPLAY"            # serving vs a candidate on captured traffic: the paired figures and the verdict
    NIGHT = "NIGHT"              # a night ended: why, how far it went, its confirmation, the start restored if refused
    LABELS = "LABELS"            # reviewers' confirmed root-cause labels of a candidate's discordant questions
    ERASE = "ERASE"              # users' (or turns') words were erased from these stores: counts, records rewritten
    REDECIDE = "REDECIDE"        # a recorded verdict decided again: a later member of its family moved its adjusted p
    CANARY = "CANARY"            # a canary beside a serving file started, changed or stopped (approval; evidence)

    def __str__(self) -> str:
        return self.value


class Payload(BaseModel):
    """A journal payload: exactly the keys its writers put in it."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class RoundPayload(Payload):
    """``ROUND``: a committed round, from which strategy to which, its score and the candidate it applied."""

    round: int
    from_: str = Field(alias="from")
    to: str
    accuracy: float | None
    score: float | None = None
    harness: dict[str, Any]
    accepted: str | None


class CandidatePayload(Payload):
    """``CANDIDATE``: a candidate proposed in a round (or gated: ``gate`` names its two sides and what it answers)."""

    candidate_id: str
    strategy_hash: str | None
    parent_hash: str | None
    diff: dict[str, Any]
    decided_by: str | None
    gate: dict[str, Any] | None = None


class DecisionPayload(Payload):
    """``ACCEPT`` / ``REJECT`` / ``FLAG`` (a feature flag): a candidate's journaled decision."""

    candidate_id: str
    strategy_hash: str | None
    decision: dict[str, Any]
    applied: bool
    report_hash: str
    record_hash: str | None = None
    restore_to: str | None
    hypothesis: dict[str, Any] | None = None


class UntrackedRound(Payload):
    """``FLAG`` of a committed round its tracking store did not take."""

    what: Literal["untracked_round"]
    round: int
    tracking_uri: str
    error: str


class CheckpointFallback(Payload):
    """``RESTORE`` of the newest intact checkpoint generation when a newer one was refused."""

    what: Literal["checkpoint"]
    fallback_from: str
    refused: list[list[str]]
    using: str
    generation: str | int | None = None


class BestEverRestore(Payload):
    """``RESTORE`` of the best-ever strategy after a round fell below it."""

    from_: str = Field(alias="from")
    to: str
    best_score: float
    score: float | None
    why: str


class ServedFile(Payload):
    """A serving file as a ``PROMOTE`` or ``ROLLBACK`` left it, and the file it replaced (``None``: none)."""

    target: str
    strategy_hash: str
    file_sha256: str
    copy_: str = Field(alias="copy")
    previous_hash: str | None
    previous_file_sha256: str | None
    previous_copy: str | None


class PromotePayload(ServedFile):
    """``PROMOTE``: a recorded accept installed as a serving file, with its approval (``None``: unapproved)."""

    candidate_id: str
    verdict: str
    approval: dict[str, Any] | None = None


class RollbackPayload(ServedFile):
    """``ROLLBACK``: the entry it undoes (or the entry ``--to`` named) and what triggered an automatic one."""

    undoes: int | None
    to_entry: int | None
    trigger: dict[str, Any] | None = None


class EscalatePayload(Payload):
    """``ESCALATE``: a blocked direction escalated, in how many rounds and which."""

    key: str
    count: int
    rounds: list[int]


class StoreRecovery(Payload):
    """``RECOVER`` of interrupted round commits and torn store files on opening the stores."""

    reapplied: list[int]
    discarded: list[dict[str, Any]]
    repaired: list[dict[str, Any]]
    removed_temps: list[str]


class ServingRecovery(Payload):
    """``RECOVER`` of an interrupted serving change: its intent, the outcome and the entry that completed it."""

    serving_change: dict[str, Any]
    outcome: Literal["completed", "abandoned", "unresolved"]
    entry: int | None


class BudgetStopPayload(Payload):
    """``BUDGET_STOP``: the round not run, what was next, spent and expected, the limits and which bound."""

    round: int
    next: str
    spent: dict[str, Any]
    expected: dict[str, Any] | None = None
    limits: dict[str, Any]
    exceeded: list[str]


class ReverifyPayload(Payload):
    """``REVERIFY``: a flagged change compared again with the current strategy, and what would be decided."""

    candidate_id: str
    flagged_round: int
    flagged_decision: dict[str, Any]
    changes: dict[str, Any]
    current_strategy: str
    candidate_strategy: str
    harness: dict[str, Any]
    paired: dict[str, Any]
    dcr: float | None = None
    cost: dict[str, Any] | None = None
    holdout: dict[str, Any] | None = None
    confabulation: dict[str, Any] | None = None
    secondary: dict[str, Any] | None = None
    hypothesis: dict[str, Any] | None = None
    would_decide: dict[str, Any]
    applied: Literal[False]


class RulesPayload(Payload):
    """``RULES``: the stores' rules (``None``: not recorded), the new ones, each changed rule and why."""

    old: dict[str, Any] | None
    new: dict[str, Any]
    changed: list[dict[str, Any]] | None
    reason: str


class MonitorPayload(Payload):
    """``MONITOR``: a slice accepted with monitoring that regressed again: where, when, its scores."""

    candidate_id: str
    category: str
    where: str
    round: int
    accepted_score: float
    score: float
    epsilon: float


class ReplayPayload(Payload):
    """``REPLAY``: serving vs a candidate on captured recalls: the logs, the paired figures and the verdict."""

    serving_hash: str | None
    candidate_hash: str | None
    candidate: str
    logs: list[dict[str, Any]]
    n: int
    users: int
    verdict: str
    reasons: list[str]
    referee: dict[str, Any] | None = None
    floors: dict[str, Any] | None = None
    clean_context: dict[str, Any] | None
    answer_in_context: dict[str, Any] | None
    slices: dict[str, Any] | None = None
    words: dict[str, Any]
    latency_ms: dict[str, Any]
    overlap: dict[str, Any]
    reproduced: dict[str, Any]


#: Why a night ended.
EndReason = Literal["rounds", "patience", "evaluations", "minutes"]


class NightRecord(Payload):
    """``NIGHT``: the journaled end of a night: how far it went, why it stopped, what it decided."""

    ended: EndReason
    first_round: int
    last_round: int
    rounds: int
    evaluations: int
    start: str
    final: str
    diff: dict[str, list] = Field(description="effective changes start -> final, {path: [old, new]}")
    confirmation: Confirmation | None = Field(None, description="None: no confirmation set, or nothing changed")
    restored: str | None = Field(None, description="the start's hash when the confirmation refused the final")


class ErasePayload(Payload):
    """``ERASE``: an erasure request carried to these stores: subjects, side files, records and runs rewritten."""

    request: str
    erased_at: str
    subjects: list[str]
    turns: list[str] = Field(default_factory=list, description="a turn erasure's turns, each the hash of user and "
                                                               "turn id (none: whole users)")
    side_files: int
    records: dict[str, dict[str, Any]] = Field(default_factory=dict)
    cache_files: int = 0
    artifacts: dict[str, Any] = Field(default_factory=dict)


class RedecidePayload(Payload):
    """``REDECIDE``: a family member's verdict decided again after a later member moved its adjusted p."""

    candidate_id: str
    family: str
    by: str
    previous: dict[str, Any]
    decision: dict[str, Any]
    multiple_testing: dict[str, Any]
    secondary_testing: dict[str, Any] | None


class CanaryPayload(Payload):
    """``CANARY``: a canary beside ``target`` started, changed or stopped; by whom, approved how, on what evidence."""

    target: str
    action: Literal["start", "change", "stop"]
    candidate_id: str
    strategy_hash: str
    fraction: float
    verdict: str | None = None
    previous_fraction: float | None = None
    cap: float | None = None
    cap_override: bool | None = None
    start_entry: int | None = None
    by: str
    approval: dict[str, Any] | None
    evidence: dict[str, Any] | None = None


#: Any entry's payload model.
AnyPayload = Union[RoundPayload, CandidatePayload, DecisionPayload, UntrackedRound, CheckpointFallback,
                   BestEverRestore, PromotePayload, RollbackPayload, EscalatePayload, StoreRecovery, ServingRecovery,
                   BudgetStopPayload, ReverifyPayload, RulesPayload, MonitorPayload, ReplayPayload, NightRecord,
                   LabelsImport, ErasePayload, RedecidePayload, CanaryPayload]

#: The payload model of each entry type written in one form.
PAYLOADS: dict[EntryType, type[BaseModel]] = {
    EntryType.ROUND: RoundPayload, EntryType.CANDIDATE: CandidatePayload, EntryType.ACCEPT: DecisionPayload,
    EntryType.REJECT: DecisionPayload, EntryType.PROMOTE: PromotePayload, EntryType.ROLLBACK: RollbackPayload,
    EntryType.ESCALATE: EscalatePayload, EntryType.BUDGET_STOP: BudgetStopPayload, EntryType.REVERIFY: ReverifyPayload,
    EntryType.RULES: RulesPayload, EntryType.MONITOR: MonitorPayload, EntryType.REPLAY: ReplayPayload,
    EntryType.NIGHT: NightRecord, EntryType.LABELS: LabelsImport, EntryType.ERASE: ErasePayload,
    EntryType.REDECIDE: RedecidePayload, EntryType.CANARY: CanaryPayload,
}
#: Entry types written in two forms: the key only the first form has, the first form's model, the other's.
FORMS: dict[EntryType, tuple[str, type[BaseModel], type[BaseModel]]] = {
    EntryType.FLAG: ("what", UntrackedRound, DecisionPayload),
    EntryType.RESTORE: ("what", CheckpointFallback, BestEverRestore),
    EntryType.RECOVER: ("serving_change", ServingRecovery, StoreRecovery),
}


class PayloadError(EvolveError, ValueError):
    """A journal payload that does not fit its type's model; the message names the entry and each field."""


def payload_model(type: EntryType, payload: dict) -> type[BaseModel]:
    """The model ``payload`` of an entry of ``type`` is checked against."""
    if type in FORMS:
        key, first, other = FORMS[type]
        return first if key in payload else other
    return PAYLOADS[type]


def validate_payload(type: str, payload: Any, where: str = "journal entry") -> AnyPayload:
    """``payload`` as its ``type``'s model; :class:`PayloadError` naming ``where`` and each bad field."""
    try:
        kind = EntryType(type)
    except ValueError:
        raise PayloadError(f"{where}: unknown entry type {type!r}") from None
    if not isinstance(payload, dict):
        raise PayloadError(f"{where} ({kind}): payload must be an object, got {payload.__class__.__name__}")
    try:
        return payload_model(kind, payload).model_validate(payload)
    except ValidationError as exc:
        fields = "; ".join(f"field {'.'.join(map(str, e['loc'])) or '(payload)'!r}: {e['msg']}"
                           for e in exc.errors())
        raise PayloadError(f"{where} ({kind}) payload: {fields}") from None


@dataclass(frozen=True)
class JournalEntry:
    """One journal entry as read, its payload checked against its type's model."""

    index: int
    type: EntryType
    ts: str
    round: int | None
    seq: int | None
    payload: AnyPayload
    payload_hash: str
    prev_hash: str
    hash: str
    mac: str | None = None


def read_entry(raw: dict) -> JournalEntry:
    """The stored entry ``raw`` as a :class:`JournalEntry` (:class:`PayloadError` if its payload does not fit)."""
    where = f"journal entry {raw.get('index')}"
    payload = validate_payload(raw.get("type"), raw.get("payload"), where)
    return JournalEntry(index=raw["index"], type=EntryType(raw["type"]), ts=raw["ts"], round=raw.get("round"),
                        seq=raw.get("seq"), payload=payload, payload_hash=raw["payload_hash"],
                        prev_hash=raw["prev_hash"], hash=raw["hash"], mac=raw.get("mac"))
