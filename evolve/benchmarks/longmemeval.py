"""LongMemEval adapter: every published item (question + its own haystack) becomes one Conversation; its
``question_type`` is the question's category (:data:`LONGMEMEVAL_CATEGORIES`) and an ``_abs`` question id marks an
abstention question (:attr:`Question.abstention`: the haystack does not hold the answer, declining is correct)."""
from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from evolve.safe_text import quoted
from evolve.benchmarks.locomo import answer_field, read_json_list, require_field
from evolve.benchmarks.types import (LONGMEMEVAL_CATEGORIES, Benchmark, BenchmarkError, Conversation, Question,
                                     Session, Turn)

_CATEGORY_BY_TYPE = {c.replace("_", "-"): c for c in LONGMEMEVAL_CATEGORIES}
_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\(\w+\))?(?:\s+(\d{1,2}):(\d{2}))?")


def parse_longmemeval_date(text: str) -> datetime:
    """Parse LongMemEval's stamp, e.g. ``"2023/05/20 (Sat) 02:21"`` (weekday and time optional)."""
    match = _DATE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"unparseable date {quoted(text)}")
    year, month, day, hour, minute = match.groups()
    return datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0))


def _date(text: Any, label: str, where: str) -> datetime:
    if not isinstance(text, str):
        raise BenchmarkError(f"{where}: field '{label}' has type {type(text).__name__}; expected a date string "
                             "like \"2023/05/20 (Sat) 02:21\"")
    try:
        return parse_longmemeval_date(text)
    except ValueError:
        raise BenchmarkError(f"{where}: field '{label}' is an unparseable date {quoted(text)}") from None


def _haystack(item: dict, where: str) -> tuple[list[Session], list[list[str]]]:
    """Sessions in haystack order and, per session, the ids of its ``has_answer`` turns."""
    raw_sessions = require_field(item, "haystack_sessions", list, where)
    session_ids = require_field(item, "haystack_session_ids", list, where)
    dates = require_field(item, "haystack_dates", list, where)
    if not len(raw_sessions) == len(session_ids) == len(dates):
        raise BenchmarkError(
            f"{where}: haystack_sessions ({len(raw_sessions)}), haystack_session_ids ({len(session_ids)}) "
            f"and haystack_dates ({len(dates)}) differ in length"
        )
    sessions, flagged = [], []
    for s_index, raw in enumerate(raw_sessions):
        s_where = f"{where}.haystack_sessions[{s_index}]"
        if not isinstance(raw, list):
            raise BenchmarkError(f"{s_where}: session is not a list of turns")
        stamp = _date(dates[s_index], f"haystack_dates[{s_index}]", where)
        session_id = f"S{s_index + 1}"
        turns, hits = [], []
        for t_index, turn in enumerate(raw):
            t_where = f"{s_where}[{t_index}]"
            if not isinstance(turn, dict):
                raise BenchmarkError(f"{t_where}: turn is not an object")
            turn_id = f"{session_id}:{t_index + 1}"
            role = require_field(turn, "role", str, t_where)
            turns.append(Turn(turn_id, role, require_field(turn, "content", str, t_where), session_id, stamp))
            flag = turn.get("has_answer", False)
            if not isinstance(flag, bool):
                raise BenchmarkError(f"{t_where}: field 'has_answer' is {flag!r}; it must be true or false")
            if flag:
                hits.append(turn_id)
        sessions.append(Session(session_id, stamp, tuple(turns)))
        flagged.append(hits)
    return sessions, flagged


def _item(item: Any, index: int, path: Path, fallback: list[str], missing: list[str]) -> tuple[Conversation, Question]:
    where = f"{path}: item {index}"
    if not isinstance(item, dict):
        raise BenchmarkError(f"{where}: item is not an object")
    qid = require_field(item, "question_id", str, where)
    where = f"{where} ({qid})"
    qtype = require_field(item, "question_type", str, where)
    if qtype not in _CATEGORY_BY_TYPE:
        raise BenchmarkError(f"{where}: unknown question_type {qtype!r}")
    category = _CATEGORY_BY_TYPE[qtype]
    sessions, flagged = _haystack(item, where)
    evidence = [turn_id for hits in flagged for turn_id in hits]
    if not evidence:
        answer_sessions = require_field(item, "answer_session_ids", list, where)
        for session, haystack_id in zip(sessions, item["haystack_session_ids"]):
            if haystack_id in answer_sessions:
                evidence += [t.id for t in session.turns]
        (fallback if evidence else missing).append(qid)
    by_date = sorted(sessions, key=lambda s: s.timestamp)
    conversation = Conversation(qid, ("user", "assistant"), tuple(by_date))
    question = Question(
        qid, qid, require_field(item, "question", str, where),
        answer_field(item, where),
        category, tuple(evidence), _date(require_field(item, "question_date", str, where), "question_date", where),
        abstention=qid.endswith("_abs"),
    )
    return conversation, question


def load_longmemeval(path: str | Path) -> Benchmark:
    """Load a LongMemEval file (``_s``, ``_m`` or ``_oracle``). Turn ids are ``"S{session}:{turn}"``, 1-based
    haystack positions; sessions are ordered by date for ingestion."""
    path = Path(path)
    data = read_json_list(path, "items")
    conversations: dict[str, Conversation] = {}
    questions: list[Question] = []
    fallback: list[str] = []
    missing: list[str] = []
    for index, item in enumerate(data):
        conversation, question = _item(item, index, path, fallback, missing)
        if question.id in conversations:
            raise BenchmarkError(f"{path}: item {index}: duplicate question_id {question.id!r}")
        conversations[question.id] = conversation
        questions.append(question)
    warnings = []
    if fallback:
        warnings.append(f"{path.name}: {len(fallback)} question(s) without has_answer turns, gold evidence falls "
                        f"back to all turns of their answer sessions: {'; '.join(fallback)}")
    if missing:
        warnings.append(f"{path.name}: {len(missing)} question(s) without known gold evidence: {'; '.join(missing)}")
    return Benchmark(f"longmemeval:{path.name}", conversations, questions, warnings)
