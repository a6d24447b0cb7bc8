"""Captured conversations as a LoCoMo-format benchmark file (what :func:`evolve.benchmarks.locomo.load_locomo`
reads), for the next nightly run.

One sample per user: the captured turns in capture order, sessions numbered in order of first capture
(``session_N``, dated by their first turn's time), the caller's turn ids as ``dia_id``, a turn's photo as
``blip_caption`` and ``img_url``. Questions the operator
answered (``answers.yaml``, :mod:`evolve.serve.answers`) become ``qa`` items; questions the recall log holds without
an answer are listed under ``unanswered`` (ignored by the loader, which scores only answered questions) for an
operator to label.
"""
from __future__ import annotations

from datetime import datetime

from evolve.benchmarks.locomo import CATEGORY_BY_CODE, format_locomo_date
from evolve.benchmarks.turns import fold_caption
from evolve.errors import EvolveError
from evolve.serve.answers import Answer
from evolve.serve.backend import Backend
from evolve.serve.records import TurnRecord, turns_in

CODE_BY_NAME = {name: code for code, name in CATEGORY_BY_CODE.items()}


class ExportError(EvolveError):
    """A user that cannot be exported; the message says which and why."""


def export_user(backend: Backend, user: str, answers: list[Answer]) -> dict:
    """The LoCoMo sample of ``user``'s captured memory."""
    events = backend.events(user) if user in backend.users() else []
    turns = turns_in(events)
    if not turns:
        stone = backend.tombstone(user)
        raise ExportError(f"user {user!r}: no captured turns" + (f" (erased at {stone.erased_at})" if stone else ""))
    sessions: dict[str, list[TurnRecord]] = {}
    for t in turns:
        sessions.setdefault(t.session, []).append(t)
    speakers = list(dict.fromkeys(t.speaker for t in turns))
    conversation: dict = {"speaker_a": speakers[0], "speaker_b": speakers[1] if len(speakers) > 1 else speakers[0]}
    for number, (session, members) in enumerate(sessions.items(), start=1):
        conversation[f"session_{number}"] = [_locomo_turn(t) for t in members]
        stamp = next((t.time for t in members if t.time), None)
        if stamp is not None:
            conversation[f"session_{number}_date_time"] = format_locomo_date(datetime.fromisoformat(stamp))
    known = {t.id for t in turns}
    qa = []
    for a in answers:
        if a.user != user:
            continue
        unknown = [e for e in a.evidence if e not in known]
        if unknown:
            raise ExportError(f"answers for user {user!r}, question {a.question!r}: evidence {unknown[0]!r} is not a "
                              "captured turn id")
        qa.append({"question": a.question, "answer": a.answer, "evidence": list(a.evidence),
                   "category": CODE_BY_NAME[a.category]})
    answered = {a.question for a in answers if a.user == user}
    unanswered = list(dict.fromkeys(r.question for r in backend.recalls(user) if r.question not in answered))
    return {"sample_id": user, "conversation": conversation, "qa": qa,
            "unanswered": [{"question": q} for q in unanswered]}


def _locomo_turn(turn: TurnRecord) -> dict:
    """A captured turn as LoCoMo states it: the photo it shares as ``blip_caption`` and ``img_url``, its caption
    unfolded from the text (the reader folds it back)."""
    out = {"speaker": turn.speaker, "dia_id": turn.id, "text": turn.text}
    photo = turn.photo
    if photo is not None:
        out["text"] = turn.text.removesuffix(fold_caption("", photo.caption))
        out |= {"blip_caption": photo.caption} if photo.caption else {}
        out |= {"img_url": [photo.url]} if photo.url else {}
    return out


def export_benchmark(backend: Backend, users: list[str], answers: list[Answer]) -> list[dict]:
    """The LoCoMo samples of ``users`` (every user with memory when empty)."""
    return [export_user(backend, user, answers) for user in (users or backend.users())]
