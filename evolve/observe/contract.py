"""The trace contract (``schemas/trace.schema.json``): one JSON object per sample, what any memory system did for one
question stage by stage, validated with jsonschema.

A record's envelope (``trace_version``, ``id``, ``category``, ``question``, ``gold``, ``scored``, no unknown key) must
be valid, or the record is refused (:class:`ContractError` naming where). Each stage is optional and validated on its
own: an invalid stage is kept out of the record's :func:`valid_stages` and out of what :func:`to_trace` reads. Our
harness's traces are one producer (:func:`from_trace`); :func:`to_trace` reads a record back as a
:class:`~evolve.observe.trace.Trace` carrying the outcomes each objective compares.

DCR counts D²ACCI's six stages (:func:`dcr_stages`): ingestion, retrieval with every item's score, filtering, assembly,
constraints, and generation (answer and judge together, one stage). An empty list counts only where emptiness is the
stage's result: ``stored`` when the record names gold evidence, ``retrieved`` when ``stored`` holds an item,
``filtered``, ``packed`` and ``constraints`` when ``retrieved`` holds an item. Version 2 added ``constraints``;
version-1 records are read and gated as before and counted by the same rule (at most five stages: they cannot record
constraints).
"""
from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Any, Mapping

from jsonschema import Draft202012Validator

from evolve.data import TRACE_SCHEMA_PATH
from evolve.errors import UserError
from evolve.numbers import is_real
from evolve.observe.answer import answer_check, content_words_once
from evolve.observe.ladder import RESULTS, Stage, derives_from
from evolve.observe.trace import Trace

#: The contract version this code writes (it reads every one of :data:`VERSIONS`).
TRACE_VERSION = "2"
VERSIONS = ("1", "2")
#: The constraint stage: ids of the constraints applied to the sample (version 2).
CONSTRAINT = "constraint"
#: Each stage a record can hold and its key, upstream first: the ladder's, the constraints, the answer and the
#: judge's verdict (the results).
STAGE_KEYS: dict[str, str] = {Stage.INGESTION: "stored", Stage.RETRIEVAL: "retrieved", Stage.FILTERING: "filtered",
                              Stage.ASSEMBLY: "packed", CONSTRAINT: "constraints", Stage.GENERATION: "answer",
                              RESULTS: "judge"}
#: The six stages DCR counts (D²ACCI), upstream first; generation is the answer with the judge's verdict.
DCR_STAGES: tuple[str, ...] = (Stage.INGESTION, Stage.RETRIEVAL, Stage.FILTERING, Stage.ASSEMBLY, CONSTRAINT,
                               Stage.GENERATION)
#: A stage's empty list counts when the record shows the stage had something to act on: gold evidence to store (read
#: apart), or a valid, non-empty record of the stage named here (stored items to retrieve, retrieved items to filter,
#: pack or constrain).
_EMPTY_COUNTS_AFTER = {Stage.RETRIEVAL: Stage.INGESTION, Stage.FILTERING: Stage.RETRIEVAL,
                       Stage.ASSEMBLY: Stage.RETRIEVAL, CONSTRAINT: Stage.RETRIEVAL}

#: How our runtime's filtering reasons map onto the contract's decisions.
_DECISION = {"filtered": "hidden", "dropped": "dropped"}


class ContractError(UserError, ValueError):
    """A record the contract refuses; the message names the file, line and field."""


@lru_cache(maxsize=1)
def schema() -> dict:
    """The packaged trace contract."""
    return json.loads(TRACE_SCHEMA_PATH.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _validators() -> tuple[Draft202012Validator, dict[str, Draft202012Validator]]:
    """The envelope's validator (every stage accepted as is) and one validator per stage key."""
    full = schema()
    envelope = copy.deepcopy(full)
    for key in STAGE_KEYS.values():
        envelope["properties"][key] = {}
    stages = {key: Draft202012Validator({**full["properties"][key], "$defs": full["$defs"]})
              for key in STAGE_KEYS.values()}
    return Draft202012Validator(envelope), stages


def _path(error: Any) -> str:
    return ".".join(map(str, error.absolute_path)) or "(record)"


def check(record: Any, where: str) -> dict:
    """``record`` if its envelope is valid; else :class:`ContractError` naming ``where`` and the field."""
    if not isinstance(record, dict):
        raise ContractError(f"{where}: expected a JSON object, got {type(record).__name__}")
    envelope, _ = _validators()
    error = next(iter(sorted(envelope.iter_errors(record), key=lambda e: list(e.absolute_path))), None)
    if error is not None:
        raise ContractError(f"{where}: {_path(error)}: {error.message}")
    return record


def valid_stages(record: Mapping[str, Any]) -> list[str]:
    """The stages ``record`` holds as schema-valid records, upstream first."""
    _, stages = _validators()
    return [stage for stage, key in STAGE_KEYS.items()
            if key in record and record[key] is not None and stages[key].is_valid(record[key])]


def _empty_is_result(record: Mapping[str, Any], stage: str, valid: set[str]) -> bool:
    if stage == Stage.INGESTION:
        return bool((record.get("gold") or {}).get("evidence"))
    upstream = _EMPTY_COUNTS_AFTER[stage]
    return upstream in valid and bool(record[STAGE_KEYS[upstream]])


def dcr_stages(record: Mapping[str, Any]) -> list[str]:
    """The stages of :data:`DCR_STAGES` that ``record`` counts towards DCR, upstream first: each schema-valid, every
    retrieved item with a score, a list empty only where emptiness is the stage's result (``_EMPTY_COUNTS_AFTER``),
    generation with both the answer and the judge's verdict."""
    valid = set(valid_stages(record))
    out = []
    for stage in DCR_STAGES:
        if stage == Stage.GENERATION:
            counts = {Stage.GENERATION, RESULTS} <= valid
        else:
            value = record.get(STAGE_KEYS[stage])
            counts = stage in valid and (bool(value) or _empty_is_result(record, stage, valid))
            if counts and stage == Stage.RETRIEVAL:
                counts = all(is_real(item.get("score")) for item in value)
        if counts:
            out.append(stage)
    return out


def _constraints(trace: Trace) -> list[str]:
    """The constraints our runtime applied to a question: its context budget and each lifecycle mask that hid an
    item."""
    budget = [f"token_budget:{trace.token_budget}"] if trace.token_budget else []
    return budget + [f"lifecycle:{reason}" for reason in sorted({str(f.get("reason")) for f in trace.filtered})]


def from_trace(trace: Trace) -> dict:
    """Our harness's trace as a contract record (the stages it recorded; filtering as the lifecycle masks' and the
    budget's decisions; the constraints with the assembly)."""
    recorded = set(trace.stages)
    out: dict[str, Any] = {"trace_version": TRACE_VERSION, "id": trace.question_id, "category": trace.category,
                           "question": trace.question, "scored": trace.scored}
    gold: dict[str, Any] = {"answer": trace.gold_answer}
    if trace.evidence_known:
        gold["evidence"] = list(trace.known_evidence or trace.gold_evidence)
    out["gold"] = gold
    stages = {
        Stage.INGESTION: lambda: list(trace.stored_ids),
        Stage.RETRIEVAL: lambda: [dict(item) for item in trace.retrieved],
        Stage.FILTERING: lambda: [{"id": item["id"], "decision": _DECISION[side], "reason": item["reason"]}
                                  for side in ("filtered", "dropped") for item in getattr(trace, side)],
        Stage.ASSEMBLY: lambda: [dict(item) for item in trace.packed],
        CONSTRAINT: lambda: _constraints(trace),
        Stage.GENERATION: lambda: trace.answer,
        RESULTS: lambda: {"correct": trace.correct, "confabulated": trace.confabulated,
                          **({"verdict": trace.verdict} if trace.verdict else {}),
                          **({"details": trace.judge} if trace.judge else {})},
    }
    recorded |= {CONSTRAINT} if Stage.ASSEMBLY in recorded else set()
    for stage, value in stages.items():
        if stage in recorded:
            out[STAGE_KEYS[stage]] = value()
    if trace.evidence_known:
        out["packed_evidence"] = list(trace.packed_evidence)
    out["context_words"] = trace.context_tokens
    return out


def _words(packed: list[dict]) -> int:
    return sum(len(str(item.get("text", "")).split()) for item in packed)


def to_trace(record: Mapping[str, Any]) -> Trace:
    """A checked record as a :class:`Trace` holding what the objectives compare: ``correct`` (the judge's), the
    evidence outcome (``packed_evidence``, else the gold turns among the packed items' source ids), the answer
    check of :mod:`evolve.observe.answer` on the packed items, the context size; and its valid stages."""
    stages = valid_stages(record)
    holds = {STAGE_KEYS[s]: record[STAGE_KEYS[s]] for s in stages}
    gold = record.get("gold") or {}
    evidence = list(gold.get("evidence") or [])
    packed = holds.get("packed")
    judge = holds.get("judge") or {}
    trace = Trace(record["id"], record["category"], question=record.get("question", ""),
                  gold_answer=gold.get("answer", ""), gold_evidence=evidence, evidence_known=bool(evidence),
                  stored_ids=list(holds.get("stored", [])), retrieved=list(holds.get("retrieved", [])),
                  filtered=[f for f in holds.get("filtered", []) if f["decision"] == "hidden"],
                  dropped=[f for f in holds.get("filtered", []) if f["decision"] == "dropped"],
                  packed=list(packed or []), answer=holds.get("answer", ""), correct=bool(judge.get("correct")),
                  verdict=judge.get("verdict"), confabulated=judge.get("confabulated"),
                  judge=judge.get("details"), scored=record.get("scored", True), stages=stages,
                  dcr_stages=dcr_stages(record))
    if packed is not None:
        if evidence:
            carried = record.get("packed_evidence")
            if carried is None:
                carried = [e for e in evidence if any(derives_from(p, {e}) for p in packed)]
            trace.packed_evidence = [e for e in evidence if e in set(carried)]
            trace.evidence_share = len(trace.packed_evidence) / len(evidence)
            trace.all_evidence_packed = len(trace.packed_evidence) == len(evidence)
        trace.answer_in_evidence, trace.answer_anywhere = answer_check(trace.gold_answer, evidence, packed,
                                                                       content_words_once)
    size = record.get("context_words")
    trace.context_tokens = size if size is not None else _words(packed or [])
    return trace
