"""A Mem0 ``search()`` / ``get_all()`` log: one JSON object a line, ``{"id", "category", "question", "gold", "search",
"get_all"?, "answer"?, "judge"?, "context_ids"?}``, ``search`` and ``get_all`` as Mem0's ``Memory`` returns them
(``{"results": [{"id", "memory", "score", "metadata", ...}]}``; a bare list of results is read alike).

Stages: ``get_all`` is what Mem0 stored (ingestion: the memory ids); ``search`` is retrieval in Mem0's order (rank 1
first) with its scores, each item's text its ``memory`` and its source turns ``metadata.source_ids`` (a list; a single
``metadata.source_id`` also reads); the context handed to the answerer is the search results (Mem0's documented use)
or, with ``context_ids``, those of them. ``answer`` and ``judge`` pass through.
"""
from __future__ import annotations

from typing import Any

from evolve.observe.contract import TRACE_VERSION


def _results(value: Any) -> list[dict]:
    return value["results"] if isinstance(value, dict) else list(value)


def _sources(item: dict) -> list[str]:
    meta = item.get("metadata") or {}
    if "source_ids" in meta:
        return [str(s) for s in meta["source_ids"]]
    return [str(meta["source_id"])] if "source_id" in meta else []


def record(line: dict) -> dict:
    """The log line as a contract record."""
    found = _results(line["search"])
    retrieved = [{"id": str(r["id"]), "rank": rank, "score": r.get("score"), "text": r["memory"],
                  "source_ids": _sources(r)} for rank, r in enumerate(found, 1)]
    for item in retrieved:
        if item["score"] is None:
            del item["score"]
    wanted = line.get("context_ids")
    packed = [{"id": r["id"], "text": r["text"], "source_ids": r["source_ids"]} for r in retrieved
              if wanted is None or r["id"] in wanted]
    out = {"trace_version": TRACE_VERSION, "id": line["id"], "category": line["category"],
           "question": line.get("question", ""), "retrieved": retrieved, "packed": packed}
    for key in ("gold", "answer", "judge", "scored"):
        if key in line:
            out[key] = line[key]
    if "get_all" in line:
        out["stored"] = [str(r["id"]) for r in _results(line["get_all"])]
    return out
