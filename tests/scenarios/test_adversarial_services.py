"""Hard edges II, services half: hostile LLM endpoints and broken tracking stores, through the public API and the
CLI, against real servers on 127.0.0.1. Every failure is one clear line in bounded time; nothing is a traceback."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from evolve.llm import LLMClient, LLMUnavailableError, ResponseCache, RoleConfig, UsageStats
from llm_server import LoopbackLLMServer

MESSAGES = [{"role": "user", "content": "hello there"}]


def client_for(server: LoopbackLLMServer, tmp_path: Path, **settings) -> tuple[LLMClient, UsageStats]:
    cfg = RoleConfig(backend="llm", base_url=server.base_url, model="test-model",
                     **{"max_retries": 1, "backoff_s": 0.0, **settings})
    stats = UsageStats()
    return LLMClient(cfg, ResponseCache(tmp_path / "cache"), stats, role="answerer"), stats


def cache_bytes(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in (tmp_path / "cache").rglob("*.json"))


# ---------------------------------------------------------------- 4. malformed replies


@pytest.mark.parametrize("rewrite, rule", [
    (lambda r: {**r, "usage": {"prompt_tokens": None, "completion_tokens": 3}},
     "usage.prompt_tokens: Input should be a valid integer"),
    (lambda r: {**r, "usage": {"prompt_tokens": "12", "completion_tokens": 3}},
     "usage.prompt_tokens: Input should be a valid integer"),
    (lambda r: {**r, "choices": "nope"}, "choices: Input should be a valid array"),
    (lambda r: {**r, "choices": []}, "choices: List should have at least 1 item"),
    (lambda r: {**r, "choices": [{"message": {"content": None}}]}, "choices.0.message.content: Input should be a "
                                                                   "valid string"),
    (lambda r: b"<html>upstream error</html>", "<body>: Invalid JSON"),
], ids=["usage null", "usage string", "choices string", "no choices", "content null", "not JSON"])
def test_a_malformed_reply_is_retried_then_a_clear_error(rewrite, rule, tmp_path):
    with LoopbackLLMServer(rewrite=rewrite) as server:
        client, stats = client_for(server, tmp_path)
        with pytest.raises(LLMUnavailableError) as err:
            client.complete(MESSAGES)
        assert server.request_count == 2  # retried once, as any transient failure
    assert f"gave up after 2 attempts; last error: malformed reply: {rule}" in str(err.value)
    assert stats.get("answerer", "failures") == 1 and cache_bytes(tmp_path) == 0
