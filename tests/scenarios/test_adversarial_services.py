"""Hard edges II, services half: hostile LLM endpoints and broken tracking stores, through the public API and the
CLI, against real servers on 127.0.0.1. Every failure is one clear line in bounded time; nothing is a traceback."""
from __future__ import annotations

import json
import logging
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from evolve.llm import LLMClient, LLMUnavailableError, ResponseCache, RoleConfig, UsageStats
from evolve.loop.budget import BudgetConfig
from evolve.loop.config import RunConfig
from evolve.loop.engine import Engine
from llm_server import LoopbackLLMServer
from workflow_fixtures import cli, journal, snapshot, write_config

MESSAGES = [{"role": "user", "content": "hello there"}]
SMALL = dict(benchmark="synthetic:0:3", limit=40, probe_size=10, rounds=1, candidates_per_round=2)


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


# ---------------------------------------------------------------- 5. token accounting


def test_negative_usage_is_refused_not_summed(tmp_path):
    with LoopbackLLMServer(rewrite=lambda r: {**r, "usage": {"prompt_tokens": -50_000, "completion_tokens": 1}}) \
            as server:
        client, stats = client_for(server, tmp_path)
        with pytest.raises(LLMUnavailableError, match="usage.prompt_tokens: Input should be greater than or equal"):
            client.complete(MESSAGES)
    assert stats.get("answerer", "prompt_tokens") == 0 and stats.get("answerer", "requests") == 2


def test_a_reply_without_usage_is_estimated_and_said(tmp_path, caplog):
    with LoopbackLLMServer(rewrite=lambda r: {k: v for k, v in r.items() if k != "usage"}) as server:
        client, stats = client_for(server, tmp_path)
        with caplog.at_level(logging.WARNING):
            assert client.complete(MESSAGES) == "echo: hello there"
            client.complete(MESSAGES, seed=1)
    assert stats.get("answerer", "prompt_tokens") > 0 and stats.get("answerer", "completion_tokens") > 0
    said = [r.getMessage() for r in caplog.records if "reports no token usage" in r.getMessage()]
    assert len(said) == 1, said  # once per role, not per call
    [entry] = [json.loads(p.read_text()) for p in (tmp_path / "cache").rglob("*.json")][:1]
    assert entry["usage_estimated"] is True


def test_a_huge_completion_is_cut_before_it_is_cached(tmp_path):
    with LoopbackLLMServer(responder=lambda body: "x" * 10_000_000) as server:
        client, _ = client_for(server, tmp_path, max_tokens=16)
        reply = client.complete(MESSAGES)
    assert len(reply) == 16 * 16 and cache_bytes(tmp_path) < 4_000


def test_retries_never_overrun_max_llm_calls(tmp_path):
    limit = 16
    with LoopbackLLMServer() as server:
        config = RunConfig(benchmark="synthetic:0:3", limit=12, probe_size=10, rounds=1, candidates_per_round=1,
                           seed=0, stores=tmp_path / "stores", budget=BudgetConfig(max_llm_calls=limit),
                           roles={"answerer": {"backend": "llm", "base_url": server.base_url, "model": "test-model",
                                               "max_retries": 4, "backoff_s": 0.0}})
        server.fail_next("500", 8)  # 12 answers expected by the dry run, 8 retries on top
        out = Engine(config, track=False, progress=False).run()
        assert server.request_count == limit
    stop = out["budget_stop"]
    assert out["rounds"] == 0 and stop["exceeded"] == ["max_llm_calls"] and stop["spent"]["calls"] == limit
    assert journal(tmp_path / "stores")[-1]["type"] == "BUDGET_STOP"


# ---------------------------------------------------------------- 7. base_url


def _run_config(tmp_path: Path, **roles) -> Path:
    return write_config(tmp_path / "run.yaml", **SMALL, stores=tmp_path / "stores", roles=roles)


@pytest.mark.parametrize("url", ["not a url", "::garbage", "http://127.0.0.1:notaport/v1", "ftp://host/v1"])
def test_a_base_url_that_is_not_a_url_is_refused_with_the_config(url, capsys, tmp_path, monkeypatch):
    config = _run_config(tmp_path, answerer={"backend": "llm", "base_url": url, "model": "m"})
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"error: {config}: roles.answerer.base_url: Value error, not " in out, out
    assert "Traceback" not in out and not (tmp_path / "stores").exists()
    for var, value in (("BACKEND", "llm"), ("MODEL", "m"), ("BASE_URL", url)):
        monkeypatch.setenv(f"MEMEVOLVE_ANSWERER_{var}", value)
    config = write_config(tmp_path / "env.yaml", **SMALL, stores=tmp_path / "stores")
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and "roles.answerer.base_url (from $MEMEVOLVE_ANSWERER_BASE_URL): Value error" in out, out


class Trickle:
    """A TCP server on 127.0.0.1 that answers every connection one byte every ``every_s`` seconds, never finishing
    the status line (for at most ``for_s`` seconds): per-read socket timeouts never fire."""

    def __init__(self, every_s: float = 0.5, for_s: float = 20.0):
        self.every_s, self.for_s = every_s, for_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + self.for_s
        with conn:
            try:
                while time.monotonic() < deadline and not self.stop.is_set():
                    conn.sendall(b"H")
                    time.sleep(self.every_s)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def trickle() -> Iterator[Trickle]:
    server = Trickle()
    yield server
    server.close()


def test_an_endpoint_that_trickles_is_unreachable_in_bounded_time(trickle, capsys, tmp_path):
    url = f"http://127.0.0.1:{trickle.port}/v1"
    config = _run_config(tmp_path, answerer={"backend": "llm", "base_url": url, "model": "m"})
    started = time.perf_counter()
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and time.perf_counter() - started < 15, out  # the trickle lasts 20 s
    assert f"error: LLM role 'answerer': cannot reach {url} ({url}/models): no HTTP answer within 3s" in out, out
    assert not (tmp_path / "stores").exists()


# ---------------------------------------------------------------- 8. tracking stores


class _Broken(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        body = b'{"error_code": "INTERNAL_ERROR"}'
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET


class _Gateway(_Broken):
    """Answers 404 with an empty body to everything, as a gateway does for a host that is not there."""

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _serve(handler: type) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def broken_tracking() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that answers 500 to everything, as a tracking server in trouble does."""
    yield from _serve(_Broken)


@pytest.fixture
def gateway() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that answers an empty 404 to everything."""
    yield from _serve(_Gateway)


def test_a_broken_tracking_store_is_refused_before_the_stores_in_bounded_time(broken_tracking, gateway, capsys,
                                                                             tmp_path):
    directory = tmp_path / "mlflow.db"
    directory.mkdir()
    cases = [(broken_tracking, "answers HTTP 500"), (gateway, "answers HTTP 404"),
             ("garbage://x", "tracking_uri: cannot use the tracking store garbage://x"),
             (f"sqlite:///{directory}", "exists and is not a regular file")]
    read_only = tmp_path / "read-only.db"
    sqlite3.connect(read_only).close()
    if subprocess.run(["chattr", "+i", str(read_only)], capture_output=True).returncode == 0:
        cases.append((f"sqlite:///{read_only}", "cannot write the tracking database (attempt to write a readonly "
                                                "database)"))
    try:
        for uri, rule in cases:
            config = write_config(tmp_path / "run.yaml", **SMALL, stores=tmp_path / "stores", tracking_uri=uri)
            started = time.perf_counter()
            code, out = cli(capsys, "run", "--config", config)
            assert code == 2 and f"error: {config}: tracking_uri: " in out and rule in out, out
            assert "Traceback" not in out and time.perf_counter() - started < 30  # MLflow's retries take minutes
            assert not (tmp_path / "stores").exists()
    finally:
        subprocess.run(["chattr", "-i", str(read_only)], capture_output=True)


class _FailsAfterLookup(_Broken):
    """Finds the experiment, then answers 500 to every write: a tracking store that breaks after the checks."""

    def do_GET(self) -> None:
        if "/experiments/get-by-name" not in self.path:
            return super().do_GET()
        body = json.dumps({"experiment": {"experiment_id": "1", "name": "memevolve", "lifecycle_stage": "active",
                                          "artifact_location": "file:///nonexistent"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_tracking_failure_after_the_commit_keeps_the_round_and_journals_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # MLflow's own setting: fail at once
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _FailsAfterLookup)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{httpd.server_address[1]}"
        config = write_config(tmp_path / "run.yaml", **SMALL, stores=tmp_path / "stores", tracking_uri=uri)
        code, out = cli(capsys, "run", "--config", config)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert code == 0 and "Traceback" not in out, out[-2000:]
    state = json.loads((tmp_path / "stores" / "state.json").read_text())
    flag = journal(tmp_path / "stores")[-1]
    assert state["last_committed_round"] == 1
    assert flag["type"] == "FLAG" and flag["payload"]["what"] == "untracked_round" and flag["payload"]["round"] == 1
    assert flag["payload"]["tracking_uri"] == uri and flag["payload"]["error"]
    code, out = cli(capsys, "journal", "verify", "--stores", tmp_path / "stores", "--tracking-uri", "")
    assert code == 0, out


# ---------------------------------------------------------------- 6. on_role_error: mark on a dead endpoint


def test_mark_on_an_endpoint_that_always_fails_commits_an_unscored_round(capsys, tmp_path):
    with LoopbackLLMServer() as server:
        def config(stores: Path) -> Path:
            return write_config(tmp_path / f"{stores.name}.yaml", **{**SMALL, "limit": 12}, stores=stores,
                                on_role_error="mark", roles={"answerer": {
                                    "backend": "llm", "base_url": server.base_url, "model": "test-model",
                                    "max_retries": 0}})

        lived = tmp_path / "lived"
        assert cli(capsys, "run", "--config", config(lived), "--no-tracking")[0] == 0
        best = snapshot(lived / "best")
        shutil.rmtree(lived / "cache" / "llm")  # nothing to replay: every question needs the endpoint
        server.fail_next("500", 100_000)
        for stores, rounds in ((lived, 2), (tmp_path / "fresh", 1)):
            code, out = cli(capsys, "run", "--config", config(stores), "--rounds", 1, "--no-tracking")
            assert code == 0 and "Traceback" not in out and "invalid bundle" not in out, out[-2000:]
            last, night = journal(stores)[-2:]  # the run's one round ends its night
            assert last["type"] == "ROUND" and last["round"] == rounds and last["payload"]["accuracy"] is None
            assert night["type"] == "NIGHT" and night["payload"]["diff"] == {}
            assert cli(capsys, "journal", "verify", "--stores", stores, "--tracking-uri", "")[0] == 0
    assert snapshot(lived / "best") == best  # a round that scored nothing neither checkpoints nor restores
    assert not (tmp_path / "fresh" / "best").exists() or not any((tmp_path / "fresh" / "best").iterdir())


# ---------------------------------------------------------------- 9. optuna_storage


@pytest.mark.parametrize("url, rule", [
    ("postgresql+psycopg2://user@127.0.0.1:5432/studies", "the postgresql+psycopg2 driver is not installed"),
    ("mysql://user@127.0.0.1:3306/studies", "the mysql driver is not installed"),
    ("nosuchdb://host/studies", "'nosuchdb' is not a database SQLAlchemy knows"),
])
def test_an_optuna_storage_without_its_driver_is_refused_before_the_stores(url, rule, capsys, tmp_path):
    config = write_config(tmp_path / "run.yaml", **SMALL, stores=tmp_path / "stores", optuna_storage=url)
    started = time.perf_counter()
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"error: {config}:4: optuna_storage: Value error, {rule}" in out, out
    assert "Traceback" not in out and time.perf_counter() - started < 30  # a ceiling, not a speed test
    assert not (tmp_path / "stores").exists()


# ---------------------------------------------------------------- 12. hostile benchmark files

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _locomo_sample(**conversation) -> dict:
    turns = {"session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a beagle named Rex."}],
             "session_1_date_time": "1:56 pm on 8 May, 2023",
             "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "Rex chewed my shoe."}],
             "session_2_date_time": "1:56 pm on 9 May, 2023"}
    return {"sample_id": "s1", "conversation": {"speaker_a": "Ann", "speaker_b": "Ben", **turns, **conversation},
            "qa": [{"question": "Who is Rex?", "answer": "a beagle", "evidence": ["D1:1"], "category": 1}]}


def _longmemeval(edit) -> list:
    items = json.loads((FIXTURES / "longmemeval_mini.json").read_text())
    edit(items[0])
    return items


def _has_answer_one(item: dict) -> None:
    item["haystack_sessions"][1][0]["has_answer"] = 1


def _nan_answer(item: dict) -> None:
    item["answer"] = float("nan")


@pytest.mark.parametrize("kind, data, rule", [
    ("locomo", "[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
    ("locomo", [_locomo_sample(session_01=[{"speaker": "Ann", "dia_id": "D1:2", "text": "hi"}])],
     "(s1).conversation.session_01: session keys are numbered without leading zeros (session_1)"),
    ("locomo", [_locomo_sample(session_2_date_time="1:56 pm on 7 May, 2023")],
     "(s1).conversation.session_2_date_time: 1:56 pm on 7 May, 2023 is earlier than session_1_date_time"),
    ("longmemeval", _longmemeval(_has_answer_one), "field 'has_answer' is 1; it must be true or false"),
    ("longmemeval", _longmemeval(_nan_answer), "field 'answer' is nan; a gold answer is a string or a finite number"),
], ids=["deep JSON", "session_01", "dates out of order", "has_answer 1", "NaN answer"])
def test_a_hostile_benchmark_file_is_refused_before_evaluating(kind, data, rule, capsys, tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(data if isinstance(data, str) else json.dumps(data))
    started = time.perf_counter()
    code, out = cli(capsys, "eval", "--bench", f"{kind}:{bench}", "--out", tmp_path / "eval", "--cache", "")
    assert code == 2 and rule in out and "Traceback" not in out, out[-1000:]
    assert time.perf_counter() - started < 30 and not (tmp_path / "eval").exists()  # a ceiling, not a speed test


# ---------------------------------------------------------------- 10. executor addresses


def test_an_executor_address_that_is_not_ray_is_refused_in_bounded_time(capsys, tmp_path, llm_server):
    pytest.importorskip("ray")
    address = llm_server.base_url.removeprefix("http://").removesuffix("/v1")  # an HTTP server, not Ray
    config = write_config(tmp_path / "run.yaml", **SMALL, stores=tmp_path / "stores",
                          executor={"kind": "ray", "address": address})
    started = time.perf_counter()
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"executor.address: {address} accepts connections but does not speak gRPC" in out, out
    assert time.perf_counter() - started < 15 and not (tmp_path / "stores").exists()


def test_a_local_executor_with_an_address_is_refused(capsys, tmp_path):
    config = write_config(tmp_path / "run.yaml", **SMALL, stores=tmp_path / "stores",
                          executor={"kind": "local", "address": "127.0.0.1:6379"})
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and "executor: Value error, address: only kind 'ray' joins a cluster" in out, out
    assert not (tmp_path / "stores").exists()


def test_an_endpoint_without_a_models_list_is_refused_at_once(capsys, tmp_path, broken_tracking):
    url = f"{broken_tracking}/v1"  # answers 500 to everything, as a gateway does for a host that is not there
    config = _run_config(tmp_path, answerer={"backend": "llm", "base_url": url, "model": "m", "backoff_s": 120,
                                             "max_backoff_s": 120})
    started = time.perf_counter()
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and time.perf_counter() - started < 60, out  # one retry would have waited 120 s
    assert f"error: LLM role 'answerer': {url} is not an OpenAI-compatible endpoint: GET {url}/models answers " \
           "HTTP 500" in out, out
    assert not (tmp_path / "stores").exists()
