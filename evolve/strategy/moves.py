"""Moves: the one vocabulary of a change to an evolvable path, and its one text form.

A :class:`Step` moves one dotted path: a relative direction (:data:`DIRECTIONS`) or ``set`` to a value. A
:class:`Move` is one step or several coupled ones (each path once). Their text form, used as keys in stores, Optuna
parameters and the bundle table, is::

    <dotted.path>::<direction>                      e.g. retrieval.top_k::increase
    <dotted.path>::set:<value>                      e.g. assembly.format::set:dialogue
    <section>.prompt::edit:<instruction>            a prompt edit (:mod:`evolve.strategy.prompts`)
    <step>&<step>...                                a coupled move

:meth:`Move.parse` and ``str(move)`` are the only reader and writer of that form. Against the schema,
:func:`set_value` is the legality of a set value and :meth:`Step.at_bound` says whether a relative move of a number
wants to go past its range.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from evolve.errors import EvolveError
from evolve.strategy.prompts import check_instruction, check_prompt
from evolve.strategy.schema import EvolvableDimension

#: Relative moves, by kind of evolvable dimension; numbers, enums and prompts also take ``set:<value>``, booleans
#: never; prompts take ``edit:<instruction>``.
MOVES: dict[str, tuple[str, ...]] = {"integer": ("increase", "decrease"), "number": ("increase", "decrease"),
                                     "boolean": ("enable", "disable"), "enum": (), "prompt": ()}
#: Every relative move.
DIRECTIONS = ("increase", "decrease", "enable", "disable")
SET, EDIT = "set", "edit"
#: Directions written with a value after a colon.
VALUED = (SET, EDIT)
_SEP = "::"
_COUPLE = "&"


def value_text(value: Any) -> str:
    """A set value as it appears in a move's text: strings as they are, anything else as canonical JSON (with ``&``
    escaped, so a prompt object's text never reads as a coupling)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True).replace(_COUPLE, "\\u0026")


@dataclass(frozen=True)
class Step:
    """One path moved one way: ``direction`` one of :data:`DIRECTIONS`, or one of :data:`VALUED` with ``value``
    (its text)."""

    path: str
    direction: str
    value: str | None = None

    def __post_init__(self) -> None:
        legal = self.direction in DIRECTIONS and self.value is None or self.direction in VALUED and self.value
        if not self.path or _SEP in self.path or _COUPLE in self.path or not legal:
            self._malformed(str(self))

    @classmethod
    def parse(cls, text: str) -> "Step":
        """``"retrieval.top_k::increase"`` -> ``Step("retrieval.top_k", "increase")``; ValueError naming ``text``."""
        path, sep, verb = text.partition(_SEP)
        direction, colon, value = verb.partition(":")
        if sep and path and colon and direction in VALUED and value:
            return cls(path, direction, value)
        if not sep or not path or verb not in DIRECTIONS:
            cls._malformed(text)
        return cls(path, verb)

    @staticmethod
    def _malformed(text: str):
        raise ValueError(f"malformed direction key {text!r}: expected '<dotted.path>::<direction>' with direction "
                         f"one of {', '.join(DIRECTIONS)}, set:<value> or edit:<instruction>")

    @classmethod
    def to(cls, path: str, value: Any) -> "Step":
        """The step that sets ``path`` to ``value``: enable / disable for booleans, ``set:<value>`` otherwise."""
        if isinstance(value, bool):
            return cls(path, "enable" if value else "disable")
        return cls(path, SET, value_text(value))

    @property
    def verb(self) -> str:
        """The direction as written after ``::``: ``increase``, ``set:<value>``, ..."""
        return f"{self.direction}:{self.value}" if self.direction in VALUED else self.direction

    @property
    def relative(self) -> bool:
        return self.direction in DIRECTIONS

    def check(self, dim: EvolvableDimension) -> None:
        """ValueError unless this step is legal for the dimension's kind (and its set value in range)."""
        if self.direction == SET:
            set_value(dim, self.value)
        elif self.direction == EDIT and dim.kind == "prompt":
            check_instruction(self.value)
        elif self.direction not in MOVES[dim.kind]:
            allowed = ", ".join(MOVES[dim.kind] + (() if dim.kind == "boolean" else ("set:<value>",))
                                + (("edit:<instruction>",) if dim.kind == "prompt" else ()))
            raise ValueError(f"{dim.path}: direction {self.direction!r} is not legal for a {dim.kind} dimension "
                             f"(allowed: {allowed})")

    def at_bound(self, dim: EvolvableDimension, current: Any) -> bool:
        """Whether this is an increase / decrease of a number already at the end of its schema range."""
        if dim.kind not in ("integer", "number") or self.direction not in ("increase", "decrease"):
            return False
        return current >= dim.high if self.direction == "increase" else current <= dim.low

    def __str__(self) -> str:
        return f"{self.path}{_SEP}{self.verb}"


@dataclass(frozen=True)
class Move:
    """One step, or several coupled steps moving distinct paths together (text joined by ``&``)."""

    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("a move needs at least one step")
        if len({s.path for s in self.steps}) != len(self.steps):
            raise ValueError(f"malformed direction key {str(self)!r}: a coupled key moves each path once")

    @classmethod
    def parse(cls, text: str) -> "Move":
        """The move written as ``text``; ValueError naming the offending text if it is malformed."""
        if not isinstance(text, str):
            raise ValueError(f"malformed direction key {text!r}: expected a string")
        return cls(tuple(Step.parse(part) for part in text.split(_COUPLE)))

    @classmethod
    def of(cls, *steps: Step) -> "Move":
        return cls(tuple(steps))

    @classmethod
    def setting(cls, changes: list[tuple[str, Any]]) -> "Move":
        """The move that sets each ``(path, value)``, in the given order (see :meth:`Step.to`)."""
        return cls(tuple(Step.to(path, value) for path, value in changes))

    def then(self, other: "Move") -> "Move":
        """This move coupled with ``other`` (its steps after these)."""
        return Move(self.steps + other.steps)

    @property
    def first(self) -> Step:
        return self.steps[0]

    @property
    def paths(self) -> set[str]:
        return {s.path for s in self.steps}

    @property
    def coupled(self) -> bool:
        return len(self.steps) > 1

    def __str__(self) -> str:
        return _COUPLE.join(str(s) for s in self.steps)


class IllegalValue(EvolveError, ValueError):
    """A set value the dimension cannot take; ``problem`` is one of kind, choices, number, integer, range."""

    def __init__(self, dim: EvolvableDimension, value: Any, problem: str, message: str):
        super().__init__(message)
        self.dim, self.value, self.problem = dim, value, problem


def set_value(dim: EvolvableDimension, value: Any) -> Any:
    """``value`` (a set value's text, or a JSON scalar) typed for ``dim``; :class:`IllegalValue` if illegal."""
    if dim.kind == "boolean":
        raise IllegalValue(dim, value, "kind", f"{dim.path}: booleans move by enable/disable, not set:")
    if dim.kind == "prompt":
        try:
            return check_prompt(value)
        except ValueError as exc:
            raise IllegalValue(dim, value, "prompt", f"{dim.path}: {exc}") from None
    if dim.kind == "enum":
        if value not in dim.choices:
            raise IllegalValue(dim, value, "choices", f"{dim.path}: {value!r} is not one of {', '.join(dim.choices)}")
        return value
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise InvalidOperation
        number = Decimal(value if isinstance(value, str) else repr(value))
        if not number.is_finite():
            raise InvalidOperation
    except (ArithmeticError, ValueError):
        raise IllegalValue(dim, value, "number", f"{dim.path}: set value {value!r} is not a number") from None
    if not dim.low <= number <= dim.high:
        raise IllegalValue(dim, value, "range", f"{dim.path}: set value {value} outside [{dim.low}, {dim.high}]")
    if dim.kind == "integer" and number != number.to_integral_value():
        raise IllegalValue(dim, value, "integer", f"{dim.path}: set value {value!r} is not an integer")
    return int(number) if dim.kind == "integer" else float(number)
