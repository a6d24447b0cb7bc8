"""The one strategy diff and the change vocabulary built on it.

:func:`diff_strategies` is the literal path-level diff (changed / added / removed dotted paths, prompt text as a
unified diff) shown to reviewers. :func:`effective_changes` reads the same diff as behaviour: free lineage fields
are left out, and an intent-override weight (``retrieval.intent_overrides.<intent>.weights.<channel>``) present on
one side only is measured from the base weight it overrides. Gates, critic, planner and effects speak of a
change as a :class:`~evolve.strategy.moves.Step` (:func:`change_steps`), stored as its text (:func:`change_keys`).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from evolve.numbers import is_real
from evolve.strategy.artifact import FREE_LINEAGE
from evolve.strategy.moves import EDIT, SET, Step, value_text
from evolve.strategy.prompts import added_instruction, label
from evolve.strategy.schema import EvolvableDimension, evolvable_dimensions
from evolve.strategy.paths import flatten, get_path, value_at

PROMPT_SECTIONS = ("extraction", "expansion", "answering")
#: Stands for a path one side of a diff lacks.
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<absent>"})()
_OVERRIDE = re.compile(r"^retrieval\.intent_overrides\.[a-z_]+\.weights\.([a-z0-9_]+)$")


@dataclass
class StrategyDiff:
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    added: dict[str, Any] = field(default_factory=dict)
    removed: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.changed or self.added or self.removed)

    def to_dict(self) -> dict:
        return {"changed": {p: [a, b] for p, (a, b) in self.changed.items()}, "added": self.added, "removed": self.removed}

    def params(self) -> dict[str, str]:
        """``{path: "old -> new"}`` for tracking systems (prompt texts summarised)."""
        out = {p: f"{_short(a)} -> {_short(b)}" for p, (a, b) in self.changed.items()}
        out.update({p: f"(added) {_short(v)}" for p, v in self.added.items()})
        out.update({p: f"(removed) {_short(v)}" for p, v in self.removed.items()})
        return out

    def render(self) -> str:
        """Human-readable diff; multi-line strings as unified diffs."""
        lines: list[str] = []
        for path, (old, new) in sorted(self.changed.items()):
            if isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new):
                lines.append(f"~ {path}:")
                lines.extend("    " + l.rstrip("\n") for l in difflib.unified_diff(
                    old.splitlines(True), new.splitlines(True), "old", "new", lineterm=""))
            else:
                lines.append(f"~ {path}: {old!r} -> {new!r}")
        lines.extend(f"+ {p}: {v!r}" for p, v in sorted(self.added.items()))
        lines.extend(f"- {p}: {v!r}" for p, v in sorted(self.removed.items()))
        return "\n".join(lines)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def diff_strategies(old: dict, new: dict) -> StrategyDiff:
    a, b = flatten(old), flatten(new)
    return StrategyDiff(
        changed={p: (a[p], b[p]) for p in sorted(a.keys() & b.keys()) if a[p] != b[p] or type(a[p]) is not type(b[p])},
        added={p: b[p] for p in sorted(b.keys() - a.keys())},
        removed={p: a[p] for p in sorted(a.keys() - b.keys())},
    )


# ---------------------------------------------------------------- behaviour and change vocabulary


def prompt_of(path: str) -> str | None:
    """``"<section>.prompt"`` when ``path`` lies inside a prompt, else ``None``."""
    for section in PROMPT_SECTIONS:
        root = f"{section}.prompt"
        if path == root or path.startswith(root + "."):
            return root
    return None


def dimension_for(path: str, dims: dict[str, EvolvableDimension] | None = None) -> EvolvableDimension | None:
    """The evolvable dimension governing ``path`` (intent-override weights map to the base weight)."""
    dims = dims if dims is not None else evolvable_dimensions()
    if path in dims:
        return dims[path]
    match = _OVERRIDE.match(path)
    return dims.get(f"retrieval.weights.{match.group(1)}") if match else None


def _effective(strategy: dict, path: str) -> Any:
    """The value a path one side lacks behaves as: the base weight for an override weight, the default of an
    optional section the side leaves out, else MISSING."""
    match = _OVERRIDE.match(path)
    try:
        return get_path(strategy, f"retrieval.weights.{match.group(1)}") if match else value_at(strategy, path)
    except KeyError:
        return MISSING


def effective_changes(parent: dict, candidate: dict) -> dict[str, tuple[Any, Any]]:
    """``{path: (old, new)}`` of every leaf change that can alter behaviour (:data:`MISSING` for an absent side)."""
    diff = diff_strategies(parent, candidate)
    pairs = dict(diff.changed)
    pairs.update({p: (_effective(parent, p), v) for p, v in diff.added.items()})
    pairs.update({p: (v, _effective(candidate, p)) for p, v in diff.removed.items()})
    return {p: (old, new) for p, (old, new) in sorted(pairs.items())
            if p.split(".")[0] not in FREE_LINEAGE and {} not in (old, new)
            and (old != new or isinstance(old, bool) != isinstance(new, bool))}


def effective_diff(parent: dict, candidate: dict) -> dict[str, list[Any]]:
    """:func:`effective_changes` as JSON, ``{path: [old, new]}`` (``None`` where a side lacks the path)."""
    return {path: [None if old is MISSING else old, None if new is MISSING else new]
            for path, (old, new) in effective_changes(parent, candidate).items()}


def step(path: str, old: Any, new: Any) -> Step:
    """increase / decrease for numbers, enable / disable for booleans, otherwise ``set:<new>`` (``set:unset`` for an
    absent new side)."""
    if isinstance(old, bool) and isinstance(new, bool):
        return Step(path, "enable" if new else "disable")
    if is_real(old) and is_real(new) and old != new:
        return Step(path, "increase" if new > old else "decrease")
    return Step(path, SET, "unset" if new is MISSING else value_text(new))


def change_steps(parent: dict, candidate: dict) -> list[Step]:
    """The steps of a diff, sorted by their text; a changed prompt is one step: ``edit:<instruction>`` when it adds
    one instruction line (the move that made it), else ``set:<id>@v<version>``."""
    steps: dict[str, Step] = {}
    for path, (old, new) in effective_changes(parent, candidate).items():
        prompt = prompt_of(path)
        s = step(path, old, new) if prompt is None else _prompt_step(parent, candidate, prompt)
        steps[str(s)] = s
    return [steps[k] for k in sorted(steps)]


def _prompt_step(parent: dict, candidate: dict, prompt: str) -> Step:
    try:
        old, new = get_path(parent, prompt), get_path(candidate, prompt)
        instruction = added_instruction(old, new)
        return Step(prompt, EDIT, instruction) if instruction else Step(prompt, SET, label(new))
    except (KeyError, TypeError):
        return Step(prompt, SET, "unset")


def change_keys(parent: dict, candidate: dict) -> list[str]:
    """:func:`change_steps` as stored: sorted ``"path::direction"`` texts."""
    return [str(s) for s in change_steps(parent, candidate)]
