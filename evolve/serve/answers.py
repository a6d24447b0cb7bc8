"""The operator's answers to captured questions (``answers.yaml``), for replay's answer-in-context and for
capture-export's benchmark questions::

    - user: ann
      question: Where did Ann move in May?
      answer: Lisbon
      category: single_hop     # optional: a LoCoMo category name (default single_hop)
      evidence: [D3:4]         # optional: the captured turn ids that hold the answer
"""
from __future__ import annotations

import math
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evolve.benchmarks.locomo import CATEGORY_BY_CODE
from evolve.errors import EvolveError, first_problem

CATEGORIES = tuple(CATEGORY_BY_CODE.values())


class AnswersError(EvolveError):
    """An answers file that cannot be used; the message names the file and entry."""


class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str = Field(min_length=1)
    question: str = Field(min_length=1)
    answer: str | int | float
    category: str = "single_hop"
    evidence: list[str] = Field(default_factory=list)

    @field_validator("answer", mode="before")
    @classmethod
    def _text_or_finite_number(cls, value: object) -> object:
        """YAML reads ``.nan``, ``.inf`` and ``yes`` as numbers and a boolean no benchmark can hold as an answer."""
        if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(f"must be text or a finite number, got {value!r} (quote it to keep it as text)")
        return value


def load_answers(path: str | Path) -> list[Answer]:
    """The entries of ``path``; :class:`AnswersError` naming the file, entry and field of the first bad one."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AnswersError(f"{path}: cannot read: {exc.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise AnswersError(f"{path}: not YAML: {exc}") from None
    if not isinstance(data, list):
        raise AnswersError(f"{path}: expected a list of {{user, question, answer}} entries, got "
                           f"{type(data).__name__}")
    out = []
    for i, raw in enumerate(data):
        try:
            entry = Answer.model_validate(raw)
        except ValidationError as exc:
            where, problem = first_problem(exc, "entry")
            raise AnswersError(f"{path}: entry {i}: {where}: {problem}") from None
        if entry.category not in CATEGORIES:
            raise AnswersError(f"{path}: entry {i}: category {entry.category!r} is not one of {', '.join(CATEGORIES)}")
        out.append(entry)
    return out


def answer_entries(entries: list[Answer]) -> dict[tuple[str, str], Answer]:
    """``(user, question) -> entry`` (its answer and category), as the canary guard reads them."""
    return {(e.user, e.question): e for e in entries}


def answer_map(entries: list[Answer]) -> dict[tuple[str, str], str]:
    """``(user, question) -> answer`` text."""
    return {(e.user, e.question): str(e.answer) for e in entries}


def category_map(entries: list[Answer]) -> dict[tuple[str, str], str]:
    """``(user, question) -> category`` of the entries that name one (the default is no knowledge of it)."""
    return {(e.user, e.question): e.category for e in entries if "category" in e.model_fields_set}
