"""LoCoMo adapter: reads the published ``locomo10.json`` layout into a :class:`Benchmark`."""
from __future__ import annotations

import json
import math
import sys
import re
from pathlib import Path
from typing import Any

from evolve.benchmarks.observations import DialogueTurn, Provenance
from evolve.benchmarks.turns import TurnError, admit_session, format_locomo_date, parse_moment, session_id
from evolve.benchmarks.types import Benchmark, BenchmarkError, Conversation, Question, Session
from evolve.safe_text import quoted
from evolve.files import MAX_BENCHMARK_BYTES, read_bounded

#: LoCoMo's numeric QA categories mapped onto :data:`CATEGORIES`.
CATEGORY_BY_CODE = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}
CODE_BY_CATEGORY = {name: code for code, name in CATEGORY_BY_CODE.items()}

#: Gold answer of an adversarial question that carries only ``adversarial_answer`` (the trap, not the truth).
NOT_MENTIONED = "Not mentioned in the conversation"

_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)


def read_json(path: Path) -> Any:
    """Parse a UTF-8 JSON file; every failure becomes a :class:`BenchmarkError` naming the file and position."""
    try:
        raw = read_bounded(path, MAX_BENCHMARK_BYTES)
    except FileNotFoundError:
        raise BenchmarkError(f"{path}: file not found") from None
    except OSError as exc:
        raise BenchmarkError(f"{path}: cannot read file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise BenchmarkError(f"{path}: not valid UTF-8 at byte {exc.start} (line {line})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchmarkError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise BenchmarkError(f"{path}: JSON nested too deeply (more than {sys.getrecursionlimit()} levels); a "
                             "benchmark is a few levels deep") from None



def read_json_list(path: Path, items: str) -> list:
    """:func:`read_json` of a file that must hold a JSON list (of ``items``, named in the error)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise BenchmarkError(f"{path}: expected a JSON list of {items}, got {type(data).__name__}")
    return data

#: JSON names of the Python types a field may be required to have.
_JSON_KIND = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object"}


def require_field(record: dict, key: str, kind: type | tuple[type, ...], where: str,
                  expected: str | None = None) -> Any:
    """``record[key]`` if present and of ``kind`` (bools never count as numbers), else a :class:`BenchmarkError`
    saying what was found and what is ``expected`` (by default, the JSON name of ``kind``)."""
    if key not in record:
        raise BenchmarkError(f"{where}: missing field '{key}'")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted = expected or " or ".join(_JSON_KIND.get(k, k.__name__) for k in kinds)
        raise BenchmarkError(f"{where}: field '{key}' has type {type(value).__name__}; expected {wanted}")
    return value


def answer_field(record: dict, where: str) -> str:
    """The gold answer ``record["answer"]``: a string or a finite number (NaN or infinity would become the text
    'nan' or 'inf'), as text."""
    value = require_field(record, "answer", (str, int, float), where)
    if isinstance(value, float) and not math.isfinite(value):
        raise BenchmarkError(f"{where}: field 'answer' is {value!r}; a gold answer is a string or a finite number")
    return str(value)


class _EvidenceLog:
    """Counts evidence repairs so none happens silently; renders them as benchmark warnings."""

    def __init__(self) -> None:
        self.normalised: list[str] = []
        self.skipped: list[str] = []
        self.unknown: list[str] = []
        self.no_known: list[str] = []

    def warnings(self, source: str) -> list[str]:
        parts = [
            (self.normalised, "malformed evidence id(s) normalised"),
            (self.skipped, "unparseable evidence id(s) skipped"),
            (self.unknown, "evidence id(s) kept but absent from their conversation"),
            (self.no_known, "question(s) without known gold evidence"),
        ]
        return [f"{source}: {len(items)} {label}: {'; '.join(items)}" for items, label in parts if items]


def _evidence(raw: list, known: set[str], qid: str, where: str, log: _EvidenceLog) -> tuple[str, ...]:
    ids: list[str] = []
    for item in raw:
        if not isinstance(item, str):
            raise BenchmarkError(f"{where}: evidence item {item!r} is not a string")
        if item in known:
            found = [item]
        else:
            found = [f"D{int(s)}:{int(t)}" for s, t in _DIA_ID.findall(item)]
            if not found:
                log.skipped.append(f"{qid} {item!r}")
            elif found != [item]:
                log.normalised.append(f"{qid} {item!r} -> {', '.join(found)}")
        for turn_id in found:
            if turn_id not in known:
                log.unknown.append(f"{qid} {turn_id}")
            if turn_id not in ids:
                ids.append(turn_id)
    if not known.intersection(ids):
        log.no_known.append(qid)
    return tuple(ids)


def _image_url(turn: dict) -> str | None:
    """The first URL of a turn's ``img_url`` (LoCoMo lists them), or ``None``."""
    urls = turn.get("img_url")
    urls = [urls] if isinstance(urls, str) else urls if isinstance(urls, list) else []
    return next((u for u in urls if isinstance(u, str) and u.strip()), None)


def _conversation(sample_id: str, data: dict, where: str, warnings: list[str], source: str) -> Conversation:
    speakers = tuple(require_field(data, key, str, f"{where}.conversation") for key in ("speaker_a", "speaker_b"))
    numbers = []
    for key in data:
        if (m := _SESSION_KEY.fullmatch(key)) is not None:
            if key != f"session_{int(m.group(1))}":
                raise BenchmarkError(f"{where}.conversation.{key}: session keys are numbered without leading zeros "
                                     f"(session_{int(m.group(1))})")
            numbers.append(int(m.group(1)))
    sessions, seen, last = [], set(), None
    for number in sorted(numbers):
        key = f"session_{number}"
        turns_raw = require_field(data, key, list, f"{where}.conversation")
        stamp_key = f"{key}_date_time"
        stamp = text = None
        if stamp_key in data:
            text = require_field(data, stamp_key, str, f"{where}.conversation")
            try:
                stamp = parse_moment(text)
            except ValueError:
                raise BenchmarkError(f"{where}.conversation.{stamp_key}: unparseable date {quoted(text)}") from None
        else:
            warnings.append(f"{where}: {key} has no date ({stamp_key} missing)")
        if stamp is not None and last is not None and stamp < last[1]:
            raise BenchmarkError(f"{where}.conversation.{stamp_key}: {format_locomo_date(stamp)} is earlier than "
                                 f"{last[0]}_date_time ({format_locomo_date(last[1])}); sessions are numbered in "
                                 "time order")
        last = (key, stamp) if stamp is not None else last
        payloads = []
        for index, turn in enumerate(turns_raw):
            turn_where = f"{where}.conversation.{key}[{index}]"
            if not isinstance(turn, dict):
                raise BenchmarkError(f"{turn_where}: turn is not an object")
            turn_id = require_field(turn, "dia_id", str, turn_where)
            if turn_id in seen:
                raise BenchmarkError(f"{turn_where}: duplicate dia_id {turn_id!r}")
            seen.add(turn_id)
            caption = turn.get("blip_caption")
            payloads.append(DialogueTurn(
                id=turn_id, speaker=require_field(turn, "speaker", str, turn_where),
                text=require_field(turn, "text", str, turn_where), session=key, time=text,
                image_caption=caption if isinstance(caption, str) else None, image_url=_image_url(turn),
                provenance=Provenance(source=source, record=turn_id)))
        try:  # the turns as a client sends them to the service: one meaning offline and served
            admitted = admit_session(payloads, stamp, f"{where}.conversation.{key}")
        except TurnError as exc:
            raise BenchmarkError(str(exc)) from None
        sessions.append(Session(session_id(key), stamp, admitted.turns, admitted.images))
    return Conversation(sample_id, speakers, tuple(sessions))


def _question(record: Any, qid: str, conversation: Conversation, where: str, log: _EvidenceLog) -> Question:
    if not isinstance(record, dict):
        raise BenchmarkError(f"{where}: qa item is not an object")
    text = require_field(record, "question", str, where)
    codes = ", ".join(f"{c} {name}" for c, name in CATEGORY_BY_CODE.items())
    code = require_field(record, "category", int, where, f"an integer 1-5 ({codes})")
    if code not in CATEGORY_BY_CODE:
        raise BenchmarkError(f"{where}: field 'category' is {code}, expected 1..5 ({codes})")
    if "answer" in record:
        answer = answer_field(record, where)
    elif code == CODE_BY_CATEGORY["adversarial"]:
        answer = NOT_MENTIONED
    else:
        raise BenchmarkError(f"{where}: missing field 'answer'")
    known = {t.id for t in conversation.turns()}
    evidence = _evidence(require_field(record, "evidence", list, where), known, qid, where, log)
    outdated = record.get("outdated_evidence", [])  # this project's extension: turns the answer made outdated
    if not isinstance(outdated, list) or not all(isinstance(t, str) and t in known for t in outdated):
        raise BenchmarkError(f"{where}: field 'outdated_evidence' must list turn ids of the conversation")
    return Question(qid, conversation.id, text, answer, CATEGORY_BY_CODE[code], evidence, outdated=tuple(outdated))


def load_locomo(path: str | Path) -> Benchmark:
    """Load a ``locomo10.json``-layout file. Question ids are ``"{sample_id}/q{index}"`` (0-based); a sample without
    ``qa`` has no labelled question (its conversation is still read)."""
    path = Path(path)
    data = read_json_list(path, "samples")
    conversations: dict[str, Conversation] = {}
    questions: list[Question] = []
    warnings: list[str] = []
    log = _EvidenceLog()
    first_index: dict[str, int] = {}
    for index, sample in enumerate(data):
        where = f"{path}: sample {index}"
        if not isinstance(sample, dict):
            raise BenchmarkError(f"{where}: sample is not an object")
        sample_id = str(require_field(sample, "sample_id", (str, int), where))
        where = f"{where} ({sample_id})"
        if sample_id in first_index:
            raise BenchmarkError(
                f"{where}: duplicate sample_id (also sample {first_index[sample_id]}), its question ids would repeat"
            )
        first_index[sample_id] = index
        conversation = _conversation(sample_id, require_field(sample, "conversation", dict, where), where, warnings,
                                     f"locomo:{path.name}")
        labelled = require_field(sample, "qa", list, where) if "qa" in sample else []  # unlabelled: no questions
        for q_index, record in enumerate(labelled):
            qid = f"{sample_id}/q{q_index}"
            questions.append(_question(record, qid, conversation, f"{where}.qa[{q_index}]", log))
        conversations[sample_id] = conversation
    return Benchmark(f"locomo:{path.name}", conversations, questions, warnings + log.warnings(path.name))
