"""A generic retriever log (what LangChain / LlamaIndex retrievers return, written one question a line):
``{"id", "category", "question", "gold"?, "documents": [{"id", "text", "score"?, "source_ids"?}], "context_ids"?,
"answer"?, "judge"?}``. ``documents`` is retrieval in rank order; ``context_ids``, when given, names the documents
handed to the answerer (assembly). Without ``source_ids`` a document is its own source (its id)."""
from __future__ import annotations

from evolve.observe.contract import TRACE_VERSION


def record(line: dict) -> dict:
    """The log line as a contract record."""
    retrieved = []
    for rank, doc in enumerate(line["documents"], 1):
        item = {"id": str(doc["id"]), "rank": rank, "text": doc["text"],
                "source_ids": [str(s) for s in doc.get("source_ids", [doc["id"]])]}
        if "score" in doc:
            item["score"] = doc["score"]
        retrieved.append(item)
    out = {"trace_version": TRACE_VERSION, "id": line["id"], "category": line["category"],
           "question": line.get("question", ""), "retrieved": retrieved}
    if "context_ids" in line:
        wanted = set(map(str, line["context_ids"]))
        out["packed"] = [{"id": r["id"], "text": r["text"], "source_ids": r["source_ids"]} for r in retrieved
                         if r["id"] in wanted]
    for key in ("gold", "answer", "judge", "scored"):
        if key in line:
            out[key] = line[key]
    return out
