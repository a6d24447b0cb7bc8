"""Reviewers' root-cause labels of discordant questions (one side of a paired comparison right, the other wrong):
the record, and label files in CSV or JSONL.

A label names the failing side's root cause on the evidence-loss ladder (:mod:`evolve.observe.ladder`). It is
pre-filled with the ladder's own diagnosis (``ladder``) and ``confirmed`` once a reviewer has looked; ``label``
then either agrees with ``ladder`` or corrects it. Both formats hold the same columns, :data:`COLUMNS`.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from evolve.errors import UserError, first_problem
from evolve.files import MAX_TEXT_BYTES, atomic_write_text, read_bounded
from evolve.observe.ladder import RootCause

#: The label file formats, by file name suffix.
FORMATS = (".csv", ".jsonl")


class LabelError(UserError, ValueError):
    """A label file cannot be read: the message names the file, the line and the field."""


class Label(BaseModel):
    """One discordant question's root-cause label."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The candidate (or gate verdict) whose comparison the question is discordant in.
    candidate_id: str
    question_id: str
    category: str
    #: ``improved``: the parent fails and the candidate succeeds; ``regressed``: the other way round.
    direction: Literal["improved", "regressed"]
    #: The side that fails (``parent`` for an improved question, ``candidate`` for a regressed one).
    failing: Literal["parent", "candidate"]
    #: The ladder's root cause of the failing side's failure (what the label was pre-filled with).
    ladder: RootCause
    #: The reviewer's root cause.
    label: RootCause
    #: Whether a reviewer confirmed ``label`` (only confirmed labels are imported).
    confirmed: bool = False
    reviewer: str = ""
    note: str = ""

    @property
    def corrected(self) -> bool:
        """Whether the reviewer's root cause differs from the ladder's."""
        return self.label != self.ladder


#: The columns of a label file, in order.
COLUMNS: tuple[str, ...] = tuple(Label.model_fields)


def _format(path: Path) -> str:
    if path.suffix.lower() not in FORMATS:
        raise LabelError(f"{path}: a label file is {' or '.join(FORMATS)} (by its name's suffix), not "
                         f"{path.suffix or 'a name without suffix'!r}")
    return path.suffix.lower()


def _rows(path: Path, text: str) -> list[tuple[int, dict]]:
    """``(line, row)`` of each label row of a file's text."""
    if _format(path) == ".jsonl":
        rows = []
        for line_no, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LabelError(f"{path}:{line_no}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise LabelError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
            rows.append((line_no, row))
        return rows
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise LabelError(f"{path}:1: header lacks column {missing[0]!r} (expected {', '.join(COLUMNS)})")
    rows = []
    for row in reader:
        if None in row:
            raise LabelError(f"{path}:{reader.line_num}: more cells than the header's {len(reader.fieldnames)}")
        rows.append((reader.line_num, {k: v for k, v in row.items() if v != "" or k in ("reviewer", "note")}))
    return rows


def read_labels(path: str | Path) -> list[Label]:
    """Every label of a CSV or JSONL label file, in file order; :class:`LabelError` naming the file, the line and
    the field of a bad row, or a question labelled twice."""
    path = Path(path)
    _format(path)
    try:
        text = read_bounded(path, MAX_TEXT_BYTES).decode("utf-8-sig")
    except FileNotFoundError:
        raise LabelError(f"{path}: no such label file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LabelError(f"{path}: cannot read: {exc}") from None
    labels, seen = [], {}
    for line_no, row in _rows(path, text):
        try:
            label = Label.model_validate(row)
        except ValidationError as exc:
            field, problem = first_problem(exc, "row")
            raise LabelError(f"{path}:{line_no}: field {field!r}: {problem}") from None
        key = (label.candidate_id, label.question_id)
        if key in seen:
            raise LabelError(f"{path}:{line_no}: question {label.question_id} of {label.candidate_id} labelled again "
                             f"(first on line {seen[key]})")
        seen[key] = line_no
        labels.append(label)
    return labels


def labels_text(labels: list[Label], suffix: str) -> str:
    """``labels`` as the text of a ``.csv`` or ``.jsonl`` label file."""
    rows = [label.model_dump(mode="json") for label in labels]
    if suffix == ".jsonl":
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({**row, "confirmed": str(row["confirmed"]).lower()} for row in rows)
    return out.getvalue()


def write_labels(path: str | Path, labels: list[Label]) -> None:
    """Write ``labels`` to a ``.csv`` or ``.jsonl`` file (by its suffix), atomically."""
    path = Path(path)
    atomic_write_text(path, labels_text(labels, _format(path)))


#: The journal entry type an import of confirmed labels is recorded under.
LABELS_ENTRY = "LABELS"


class LabelsImport(BaseModel):
    """The payload of a ``LABELS`` journal entry: the confirmed labels imported from one file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate_id: str
    #: The file they were read from.
    source: str
    labels: list[Label]
