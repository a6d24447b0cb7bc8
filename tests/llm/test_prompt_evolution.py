"""Prompt evolution end to end against a loopback OpenAI-compatible server: the LLM planner proposes an edit of the
answering prompt, the gates check it, the paired comparison scores it, and the accepted prompt is diffed, shown,
promoted and rolled back through the CLI."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from llm_server import LoopbackLLMServer

from evolve.data import BASELINE_PATH
from evolve.llm.advisors import ProposalReply
from evolve.observe.judge import normalize
from evolve.ops.history import History
from evolve.strategy.artifact import load_strategy
from evolve.strategy.schema import live_dimensions
from workflow_fixtures import cli, journal, write_config

EDIT = "Copy the answer's words from the memory; do not paraphrase or add words."
MOVE = f"answering.prompt::edit:{EDIT}"


def _overlap(a: str, b: str) -> int:
    return len(set(normalize(a)) & set(normalize(b)))


def responder(body: dict) -> str:
    """A model that answers well only when its prompt carries :data:`EDIT`, and a planner that proposes that edit
    when the answering prompt is offered to it."""
    text = "\n".join(m["content"] for m in body["messages"])
    if "You tune the policy" in text:
        if "answering.prompt: prompt template of the answerer" not in text or "QUESTION: {question}" not in text:
            return json.dumps([{"path": "answering.max_answer_tokens", "direction": "increase", "why": "fallback"}])
        return json.dumps([{"path": "answering.prompt", "direction": "edit", "value": EDIT,
                            "why": "answers paraphrase the memory"}])
    question = re.search(r"QUESTION: (.*)", text).group(1)
    memory = text.split("MEMORY:", 1)[1].split("QUESTION:", 1)[0].strip().splitlines() or [""]
    if EDIT not in text:  # a confident paraphrase that never matches
        return "ANSWER: somewhere in Zanzibar"
    best = max(memory, key=lambda line: _overlap(line, question))
    return "ANSWER: " + " ".join([w for w in best.split() if not _overlap(w, question)][-2:])


@pytest.fixture(scope="module")
def evolved(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("prompt-evolution")
    with LoopbackLLMServer(responder, models=("answerer-model", "planner-model")) as server:
        roles = {role: {"backend": "llm", "base_url": server.base_url, "model": f"{role}-model", "timeout_s": 5,
                        "max_retries": 0} for role in ("answerer", "planner")}
        config = write_config(base / "run.yaml", stores="stores", rounds=1, candidates_per_round=1, limit=60,
                              probe_size=20, roles=roles, acceptance={"bootstrap_resamples": 2000})
        assert cli_main(["run", "--config", str(config), "--no-tracking"]) == 0
        planner_prompts = [r["messages"][-1]["content"] for r in server.requests
                           if "You tune the policy" in r["messages"][-1]["content"]]
    assert planner_prompts and "answering.prompt: prompt template of the answerer" in planner_prompts[0]
    assert "extraction.prompt" not in planner_prompts[0]  # the embedded extractor reads no prompt
    return base


def cli_main(argv: list[str]) -> int:
    from evolve.cli import main
    return main(argv)


def test_the_llm_planners_prompt_edit_is_gated_scored_and_accepted(evolved):
    record = History(evolved / "stores").record("r001-c00")
    assert record.change_keys == [MOVE]
    assert record.verdict == "ACCEPT", (record.decided_by, record.reason)
    gates = {g.name: g for g in record.gates.results}
    assert record.gates.passed and gates["prompt_integrity"].reason == "prompt changes: answering.prompt v1->v2"
    assert record.paired.improved > record.paired.regressed
    current = load_strategy(evolved / "stores" / "strategies" / f"{record.strategy_hash}.yaml")
    assert current["answering"]["prompt"]["version"] == 2
    assert EDIT in current["answering"]["prompt"]["template"].splitlines()
    assert current["answering"]["prompt"]["template"].rstrip().endswith("ANSWER:")  # the output line stays last


def test_the_prompt_diff_is_shown_and_promoted_then_rolled_back(evolved, capsys, tmp_path, monkeypatch):
    stores = evolved / "stores"
    code, out = cli(capsys, "show", "r001-c00", "--stores", stores)
    assert code == 0 and f"+{EDIT}" in out and "answering.prompt.version: 1 -> 2" in out
    serving = tmp_path / "serving" / "memory.yaml"
    monkeypatch.setenv("MEMEVOLVE_SERVING_DIR", str(serving.parent))
    serving.parent.mkdir()
    serving.write_bytes(BASELINE_PATH.read_bytes())
    code, out = cli(capsys, "promote", "r001-c00", "--to", serving, "--stores", stores, "--approver", "alice",
                    "--reason", "answers copy the memory")
    assert code == 0, out
    assert EDIT in yaml.safe_load(serving.read_text())["answering"]["prompt"]["template"]
    code, out = cli(capsys, "diff", BASELINE_PATH, serving)
    assert code == 1 and f"+{EDIT}" in out
    code, out = cli(capsys, "rollback", "--target", serving, "--stores", stores)
    assert code == 0, out
    assert serving.read_bytes() == BASELINE_PATH.read_bytes()
    assert [e["type"] for e in journal(stores)][-2:] == ["PROMOTE", "ROLLBACK"]


def test_a_prompt_edit_is_refused_where_no_model_reads_the_prompt():
    item = {"path": "answering.prompt", "direction": "edit", "value": EDIT, "why": "x"}
    assert ProposalReply.model_validate(item, context={"dimensions": live_dimensions({"answerer"})}).key == MOVE
    with pytest.raises(ValueError, match="not evolvable"):
        ProposalReply.model_validate(item, context={"dimensions": live_dimensions(set())})
    with pytest.raises(ValueError, match="may not contain '{'"):
        ProposalReply.model_validate({**item, "value": "Answer in {context} words."},
                                     context={"dimensions": live_dimensions({"answerer"})})
