"""The one strict YAML loader for strategies, run configs and the bundle table.

On top of ``yaml.SafeLoader`` it refuses duplicate mapping keys (naming both lines), nesting deeper than
:data:`MAX_DEPTH`, and documents whose alias expansion would exceed :data:`MAX_NODES` nodes (alias bombs),
all before any Python object is built, so a hostile file fails fast instead of exhausting memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from evolve.errors import EvolveError

#: Deepest nesting of collections accepted (strategies and configs need fewer than 10 levels).
MAX_DEPTH = 64
#: Most nodes a document may expand to, aliases counted every time they are used.
MAX_NODES = 100_000
#: Longest value shown in an error message.
MAX_SHOWN = 80


class YAMLInputError(EvolveError, ValueError):
    """A YAML document is malformed or refused; ``line`` is 1-based (``None`` if unknown), ``path`` dotted."""

    def __init__(self, problem: str, line: int | None = None, path: str = ""):
        self.problem, self.line, self.path = problem, line, path
        super().__init__(problem)


def clip(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how long it was."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


class _Loader(yaml.SafeLoader):
    """A safe loader that stops composing past :data:`MAX_DEPTH` levels (before Python's recursion limit)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YAMLInputError(f"nested more than {MAX_DEPTH} levels deep", mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


@dataclass
class _Walk:
    """Expanded node count and the line of every mapping key by dotted path."""

    lines: dict[str, int]
    sizes: dict[int, int]


def _check(node: yaml.Node, path: str, walk: _Walk) -> int:
    """Expanded size of ``node``; refuses duplicate keys and oversized expansion on the way."""
    known = walk.sizes.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else clip(key.value)
            sub = f"{path}.{name}" if path else name
            line = key.start_mark.line + 1
            if name in first:
                raise YAMLInputError(f"duplicate key {clip(name)!s} (first at line {first[name]}, again at line "
                                     f"{line})", line, sub)
            first[name] = line
            walk.lines.setdefault(sub, line)
            size += _check(key, sub, walk) + _check(value, sub, walk)
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_check(item, path, walk) for item in node.value)
    if size > MAX_NODES:
        raise YAMLInputError(f"document expands to more than {MAX_NODES} nodes (alias expansion bomb?)",
                             node.start_mark.line + 1, path)
    walk.sizes[id(node)] = size
    return size


def _error(exc: yaml.YAMLError) -> YAMLInputError:
    mark = getattr(exc, "problem_mark", None)
    return YAMLInputError(f"malformed YAML: {getattr(exc, 'problem', None) or exc}", mark.line + 1 if mark else None)


def compose(text: str) -> tuple[yaml.Node | None, dict[str, int]]:
    """The checked node tree of ``text`` and the line of every mapping key; :class:`YAMLInputError` if refused."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
    except yaml.YAMLError as exc:
        raise _error(exc) from None
    except RecursionError:
        raise YAMLInputError(f"nested more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()
    walk = _Walk({}, {})
    if root is not None:
        _check(root, "", walk)
    return root, walk.lines


def load(text: str) -> tuple[Any, dict[str, int]]:
    """Parse ``text`` strictly: ``(data, line of every mapping key by dotted path)``."""
    root, lines = compose(text)
    if root is None:
        return None, lines
    loader = _Loader("")
    try:
        return loader.construct_document(root), lines
    except yaml.YAMLError as exc:
        raise _error(exc) from None
    finally:
        loader.dispose()
