"""A memory system this project did not write, driven through an adapter: the seam that lets the loop evolve its knobs.

An adapter is named ``"package.module:Factory"``. ``Factory(knobs, conversation)`` receives the strategy's knobs
(lineage fields removed, already valid against the knob schema) and a :class:`~evolve.benchmarks.types.Conversation`,
ingests it into the external system and returns a session with

- ``recall(question: str, knobs: dict, asked_at: datetime | None) -> list``: the items it would hand an answerer
  under ``knobs`` (the strategy being evaluated: a session is reused by every strategy whose ``x-ingestion`` knobs
  equal the ones it was ingested with, so it must read query-time knobs from here), best first,
  each a mapping (or object) with ``text`` and ``source_ids`` (the conversation's turn ids it came from), optionally
  ``id`` and ``score``;
- optionally ``stored() -> list`` of the same shape: everything the system kept (lets diagnosis tell a fact never
  stored from one stored but not recalled);
- optionally ``close()``, called when the session leaves the cache.

Every call is bounded in time (:attr:`ExternalSystem.timeout_s`); a call that raises, hangs or returns malformed
items is an :class:`AdapterError` naming the adapter and the conversation or question.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

import jsonschema
from pydantic import BaseModel, ConfigDict, ValidationError

from evolve.benchmarks.types import Conversation
from evolve.canonical import canonical_json
from evolve.errors import UserError, first_problem
from evolve.files import MAX_TEXT_BYTES, read_bounded
from evolve.runtime.roles import AnswerResult, ContextItem
from evolve.runtime.retrieval import Hit
from evolve.runtime.runtime import RuntimeResult
from evolve.runtime.ikb import ImageKB
from evolve.runtime.store import MemoryItem
from evolve.runtime.text import count_words
from evolve.strategy.artifact import LINEAGE, StrategyError
from evolve.strategy.schema import evolvable_dimensions

#: The layer name of an external system's items in traces.
LAYER = "EXT"
#: Sessions (one per conversation and ingestion setting) kept for reuse by later evaluations.
MAX_SESSIONS = 16


class AdapterError(UserError):
    """An external memory system's adapter failed: raised, hung, or returned something that is not recall items."""


class Recalled(BaseModel):
    """One item an external system recalled or stored."""

    model_config = ConfigDict(extra="ignore", from_attributes=True)

    text: str
    source_ids: list[str]
    id: str | None = None
    score: float | None = None


def load_knob_schema(path: Path) -> dict:
    """Read an external system's knob schema: valid JSON Schema, at least one ``x-evolvable`` path with its range
    and steps, and a ``parent`` property (derived strategies record their parent's hash there)."""
    try:
        schema = json.loads(read_bounded(path, MAX_TEXT_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StrategyError(str(path), "", f"cannot read the knob schema: {exc}") from None
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = ".".join(str(p) for p in exc.absolute_path)
        raise StrategyError(str(path), where, f"not a valid JSON Schema: {exc.message}") from None
    if "parent" not in schema.get("properties", {}):
        raise StrategyError(str(path), "properties", "declare a 'parent' string property: a derived strategy "
                                                     "records its parent's hash there")
    try:
        dims = evolvable_dimensions(schema)
    except (KeyError, TypeError) as exc:
        raise StrategyError(str(path), "", f"an x-evolvable number needs minimum, maximum and x-evolvable "
                                           f"group, step and max_step (missing {exc})") from None
    if not dims:
        raise StrategyError(str(path), "", "no x-evolvable path: the loop would have nothing to change; mark at "
                                           "least one knob with x-evolvable {group, step, max_step}")
    return schema


def ingestion_paths(schema: dict) -> tuple[str, ...]:
    """The knob paths marked ``x-ingestion: true``: changing one means ingesting the conversation again."""
    found: list[str] = []

    def walk(node: dict, path: str) -> None:
        if node.get("x-ingestion") is True:
            found.append(path)
            return
        for key, child in node.get("properties", {}).items():
            walk(child, f"{path}.{key}" if path else key)

    walk(schema, "")
    return tuple(found)


def _bounded(call: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """``call()`` in a daemon thread, waited on for at most ``timeout_s`` (a hung call is left behind, not killed)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller as an AdapterError
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True, name="adapter-call")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise AdapterError(f"{what}: no answer within {timeout_s:g} s (runtime.call_timeout_s)")
    if "error" in box:
        exc = box["error"]
        raise AdapterError(f"{what}: raised {type(exc).__name__}: {exc}") from exc
    return box.get("value")


def _items(raw: Any, what: str) -> list[Recalled]:
    if not isinstance(raw, (list, tuple)):
        raise AdapterError(f"{what}: expected a list of items with text and source_ids, got {type(raw).__name__}")
    out = []
    for i, item in enumerate(raw):
        try:
            out.append(Recalled.model_validate(item))
        except ValidationError as exc:
            raise AdapterError("{}: item {}: {}: {}".format(what, i, *first_problem(exc, "item"))) from None
    return out


@dataclass
class ExternalStore:
    """What an external system kept of one conversation, in the shape the trace measures read."""

    conversation_id: str
    session: Any
    items: tuple[MemoryItem, ...]
    turns: dict
    position: dict[str, int] = field(init=False)
    #: An external system keeps no image knowledge base of ours.
    ikb: ImageKB = field(default_factory=ImageKB)
    #: Nor device events of ours: its chains of events are its own, so no event loss is named for it.
    events: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.position = {item.id: i for i, item in enumerate(self.items)}

    def item(self, item_id: str) -> MemoryItem:
        return self.items[self.position[item_id]]

    def items_from_sources(self, turn_ids: Sequence[str]) -> list[str]:
        """Ids of the stored items derived from any of ``turn_ids``."""
        wanted = set(turn_ids)
        return [item.id for item in self.items if wanted & set(item.source_ids)]


class ExternalSystem:
    """An adapter, its knob schema and its ingested sessions (shared by every evaluation of a run; picklable)."""

    def __init__(self, adapter: str, schema: dict, timeout_s: float = 60.0):
        module, _, attr = adapter.partition(":")
        if not module or not attr:
            raise AdapterError(f"adapter {adapter!r}: expected 'package.module:Factory'")
        self.adapter, self.schema, self.timeout_s = adapter, schema, timeout_s
        self.ingestion = ingestion_paths(schema)
        self._sessions: OrderedDict[str, ExternalStore] = OrderedDict()
        self.factory()  # an adapter that cannot be imported fails before any work

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_sessions": OrderedDict()}

    def factory(self) -> Callable[[dict, Conversation], Any]:
        """The adapter's factory, imported."""
        module, _, attr = self.adapter.partition(":")
        try:
            found: Any = importlib.import_module(module)
            for part in attr.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError) as exc:
            raise AdapterError(f"adapter {self.adapter!r}: cannot import: {exc}") from None
        if not callable(found):
            raise AdapterError(f"adapter {self.adapter!r}: {attr} is not callable")
        return found

    def knobs(self, strategy: dict) -> dict:
        """The strategy's knobs (lineage removed), checked against the knob schema."""
        errors = sorted(jsonschema.Draft202012Validator(self.schema).iter_errors(strategy), key=lambda e: e.path)
        if errors:
            err = errors[0]
            raise StrategyError("knob strategy", ".".join(map(str, err.absolute_path)), err.message)
        return {k: v for k, v in strategy.items() if k not in LINEAGE}

    def runtime(self, strategy: dict) -> "ExternalRuntime":
        return ExternalRuntime(self, self.knobs(strategy))

    def store(self, knobs: dict, conversation: Conversation) -> ExternalStore:
        """The conversation ingested under ``knobs``: reused when its ingestion knobs were ingested before."""
        view = {p: _get(knobs, p) for p in self.ingestion} if self.ingestion else knobs
        key = hashlib.sha256(canonical_json([conversation.content_hash(), view]).encode()).hexdigest()
        if key in self._sessions:
            self._sessions.move_to_end(key)
            return self._sessions[key]
        what = f"adapter {self.adapter}: conversation {conversation.id}"
        session = _bounded(lambda: self.factory()(knobs, conversation), self.timeout_s, f"{what}: ingest")
        if not callable(getattr(session, "recall", None)):
            raise AdapterError(f"{what}: the factory returned {type(session).__name__}, which has no recall()")
        stored = (_items(_bounded(session.stored, self.timeout_s, f"{what}: stored()"), f"{what}: stored()")
                  if callable(getattr(session, "stored", None)) else [])
        turns = {t.id: t for t in conversation.turns()}
        items = tuple(MemoryItem(r.id or f"stored-{i}", LAYER, r.text, tuple(r.source_ids), None,
                                 turns[r.source_ids[0]].timestamp if r.source_ids and r.source_ids[0] in turns
                                 else None, "external", 1.0) for i, r in enumerate(stored))
        store = ExternalStore(conversation.id, session, items, turns)
        self._sessions[key] = store
        while len(self._sessions) > MAX_SESSIONS:
            _, old = self._sessions.popitem(last=False)
            if callable(getattr(old.session, "close", None)):
                old.session.close()
        return store


def _get(data: dict, path: str) -> Any:
    for part in path.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


class ExternalRuntime:
    """The :class:`~evolve.runtime.runtime.MemoryRuntime` interface the evaluator calls, over an external system."""

    def __init__(self, system: ExternalSystem, knobs: dict):
        self.system, self.knobs = system, knobs

    def ingest(self, conversation: Conversation) -> ExternalStore:
        return self.system.store(self.knobs, conversation)

    def prefetch(self, questions: Sequence[str]) -> None:
        """Nothing to prepare: the external system embeds its own queries."""

    def ask(self, store: ExternalStore, question: str, asked_at: datetime | None = None, *,
            answer: bool = True) -> RuntimeResult:
        """The items the system recalls for ``question``, as retrieved and packed context. The system gives no
        answer: the answer objective scores the packed context alone (``answer`` is accepted for the interface)."""
        what = f"adapter {self.system.adapter}: conversation {store.conversation_id}: question {question[:80]!r}"
        items = _items(_bounded(lambda: store.session.recall(question, self.knobs, asked_at), self.system.timeout_s,
                                f"{what}: recall"), f"{what}: recall")
        ids = [r.id or f"recalled-{rank}" for rank, r in enumerate(items, 1)]
        hits = [Hit(i, rank, float(r.score or 0.0), tuple(r.source_ids))
                for rank, (i, r) in enumerate(zip(ids, items), 1)]
        packed = [ContextItem(i, r.text, LAYER, tuple(r.source_ids), score=float(r.score or 0.0))
                  for i, r in zip(ids, items)]
        tokens = sum(count_words(c.text) for c in packed)
        return RuntimeResult("external", [], hits, [], packed, [], tokens, 0, AnswerResult(""))
