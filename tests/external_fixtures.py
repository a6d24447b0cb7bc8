"""Tiny external memory systems for the adapter seam (``runtime: {adapter: "external_fixtures:..."}``) and the files
that describe their knobs."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import yaml

from evolve.benchmarks.types import Conversation

WORD = re.compile(r"[a-z0-9]+")
STOP = {"what", "when", "where", "who", "did", "does", "the", "a", "an", "is", "was", "of", "to", "in", "on", "and",
        "do", "how", "which", "his", "her", "their", "for", "at", "with"}


def _words(text: str) -> set[str]:
    return set(WORD.findall(text.lower())) - STOP


class OverlapSession:
    """Stores ``window`` consecutive turns per item; recalls the ``top_k`` items sharing most words with the
    question (ties: earlier first)."""

    def __init__(self, knobs: dict, conversation: Conversation):
        turns = conversation.turns()
        size = knobs["store"]["window"]
        self.items = [{"id": f"{conversation.id}/m{i}", "text": " ".join(t.text for t in turns[i:i + size]),
                       "source_ids": [t.id for t in turns[i:i + size]]} for i in range(0, len(turns), size)]

    def recall(self, question: str, knobs: dict, asked_at=None) -> list[dict]:
        wanted = _words(question)
        ranked = sorted(self.items, key=lambda item: -len(wanted & _words(item["text"])))
        return [{**item, "score": float(len(wanted & _words(item["text"])))}
                for item in ranked[: knobs["recall"]["top_k"]]]

    def stored(self) -> list[dict]:
        return list(self.items)


class RaisingSession(OverlapSession):
    def recall(self, question: str, knobs: dict, asked_at=None) -> list[dict]:
        raise RuntimeError("index unavailable")


class HangingSession(OverlapSession):
    def recall(self, question: str, knobs: dict, asked_at=None) -> list[dict]:
        time.sleep(30)
        return []


class MalformedSession(OverlapSession):
    def recall(self, question: str, knobs: dict, asked_at=None) -> list[dict]:
        return [{"text": "no source ids"}]


SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object", "additionalProperties": False, "required": ["version", "name", "store", "recall"],
    "properties": {
        "version": {"type": "string"}, "name": {"type": "string"}, "parent": {"type": ["string", "null"]},
        "store": {"type": "object", "additionalProperties": False, "required": ["window"], "x-ingestion": True,
                  "properties": {"window": {"type": "integer", "minimum": 1, "maximum": 3,
                                            "x-evolvable": {"group": "ingestion", "step": 1, "max_step": 1}}}},
        "recall": {"type": "object", "additionalProperties": False, "required": ["top_k"],
                   "properties": {"top_k": {"type": "integer", "minimum": 1, "maximum": 8,
                                            "x-evolvable": {"group": "retrieval", "step": 1, "max_step": 2}}}},
    },
}
BASELINE = {"version": "1", "name": "overlap-baseline", "store": {"window": 1}, "recall": {"top_k": 1}}
BUNDLES = """\
retrieval_gap/*:
  - recall.top_k::increase
ingestion_gap/*:
  - store.window::increase
kf_filtered/*:
  - recall.top_k::increase
"""


def write_system(base: Path, schema: dict | None = None, adapter: str = "external_fixtures:OverlapSession",
                 **settings) -> Path:
    """A run config evolving :class:`OverlapSession` on synthetic questions, its knob files beside it."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "knobs.schema.json").write_text(json.dumps(schema or SCHEMA))
    (base / "knobs.yaml").write_text(yaml.safe_dump(BASELINE))
    (base / "bundles.yaml").write_text(BUNDLES)
    config = dict(benchmark="synthetic:0", stores=str(base / "stores"), limit=120, probe_size=20, rounds=2,
                  candidates_per_round=2, seed=0, objective="answer",
                  runtime={"adapter": adapter, "schema": "knobs.schema.json", "strategy": "knobs.yaml",
                           "bundles": "bundles.yaml", "call_timeout_s": 2.0})
    config.update(settings)
    path = base / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
