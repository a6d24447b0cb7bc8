"""Hard edges (issue 14): hostile or careless input, tampered stores and misplaced serving files, through the CLI.

Every refused operation exits with the README's code and leaves the stores byte-identical; no command rewrites
committed history.
"""
from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import pytest

from evolve.data import BASELINE_PATH
from workflow_fixtures import cli, write_config

BASELINE_TEXT = BASELINE_PATH.read_text(encoding="utf-8")
BENCH = "synthetic:0:3"
#: What a run refused at start may still touch: nothing but the lock owner file (skipped by snapshot).
SMALL = dict(benchmark=BENCH, limit=40, probe_size=10, rounds=1, candidates_per_round=2)


def small_config(path: Path, **settings) -> Path:
    return write_config(path, **{**SMALL, **settings})


def line_no(text: str, needle: str, occurrence: int = 0) -> int:
    """1-based line of the ``occurrence``-th line of ``text`` that contains ``needle``."""
    return [i for i, line in enumerate(text.splitlines(), 1) if needle in line][occurrence]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Stores after one small round (read-only; copy with the ``stores`` fixture)."""
    base = tmp_path_factory.mktemp("built")
    code = cli_plain("run", "--config", small_config(base / "run.yaml", stores=base / "stores"), "--no-tracking")
    assert code == 0
    return base / "stores"


def cli_plain(*argv: object) -> int:
    from evolve.cli import main

    return main([str(a) for a in argv])


@pytest.fixture
def stores(built: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "stores"))


# ---------------------------------------------------------------- 7. duplicate keys


def test_duplicate_strategy_key_is_refused_naming_both_lines(capsys, tmp_path):
    text = BASELINE_TEXT.replace("  top_k: 5\n", "  top_k: 5\n  top_k: 50\n")
    bad = tmp_path / "dup.yaml"
    bad.write_text(text)
    first = line_no(text, "top_k: 5")
    code, out = cli(capsys, "diff", BASELINE_PATH, bad)
    assert code == 2
    assert f"{bad}:{first + 1}: retrieval.top_k: duplicate key top_k (first at line {first}, again at line " \
           f"{first + 1})" in out, out


def test_duplicate_run_config_key_is_refused_naming_both_lines(capsys, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(f"stores: {tmp_path / 'stores'}\nacceptance:\n  alpha: 0.05\n  alpha: 0.5\n")
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2
    assert f"{config}:4: acceptance.alpha: duplicate key alpha (first at line 3, again at line 4)" in out, out
    assert not (tmp_path / "stores").exists()


# ---------------------------------------------------------------- 8. alias bombs, deep nesting, huge values


#: One flow sequence whose level i holds level i-1 nine times: 9**9 leaves once the aliases are expanded.
ALIAS_BOMB = "[&a0 [lol, lol], " + ", ".join(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)) + "]"
DEEP = "[" * 20000 + "]" * 20000


@pytest.mark.parametrize("payload, rule", [(ALIAS_BOMB, "expands to more than"), (DEEP, "nested more than")],
                         ids=["alias bomb", "deep nesting"])
def test_hostile_yaml_in_a_typed_field_is_refused_fast(payload, rule, capsys, tmp_path):
    strategy = tmp_path / "bomb.yaml"
    strategy.write_text(BASELINE_TEXT.replace("name: baseline", f"name: {payload}"))
    config = tmp_path / "run.yaml"
    config.write_text(f"stores: {tmp_path / 'stores'}\nbenchmark: {payload}\n")
    for argv in (("diff", BASELINE_PATH, strategy), ("run", "--config", config, "--no-tracking")):
        started = time.process_time()  # CPU time: what the expansion would cost, whatever else the machine runs
        code, out = cli(capsys, *argv)
        assert code == 2 and rule in out and "Traceback" not in out, out[-500:]
        assert time.process_time() - started < 2.0  # expanded, 9**9 leaves would take minutes
    assert not (tmp_path / "stores").exists()


def test_huge_value_is_refused_with_a_short_message(capsys, tmp_path):
    strategy = tmp_path / "huge.yaml"
    strategy.write_text(BASELINE_TEXT.replace("name: baseline", "name: " + "x" * 5_000_000))
    code, out = cli(capsys, "diff", BASELINE_PATH, strategy)
    assert code == 2 and "name" in out and len(out) < 1000, len(out)


# ---------------------------------------------------------------- 13. run configs are strict


@pytest.mark.parametrize("text, expected", [
    ("", "<root>: the run config is empty"),
    ("# nothing but a comment\n", "<root>: the run config is empty"),
    ("rounds: true\n", "rounds: Input should be a valid integer"),
    ("seed: '3'\n", "seed: Input should be a valid integer"),
    ("acceptance:\n  protected_slices: [temporl]\n", "acceptance.protected_slices: Value error, unknown category "
                                                     "'temporl'"),
    ("acceptance:\n  epsilon_by_category: {multihop: 0.1}\n", "unknown category 'multihop'"),
], ids=["empty", "comment only", "boolean for integer", "string for integer", "unknown protected slice",
        "unknown epsilon category"])
def test_loose_run_config_is_refused(text, expected, capsys, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    code, out = cli(capsys, "run", "--config", config, "--stores", tmp_path / "stores", "--no-tracking")
    assert code == 2 and f"{config}" in out and expected in out, out
    assert not (tmp_path / "stores").exists()


# ---------------------------------------------------------------- 9. prompt markers belong to the framework


def test_prompt_markers_come_from_the_schema_not_the_artifact(capsys, tmp_path):
    text = BASELINE_TEXT.replace("      {context}\n", "").replace('required_markers: ["{context}", "{question}", '
                                                                 '"ANSWER:"]', 'required_markers: ["{question}"]')
    assert "{context}" not in text
    bad = tmp_path / "no-context.yaml"
    bad.write_text(text)
    config = small_config(tmp_path / "run.yaml", strategy=bad, stores=tmp_path / "stores", roles={
        "answerer": {"backend": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m", "max_retries": 0}})
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2
    assert f"{bad}:" in out and "answering.prompt.template: must contain marker '{context}', which the framework " \
                                 "requires for answering.prompt" in out, out
    assert not (tmp_path / "stores").exists()
    code, out = cli(capsys, "eval", "--strategy", bad, "--bench", BENCH, "--out", tmp_path / "eval")
    assert code == 2 and "'{context}'" in out and not (tmp_path / "eval").exists()


# ---------------------------------------------------------------- 10. empty or unscorable benchmarks


def _locomo(path: Path, data: object) -> str:
    path.write_text(json.dumps(data))
    return f"locomo:{path}"


def _sample(qa: list[dict]) -> dict:
    return {"sample_id": "s1", "qa": qa, "conversation": {
        "speaker_a": "Ann", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a beagle named Rex."}]}}


@pytest.mark.parametrize("data, expected, run_expected", [
    ([], "nothing to score: no questions", "nothing to score: no questions"),
    # no labelled question: a run is not refused but evolves on the probes of the conversation (label-free)
    ([_sample([])], "nothing to score: no questions", None),
    ([_sample([{"question": "Who is Rex?", "adversarial_answer": "a cat", "evidence": ["D1:1"], "category": 5}])],
     "nothing to score: 1 question(s), all adversarial", "nothing to score: 1 question(s), all adversarial"),
], ids=["empty list", "no qa", "only adversarial"])
def test_unscorable_benchmark_is_refused_before_anything_is_written(data, expected, run_expected, capsys,
                                                                    tmp_path):
    spec = _locomo(tmp_path / "bench.json", data)
    code, out = cli(capsys, "eval", "--bench", spec, "--out", tmp_path / "eval")
    assert code == 2 and expected in out and not (tmp_path / "eval").exists(), out
    code, out = cli(capsys, "run", "--config", small_config(tmp_path / "run.yaml", benchmark=spec,
                                                            stores=tmp_path / "stores"), "--no-tracking")
    if run_expected is None:
        assert code == 0 and "label-free: no labelled question, evolved on" in out, out
        return
    assert code == 2 and run_expected in out and "Traceback" not in out, out
    assert not (tmp_path / "stores").exists()


# ---------------------------------------------------------------- 11. CLI numbers are validated by argparse


@pytest.mark.parametrize("argv, expected", [
    (("eval", "--limit", "-1"), "argument --limit: -1 is not >= 1"),
    (("eval", "--limit", "0"), "argument --limit: 0 is not >= 1"),
    (("eval", "--judge-threshold", "5"), "argument --judge-threshold: 5 is not in (0, 1]"),
    (("eval", "--judge-threshold", "0"), "argument --judge-threshold: 0 is not in (0, 1]"),
    (("run", "--rounds", "0"), "argument --rounds: 0 is not >= 1"),
    (("run", "--rounds", "-1"), "argument --rounds: -1 is not >= 1"),
], ids=["limit -1", "limit 0", "threshold 5", "threshold 0", "rounds 0", "rounds -1"])
def test_bad_cli_numbers_exit_2_before_any_work(argv, expected, capsys, tmp_path):
    extra = ("--out", tmp_path / "eval") if argv[0] == "eval" else (
        "--config", small_config(tmp_path / "run.yaml", stores=tmp_path / "stores"), "--no-tracking")
    with pytest.raises(SystemExit) as exc:
        cli(capsys, *argv, *extra)
    assert exc.value.code == 2 and expected in capsys.readouterr().err
    assert not (tmp_path / "eval").exists() and not (tmp_path / "stores").exists()


# ---------------------------------------------------------------- 12. --rounds N runs N more


def test_rounds_runs_n_more(capsys, tmp_path, stores):
    config = small_config(tmp_path / "run.yaml", stores=stores, rounds=1)  # already reached by the stores
    code, out = cli(capsys, "run", "--config", config, "--rounds", 1, "--no-tracking", "--json")
    assert code == 0, out
    assert json.JSONDecoder().raw_decode(out, out.index("{"))[0]["rounds"] == 2
    code, out = cli(capsys, "run", "--config", config, "--no-tracking", "--json")  # the count is reached: no round
    assert code == 0 and json.JSONDecoder().raw_decode(out, out.index("{"))[0]["rounds"] == 2


# ---------------------------------------------------------------- 14. eval --out is checked before evaluating


def test_eval_out_on_an_existing_file_is_refused_before_evaluating(capsys, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("keep me\n")
    unread = tmp_path / "absent.yaml"  # read right after the output check: refusing --out first leaves it unread
    for out_dir in (taken, taken / "sub"):
        code, out = cli(capsys, "eval", "--bench", BENCH, "--out", out_dir, "--strategy", unread)
        assert code == 2 and f"error: {out_dir}: cannot write output here" in out and "Traceback" not in out, out
        assert str(unread) not in out  # refused before the strategy was read, so before the evaluation
    assert taken.read_text() == "keep me\n"


# ---------------------------------------------------------------- 15. unreachable LLM endpoint


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the socket is


def test_unreachable_llm_endpoint_is_one_clear_line_before_the_stores(capsys, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    config = small_config(tmp_path / "run.yaml", stores=tmp_path / "stores", roles={
        "answerer": {"backend": "llm", "base_url": url, "model": "m", "max_retries": 2, "backoff_s": 120,
                     "max_backoff_s": 120}})
    started = time.perf_counter()
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and time.perf_counter() - started < 60  # one retry would have waited 120 s
    assert f"error: {config.name}" not in out  # not a config-parse error
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: LLM role 'answerer': cannot reach {url} ({url}/models): [Errno 111] Connection "
                      "refused"], out
    assert "Traceback" not in out and not (tmp_path / "stores").exists()
