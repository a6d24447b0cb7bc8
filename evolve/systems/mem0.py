"""Mem0 OSS (``pip install mem0ai``) as an external memory system, run offline: its ``Memory`` with the packaged
MiniLM as a local huggingface embedder, an in-memory Qdrant store, ``infer=False`` (turns are stored as given, no LLM
call) and telemetry off.

Knobs (``experiments/mem0/knobs.schema.json``): how turns are handed to ``Memory.add`` (``ingest.window`` consecutive
turns of a session per memory, ``ingest.speaker`` names the speaker, ``ingest.dated`` prefixes the session date) and
the arguments of ``Memory.search`` (``search.top_k``, ``search.threshold``). One ``Memory`` serves the process; each
conversation and ingestion setting is its own ``user_id``.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from datetime import datetime
from typing import Any

from evolve.benchmarks.types import Conversation, Turn
from evolve.runtime.embedder import minilm_model_dir

#: The MiniLM's embedding width.
DIMS = 384
_MEMORY: Any = None
_LOCK = threading.Lock()


def memory() -> Any:
    """The process's Mem0 ``Memory`` (built on first use: loads the embedder, opens an in-memory Qdrant)."""
    global _MEMORY
    with _LOCK:
        if _MEMORY is None:
            os.environ["MEM0_TELEMETRY"] = "False"  # read when mem0 is imported
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import torch
            from mem0 import Memory
            from qdrant_client import QdrantClient

            torch.set_num_threads(1)  # several times faster than torch's default on a small shared machine
            history = tempfile.mkdtemp(prefix="mem0-history-")
            _MEMORY = Memory.from_config({
                "embedder": {"provider": "huggingface",
                             "config": {"model": str(minilm_model_dir()), "embedding_dims": DIMS}},
                "vector_store": {"provider": "qdrant",
                                 "config": {"collection_name": "memevolve", "embedding_model_dims": DIMS,
                                            "client": QdrantClient(":memory:")}},
                "history_db_path": os.path.join(history, "history.db"),
                # never called with infer=False; Memory builds an LLM client at start and needs a key for it
                "llm": {"provider": "openai", "config": {"api_key": "unused-offline"}},
            })
        return _MEMORY


def _line(turn: Turn, speaker: bool) -> str:
    return f"{turn.speaker}: {turn.text}" if speaker else turn.text


def chunks(conversation: Conversation, window: int, speaker: bool, dated: bool) -> list[tuple[str, list[str]]]:
    """``(text, turn ids)`` of each memory: ``window`` consecutive turns of a session, in order."""
    out = []
    for session in conversation.sessions:
        turns = list(session.turns)
        for start in range(0, len(turns), window):
            part = turns[start:start + window]
            text = "\n".join(_line(t, speaker) for t in part)
            if dated and session.timestamp is not None:
                text = f"({session.timestamp:%d %B %Y}) {text}"
            out.append((text, [t.id for t in part]))
    return out


class Mem0Session:
    """One conversation added to Mem0 under the ingestion knobs; recalls with the search knobs."""

    def __init__(self, knobs: dict, conversation: Conversation):
        ingest = knobs["ingest"]
        scope = json.dumps([conversation.content_hash(), ingest], sort_keys=True)
        self.user_id = f"{conversation.id}-{hashlib.sha256(scope.encode()).hexdigest()[:16]}"
        self.memory = memory()
        if not self._items(1):  # a setting ingested before in this process is reused as is
            for text, turn_ids in chunks(conversation, ingest["window"], ingest["speaker"], ingest["dated"]):
                self.memory.add([{"role": "user", "content": text}], user_id=self.user_id, infer=False,
                                metadata={"turn_ids": turn_ids})

    def _items(self, top_k: int) -> list[dict]:
        return self.memory.get_all(filters={"user_id": self.user_id}, top_k=top_k)["results"]

    @staticmethod
    def _item(found: dict) -> dict:
        return {"id": found["id"], "text": found["memory"], "source_ids": found["metadata"]["turn_ids"],
                "score": found.get("score")}

    def recall(self, question: str, knobs: dict, asked_at: datetime | None = None) -> list[dict]:
        search = knobs["search"]
        found = self.memory.search(question, filters={"user_id": self.user_id}, top_k=search["top_k"],
                                   threshold=search["threshold"])["results"]
        return [self._item(f) for f in found]

    def stored(self) -> list[dict]:
        return [self._item(f) for f in self._items(100_000)]
