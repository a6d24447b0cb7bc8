"""Record a Mem0 ``search()`` / ``get_all()`` log on LoCoMo (the Mem0 adapter's test fixture is one such log).

Runs Mem0 OSS offline: the packaged all-MiniLM-L6-v2 through Mem0's huggingface embedder, an embedded on-disk Qdrant,
``infer=False`` (each turn stored verbatim, no LLM call), telemetry off. Each turn is stored with its dialogue id in
``metadata.source_ids``; each question of the first SESSIONS sessions is searched and logged one JSON object a line:
``{"id", "category", "question", "gold", "search", "get_all"}``, ``search`` and ``get_all`` exactly as Mem0 returned
them. Usage: python experiments/bench/record_mem0_log.py OUT.jsonl [--sessions N] [--top-k K]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

LOCOMO = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo" / "locomo_dev4.json"


def main() -> None:
    from mem0 import Memory

    from evolve.benchmarks.locomo import CATEGORY_BY_CODE
    from evolve.runtime.embedder import minilm_model_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--top-k", type=int, default=5, help="search() top_k (default: %(default)s)")
    args = parser.parse_args()
    sample = json.loads(LOCOMO.read_text())[0]
    conv, user = sample["conversation"], sample["sample_id"]
    sessions = [f"session_{i}" for i in range(1, args.sessions + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        memory = Memory.from_config({
            "embedder": {"provider": "huggingface", "config": {"model": str(minilm_model_dir()), "embedding_dims": 384}},
            "vector_store": {"provider": "qdrant", "config": {"path": f"{tmp}/qdrant", "on_disk": True,
                                                              "collection_name": "locomo", "embedding_model_dims": 384}},
            "llm": {"provider": "openai", "config": {"api_key": "unused-with-infer-false"}},
            "history_db_path": f"{tmp}/history.db"})
        for session in sessions:
            date = conv[f"{session}_date_time"]
            for turn in conv[session]:
                memory.add([{"role": "user", "content": f"[{date}] {turn['speaker']}: {turn['text']}"}], user_id=user,
                           infer=False, metadata={"source_ids": [turn["dia_id"]]})
        stored = memory.get_all(filters={"user_id": user})
        prefixes = tuple(f"D{s.split('_')[1]}:" for s in sessions)
        lines = []
        for i, qa in enumerate(sample["qa"]):
            if qa.get("category") not in CATEGORY_BY_CODE or qa["category"] == 5 or not all(e.startswith(prefixes) for e in qa.get("evidence", [])):
                continue
            found = memory.search(qa["question"], filters={"user_id": user}, top_k=args.top_k)
            lines.append({"id": f"{user}/q{i}", "category": CATEGORY_BY_CODE[qa["category"]], "question": qa["question"],
                          "gold": {"answer": str(qa["answer"]), "evidence": qa["evidence"]},
                          "search": found, "get_all": stored})
    args.out.write_text("".join(json.dumps(line, default=str) + "\n" for line in lines))
    print(f"wrote {len(lines)} questions to {args.out}")


if __name__ == "__main__":
    main()
