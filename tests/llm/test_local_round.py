"""An engine round whose answerer, planner and critic are the packaged SmolLM2 model behind llama.cpp's server
(``local_llm``, from ``conftest.py``), then its replay from the response cache. Skipped, with the reason, when the
local-llm extra is missing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve.llm.local import LocalLLMServer
from evolve.llm.prompting import json_payload
from evolve.loop.config import RunConfig
from evolve.loop.engine import Engine
from local_model import entries

pytestmark = pytest.mark.heavy


def _run_config(server: LocalLLMServer, stores: Path) -> RunConfig:
    local = {"backend": "llm", "base_url": server.base_url, "model": server.model, "seed": 0, "timeout_s": 600}
    # Planner and critic without constrained decoding and 8 tokens to answer: their real replies are cut short.
    # Two movable paths keep the planner's prompt (read three times) short: one CPU thread reads it.
    truncated = {**local, "max_tokens": 8, "structured": "off"}
    # Answers of at most 12 tokens: the synthetic answers are a word or two.
    return RunConfig(benchmark="synthetic:0", limit=10, probe_size=10, rounds=1, candidates_per_round=1,
                     stores=stores, roles={"answerer": {**local, "max_tokens": 12}, "planner": truncated,
                                           "critic": truncated},
                     planner={"paths": ["answering.span", "retrieval.top_k"]})


def _decisions(stores: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (stores / "candidate_outcomes.jsonl").read_text().splitlines()]
    return [(r["candidate_id"], tuple(r["change_keys"]), r["decided_by"], r["decision"]["verdict"], r["critic"])
            for r in rows]


def test_one_round_with_the_local_answerer_replays_without_calls(local_llm, tmp_path):
    config = _run_config(local_llm, tmp_path / "stores")
    first = Engine(config, track=False, progress=False).run()
    assert first["rounds"] == 1 and first["llm"]["answerer"]["requests"] > 0

    # The planner's and the critic's replies were real and invalid: re-asked, then dropped with a recorded reason.
    cache = config.stores / "cache" / "llm"
    planner_replies = entries(cache, "planner")  # one cached reply per distinct prompt: three attempts
    planner = first["llm"]["planner"]  # a timeout under load is retried: a retry, not another attempt
    assert planner["requests"] - planner.get("retries", 0) == len(planner_replies) == 3
    for entry in planner_replies:
        assert entry["usage"]["completion_tokens"] == 8 and entry["content"].strip()
        with pytest.raises(ValueError):
            json_payload(entry["content"])
    [log] = [json.loads(line) for line in (config.stores / "diagnosis_log.jsonl").read_text().splitlines()]
    assert log["planner_notes"] == ["llm planner dropped: invalid after 3 attempt(s): reply contains no valid JSON"]
    decisions = _decisions(config.stores)
    critics = [critic for *_, critic in decisions if critic is not None]
    assert critics and all(c["label"] == "risky" and c["reasons"][0].startswith("critic output invalid after 3")
                           for c in critics)

    # A second night on fresh stores sharing the response cache: no HTTP call, the same decisions.
    replay = tmp_path / "replay"
    replay.mkdir()
    (replay / "cache").symlink_to(config.stores / "cache")
    second = Engine(config.model_copy(update={"stores": replay}), track=False, progress=False).run()
    assert {role: usage.get("requests", 0) for role, usage in second["llm"].items()} == \
        {role: 0 for role in second["llm"]}
    assert second["llm"]["answerer"]["cache_hits"] > 0
    assert _decisions(replay) == decisions
    assert (first["current"]["hash"], first["decisions"]) == (second["current"]["hash"], second["decisions"])
