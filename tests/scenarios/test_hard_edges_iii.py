"""Hard edges III: hostile prompt edits, interrupts, unbounded knobs and special files, through the CLI and the
public API. Every failure is one clear line with a documented exit code; nothing stored is lost."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest

from evolve.cli import interrupt
from evolve.data import BASELINE_PATH
from evolve.llm import LLMClient, ResponseCache, RoleConfig, UsageStats
from evolve.loop.config import load_config
from evolve.files import CRASH_ENV, CRASH_SIGNAL_ENV, TEST_HOOKS_ENV
from evolve.state.journal import KEY_ENV
from evolve.strategy.prompts import add_instruction, check_prompt
from evolve.verify.decision import AcceptanceRules
from llm_server import LoopbackLLMServer
from workflow_fixtures import cli, cli_subprocess, journal, snapshot, write_config

HOSTILE = {"NEL": "\x85", "surrogate": "\ud800", "LS": "\u2028", "PS": "\u2029", "VT": "\x0b", "FF": "\x0c",
           "ESC": "\x1b"}
EDIT = "Answer in the words of the memory{}and never guess."


# ---------------------------------------------------------------- 1, 2, 9. prompt edits


def _planner_config(tmp_path: Path, server: LoopbackLLMServer) -> Path:
    roles = {role: {"backend": "llm", "base_url": server.base_url, "model": f"{role}-model", "timeout_s": 5,
                    "max_retries": 0} for role in ("answerer", "planner")}
    return write_config(tmp_path / "run.yaml", stores="stores", rounds=1, candidates_per_round=1, limit=40,
                        probe_size=10, roles=roles)


@pytest.mark.parametrize("char", ["\x85", "\ud800"], ids=["NEL", "surrogate"])
def test_a_planner_edit_with_a_line_break_or_a_surrogate_is_dropped_with_its_reason(char, capsys, tmp_path):
    edit = EDIT.format(char)
    reply = json.dumps([{"path": "answering.prompt", "direction": "edit", "value": edit, "why": "w"}])

    def respond(body: dict) -> str:
        planner = any("You tune the policy" in m["content"] for m in body["messages"])
        return reply if planner else "ANSWER: in Oslo"

    with LoopbackLLMServer(respond, models=("answerer-model", "planner-model")) as server:
        code, out = cli(capsys, "run", "--config", _planner_config(tmp_path, server), "--no-tracking")
        assert server.request_count >= 1
    assert code == 0 and "Traceback" not in out, out
    stores = tmp_path / "stores"
    assert "answering.prompt" not in (stores / "candidate_outcomes.jsonl").read_text()  # never became a candidate
    [log] = [json.loads(line) for line in (stores / "diagnosis_log.jsonl").read_text().splitlines()]
    notes = " ".join(log["planner_notes"])
    assert "an instruction must be one line of printable text" in notes
    assert f"(U+{ord(char):04X}) at position {edit.index(char)}" in notes


@pytest.mark.parametrize("name", list(HOSTILE))
def test_an_instruction_must_be_one_printable_line(name, baseline_strategy):
    prompt = baseline_strategy["answering"]["prompt"]
    with pytest.raises(ValueError, match=rf"one line of printable text; it holds .*U\+{ord(HOSTILE[name]):04X}"):
        add_instruction(prompt, EDIT.format(HOSTILE[name]))
    with pytest.raises(ValueError, match="only printable text, newlines and tabs"):
        check_prompt({**prompt, "template": prompt["template"] + HOSTILE[name]})
    grown = add_instruction(prompt, EDIT.format(" "))
    assert len(grown["template"].splitlines()) == len(prompt["template"].splitlines()) + 1


def test_a_malformed_cached_reply_is_dropped_with_a_warning_naming_it(tmp_path, caplog):
    with LoopbackLLMServer() as server:
        cfg = RoleConfig(backend="llm", base_url=server.base_url, model="test-model", max_retries=0)
        client = LLMClient(cfg, ResponseCache(tmp_path / "cache"), UsageStats(), role="answerer")
        messages = [{"role": "user", "content": "hello"}]
        first = client.complete(messages)
        [entry] = list((tmp_path / "cache").rglob("*.json"))
        data = json.loads(entry.read_text())
        entry.write_text(json.dumps({**data, "content": "bad \ud800 text"}))  # as the JSON escape \ud800
        with caplog.at_level(logging.WARNING):
            assert client.complete(messages) == first
        assert server.request_count == 2
    said = [r.getMessage() for r in caplog.records if "dropped a malformed LLM cache entry" in r.getMessage()]
    assert said and str(entry) in said[0] and "lone surrogate at position 4" in said[0]
    assert json.loads(entry.read_text())["content"] == first


# ---------------------------------------------------------------- 10, 11. operator text


def test_operator_text_is_escaped_when_shown(capsys, stores, serving):
    approver, reason = "eve\n  journal  entry 99 PROMOTE", "ok\x1b[2J\x1b[31mforged"
    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores, "--approver", approver,
                    "--reason", reason)
    assert code == 0, out
    assert "\x1b" not in out and "entry 99" not in out.split("\\n")[0].split("approved by")[0]
    assert "approved by eve\\n  journal  entry 99 PROMOTE: ok\\x1b[2J\\x1b[31mforged" in out
    code, out = cli(capsys, "serving", "--path", serving, "--stores", stores)
    assert code == 0 and "\x1b" not in out and "eve\\n" in out, out
    assert journal(stores)[-1]["payload"]["approval"] == {"approver": approver.strip(), "reason": reason}


@pytest.mark.parametrize("option", ["--approver", "--reason"])
def test_operator_text_is_bounded(option, capsys, stores, serving):
    before = snapshot(stores)
    argv = ["promote", "r002-c00", "--to", serving, "--stores", stores, "--approver", "eve"]
    with pytest.raises(SystemExit) as exit_:
        cli(capsys, *argv, option, "x" * 501)
    assert exit_.value.code == 2
    assert "has 501 characters; at most 500" in capsys.readouterr().err
    assert snapshot(stores) == before


# ---------------------------------------------------------------- 3. SIGINT and SIGTERM


#: One round is enough: every interruption point lies in round 1, and the resumed run must finish it.
RUN = dict(benchmark="synthetic:0", limit=20, probe_size=10, rounds=1, candidates_per_round=1,
           strategy=str(BASELINE_PATH))


def _start(config: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evolve.cli", "run", "--config", str(config), "--no-tracking",
                             "--json"],
                            cwd=config.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _wait_for(proc: subprocess.Popen, condition, what: str) -> None:
    started = time.monotonic()
    while not condition():
        assert proc.poll() is None, f"{what} never reached: exit {proc.returncode}\n{proc.stderr.read()}"
        assert time.monotonic() - started < 300, f"{what} not reached"
        time.sleep(0.01)


def _ingesting(stores: Path):
    directory = stores / "cache" / "ingestion" / "stores"
    return lambda: directory.is_dir() and any(directory.iterdir())


# Each phase under one signal, both signals used: the two take the same path (evolve.cli.interrupt) apart from the
# exit code and the name printed, which the promote test below checks under both.
@pytest.mark.parametrize("phase, signum, code", [("start-up", signal.SIGTERM, 143), ("evaluation", signal.SIGINT, 130),
                                                 ("commit", signal.SIGTERM, 143)],
                         ids=["start-up-SIGTERM", "evaluation-SIGINT", "commit-SIGTERM"])
def test_an_interrupted_run_says_so_in_one_line_and_resumes(phase, signum, code, tmp_path):
    config = write_config(tmp_path / "run.yaml", **RUN, stores=tmp_path / "stores")
    stores = tmp_path / "stores"
    if phase == "commit":  # the round's records are appended, its journal entries not yet
        proc = _start(config, {CRASH_ENV: "commit-records", CRASH_SIGNAL_ENV: signal.Signals(signum).name})
    else:
        proc = _start(config)
        if phase == "start-up":
            time.sleep(1.0)  # inside the imports and set-up, before any stores exist
            assert not stores.exists()
        else:
            _wait_for(proc, _ingesting(stores), "round 1's evaluation")
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    where = "at start-up" if phase == "start-up" else "during round 1"
    name = signal.Signals(signum).name
    assert err.splitlines()[-1] == f"interrupted {where}; nothing lost; `memevolve run` resumes ({name})", err
    resumed = _start(config)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert json.loads(out)["rounds"] == 1


def test_a_signal_during_deferred_start_up_is_raised_when_the_start_up_ends():
    reached = False
    with pytest.raises(KeyboardInterrupt) as caught:
        with interrupt.handled():
            with interrupt.deferred():  # e.g. a C extension's import, which an exception raised inside would break
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                reached = True
    assert reached and caught.value.signum == signal.SIGINT


def test_an_interrupt_python_drops_in_a_weakref_callback_is_delivered_again():
    class Thing:
        pass

    thing = Thing()
    ref = weakref.ref(thing, lambda _: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(0.2)))
    with pytest.raises(KeyboardInterrupt) as caught:
        with interrupt.handled():
            del thing  # the handler raises inside the callback; Python prints that and drops it
            for _ in range(300):
                time.sleep(0.01)
    assert ref() is None and caught.value.signum == signal.SIGTERM


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_promote_says_so_and_is_finished_by_the_next_command(signum, code, capsys, stores, serving,
                                                                            tmp_path, monkeypatch):
    monkeypatch.setenv(CRASH_ENV, "swap")
    monkeypatch.setenv(CRASH_SIGNAL_ENV, signal.Signals(signum).name)
    done = cli_subprocess(tmp_path, "promote", "r002-c00", "--to", serving, "--stores", stores)
    monkeypatch.delenv(CRASH_ENV)
    assert done.returncode == code and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == ("interrupted during `memevolve promote`; nothing lost (every write is "
                                            f"atomic); run it again ({signal.Signals(signum).name})")
    code_, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code_ == 0 and f"recovered an interrupted PROMOTE of {serving}: finished" in out, out


# ---------------------------------------------------------------- 4. special and huge files


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "directory"])
def test_a_run_config_that_is_not_a_regular_file_is_refused_at_once(kind, tmp_path):
    path = Path(kind) if kind == "/dev/zero" else tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "evolve.cli", "candidates"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "MEMEVOLVE_CONFIG": str(path)})
    assert done.returncode == 2 and time.monotonic() - started < 30
    what = {"/dev/zero": "a character device", "fifo": "a FIFO (named pipe)", "directory": "a directory"}[kind]
    assert done.stderr == f"error: {path}: cannot read run config: is {what}, not a regular file\n"


def test_a_run_config_larger_than_its_bound_is_refused(capsys, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("benchmark: synthetic:0\n" + "#" * 2**24 + "\n")
    code, out = cli(capsys, "run", "--config", path, "--no-tracking")
    assert code == 2 and f"{path}: cannot read run config: is 16,777,240 bytes, larger than the 16,777,216" in out


@pytest.mark.parametrize("argv, name", [
    (["eval", "--strategy", "{fifo}"], "strategy"),
    (["eval", "--bench", "locomo:{fifo}", "--cache", ""], "benchmark"),
], ids=["strategy", "benchmark"])
def test_a_strategy_or_benchmark_fifo_is_refused(argv, name, capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, out = cli(capsys, *[a.format(fifo=fifo) for a in argv], "--out", tmp_path / "out")
    assert code == 2 and str(fifo) in out and "is a FIFO (named pipe), not a regular file" in out, out


def test_a_stores_file_that_is_a_fifo_is_refused(capsys, stores):
    (stores / "escalations.json").unlink()
    os.mkfifo(stores / "escalations.json")
    code, out = cli(capsys, "escalations", "--stores", stores)
    assert code == 2 and "escalations.json: cannot read: is a FIFO (named pipe), not a regular file" in out, out


# ---------------------------------------------------------------- 5, 13. bounded knobs


@pytest.mark.parametrize("key, value, rule", [
    ("bootstrap_resamples", 1_000_000_000, "less than or equal to 100000"),
    ("bootstrap_resamples", 1, "greater than or equal to 200"),
    ("non_inferiority_margin", 0.5, "less than or equal to 0.2"),
    ("epsilon_default", 3.0, "less than or equal to 1"),
])
def test_acceptance_knobs_are_bounded(key, value, rule, capsys, tmp_path):
    config = write_config(tmp_path / "run.yaml", stores=tmp_path / "stores", acceptance={key: value})
    code, out = cli(capsys, "run", "--config", config, "--estimate")
    assert code == 2 and f"acceptance.{key}: Input should be {rule}" in out, out
    assert not (tmp_path / "stores").exists()
    assert "at most" in AcceptanceRules.model_fields[key].description


@pytest.mark.parametrize("key, value", [("rounds", 10**9), ("candidates_per_round", 10**6), ("seed", 2**40),
                                        ("budget", {"max_llm_calls": 10**20}), ("workers", 10**5),
                                        ("cost", {"max_context_words": 1e12})])
def test_run_config_knobs_are_bounded(key, value, capsys, tmp_path):
    config = write_config(tmp_path / "run.yaml", stores=tmp_path / "stores", **{key: value})
    code, out = cli(capsys, "run", "--config", config, "--estimate")
    assert code == 2 and "Input should be less than or equal to" in out, out


# ---------------------------------------------------------------- 6, 18. stores files


def test_an_escalations_file_holding_a_list_is_refused_naming_it(capsys, stores):
    (stores / "escalations.json").write_text("[1, 2]")
    code, out = cli(capsys, "escalations", "--stores", stores)
    assert code == 2 and "Traceback" not in out
    assert out == (f"error: {stores / 'escalations.json'}: not an escalations document: expected a JSON object "
                   "with 'blocked' (an object of objects) and 'escalated' (a list)\n")


def test_an_unrelated_journal_names_the_command_that_locates_tampering(capsys, tmp_path):
    stores = tmp_path / "stores"
    stores.mkdir()
    (stores / "journal.jsonl").write_text('{"note": "someone else\'s log"}\n')
    code, out = cli(capsys, "run", "--config", write_config(tmp_path / "run.yaml", stores=stores), "--no-tracking")
    assert code == 2 and "run `memevolve journal verify` to locate tampering" in out and "verify()" not in out, out


# ---------------------------------------------------------------- 7, 17. dates


def _locomo(tmp_path: Path, stamp: str) -> Path:
    sample = {"sample_id": "s1", "conversation": {
        "speaker_a": "Ann", "speaker_b": "Ben", "session_1_date_time": stamp,
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I am flying to Oslo tomorrow for the concert."},
                      {"speaker": "Ben", "dia_id": "D1:2", "text": "The dentist appointment was yesterday."}]},
        "qa": [{"question": "Where is Ann flying?", "answer": "Oslo", "evidence": ["D1:1"], "category": 4},
               {"question": "When is Ann flying to Oslo?", "answer": "tomorrow", "evidence": ["D1:1"],
                "category": 2}]}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    return path


def test_a_conversation_dated_9999_12_31_is_evaluated(capsys, tmp_path):
    bench = _locomo(tmp_path, "11:59 pm on 31 December, 9999")
    code, out = cli(capsys, "eval", "--bench", f"locomo:{bench}", "--out", tmp_path / "out", "--cache", "")
    assert code == 0 and "Traceback" not in out, out
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["n_scored"] == 2


def test_a_huge_date_string_is_quoted_cut_short(capsys, tmp_path):
    bench = _locomo(tmp_path, "x" * 100_000)
    code, out = cli(capsys, "eval", "--bench", f"locomo:{bench}", "--out", tmp_path / "out", "--cache", "")
    assert code == 2 and len(out) < 400 and "unparseable date 'xxxx" in out and "(100000 characters)" in out, out


# ---------------------------------------------------------------- 8. the journal key


def test_a_journal_key_that_is_not_utf8_is_used_as_bytes(stores, tmp_path):
    env = {**os.environ}
    env.pop(KEY_ENV, None)
    command = [sys.executable, "-m", "evolve.cli", "journal", "verify", "--stores", str(stores)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=120,
                          env={**{k.encode(): v.encode() for k, v in env.items()}, KEY_ENV.encode(): b"k\xff\xfe"})
    assert b"Traceback" not in done.stderr and done.returncode in (0, 1), done.stderr
    assert b"UnicodeEncodeError" not in done.stderr


# ---------------------------------------------------------------- 12. flags --verify ''


@pytest.mark.parametrize("argv", [["--verify", ""], ["--verify", "  "], [""]], ids=["empty", "blank", "positional"])
def test_an_empty_candidate_id_is_refused(argv, capsys, stores):
    with pytest.raises(SystemExit) as exit_:
        cli(capsys, "flags", "--stores", stores, *argv)
    assert exit_.value.code == 2 and "is empty; give a candidate id" in capsys.readouterr().err


# ---------------------------------------------------------------- 14. the crash hook is test-only


def test_the_crash_hook_is_inert_outside_the_test_suite(capsys, stores, serving, tmp_path, monkeypatch):
    monkeypatch.setenv(CRASH_ENV, "swap")
    monkeypatch.delenv(TEST_HOOKS_ENV)
    done = cli_subprocess(tmp_path, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert done.returncode == 0, done.stderr
    assert journal(stores)[-1]["type"] == "PROMOTE"


# ---------------------------------------------------------------- 15. a run config reached through a symlink


def test_a_symlinked_run_config_resolves_relative_paths_from_the_links_directory(capsys, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    target = write_config(tmp_path / "elsewhere" / "run.yaml", stores="stores")
    link_dir = tmp_path / "project"
    link_dir.mkdir()
    (link_dir / "run.yaml").symlink_to(target)
    assert load_config(link_dir / "run.yaml").stores == link_dir / "stores"
    with pytest.raises(SystemExit):
        cli(capsys, "run", "--help")
    assert "the link's directory, not its target's" in " ".join(capsys.readouterr().out.split())


# ---------------------------------------------------------------- 16. the power warning


def test_the_power_warning_says_when_nothing_was_scored(capsys, tmp_path):
    roles = {"answerer": {"backend": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m", "max_retries": 0,
                          "timeout_s": 1}}
    with LoopbackLLMServer(lambda body: "ANSWER: x") as server:
        server.fail_next("500", 10_000)
        roles["answerer"]["base_url"] = server.base_url
        config = write_config(tmp_path / "run.yaml", stores=tmp_path / "stores", rounds=1, on_role_error="mark",
                              roles=roles)
        code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert "0 of" not in out.split("no question was scored")[0].split("power:")[-1], out
    assert "no question was scored when the baseline was observed (0 of" in out, out
