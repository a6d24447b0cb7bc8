"""What a new user meets on the command line: the power check, one rule for the run config and stores, no silent
overwrite, config paths relative to the config file, typo messages, objective-aware labels, lineage, a fast and
complete --help."""
from __future__ import annotations

import argparse
import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evolve.cli.main import build_parser, main
from evolve.data import BASELINE_PATH
from evolve.ops.history import History
from workflow_fixtures import cli, cli_subprocess

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]


def tiny_locomo(path: Path) -> Path:
    """A LoCoMo-format file with one conversation and four single-hop questions (too few to ever accept); the
    evidence of the last one, a two-letter reply, is not packed by the baseline."""
    turns = [("D1:1", "Ann", "I adopted a beagle named Rex from the shelter."),
             ("D1:2", "Ben", "I started learning the cello at the music school."),
             ("D2:1", "Ann", "Rex learned to fetch sticks at the lake."),
             ("D2:2", "Ben", "Ok.")]
    conversation: dict = {"speaker_a": "Ann", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
                          "session_2_date_time": "10:00 am on 20 June, 2023", "session_1": [], "session_2": []}
    for dia_id, speaker, text in turns:
        conversation[f"session_{dia_id[1]}"].append({"speaker": speaker, "dia_id": dia_id, "text": text})
    qa = [{"question": "What is the name of Ann's beagle?", "answer": "Rex", "evidence": ["D1:1"], "category": 4},
          {"question": "Which instrument is Ben learning?", "answer": "cello", "evidence": ["D1:2"], "category": 4},
          {"question": "What did Rex learn at the lake?", "answer": "to fetch sticks", "evidence": ["D2:1"],
           "category": 4},
          {"question": "What did Ben reply after the lake story?", "answer": "Ok", "evidence": ["D2:2"],
           "category": 4}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{"sample_id": "s1", "conversation": conversation, "qa": qa}]))
    return path


def project(base: Path, objective: str = "accuracy", **settings) -> Path:
    """``base/project/run.yaml`` naming its strategy, stores and benchmark relative to itself."""
    home = base / "project"
    tiny_locomo(home / "data" / "bench.json")
    (home / "strategies").mkdir(parents=True, exist_ok=True)
    shutil.copy(BASELINE_PATH, home / "strategies" / "start.yaml")
    config = home / "run.yaml"
    config.write_text(yaml.safe_dump({"benchmark": "locomo:data/bench.json", "strategy": "strategies/start.yaml",
                                      "stores": "stores", "rounds": 1, "candidates_per_round": 1, "probe_size": 10,
                                      "objective": objective, **settings}))
    return config


@pytest.fixture(scope="module", params=["accuracy", "evidence"])
def finished(request, tmp_path_factory) -> tuple[Path, str, subprocess.CompletedProcess]:
    """A one-round run of :func:`project`'s config under each objective, started from another directory; its full
    JSON summary in :func:`run_summary`."""
    base = tmp_path_factory.mktemp(request.param)
    config = project(base, request.param)
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    proc = cli_subprocess(elsewhere, "run", "--config", config, "--no-tracking", "--summary-out",
                          run_summary(config))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return config, request.param, proc


def run_summary(config: Path) -> Path:
    """Where :func:`finished` writes the run's full JSON summary (``--summary-out``)."""
    return config.with_name("run-summary.json")


# ---------------------------------------------------------------- the run's summary


def test_the_run_prints_a_table_and_keeps_the_json(finished):
    config, objective, proc = finished
    summary = json.loads(run_summary(config).read_text())
    label = {"accuracy": "accuracy", "evidence": "all evidence packed"}[objective]
    lines = proc.stdout.splitlines()
    assert "{" not in proc.stdout and len(lines) < 25, proc.stdout  # a table, not the JSON
    header = next(line for line in lines if line.split() and line.split()[0] == label.split()[0])
    base = next(line for line in lines if line.startswith("baseline "))
    final = next(line for line in lines if line.startswith("final "))
    assert header.split()[:len(label.split())] == label.split()
    assert base.split()[1] == f"{summary['baseline']['score']:.3f}" and final.split()[1] == f"{summary['current']['score']:.3f}"
    paired = summary["current_vs_baseline"]
    assert (f"final vs. baseline ({paired['n']} questions): delta {paired['delta']:+.3f}  McNemar p={paired['mcnemar_p']:.3g}"
            in proc.stdout)
    counts = summary["decisions"]
    accepted = counts.get("ACCEPT", 0) + counts.get("ACCEPT_WITH_MONITOR", 0)
    assert (f"decisions: {accepted} accepted" in proc.stdout and f"{counts.get('FEATURE_FLAG', 0)} flagged, "
            f"{counts.get('REJECT', 0)} rejected" in proc.stdout)
    assert f"best-ever: {summary['best']['hash'][:12]}" in proc.stdout
    # one line per power problem, and where the rest is
    for warning in summary["power"]["warnings"]:
        assert f"warning: {warning}" in lines
    assert "MLflow: not tracked (--no-tracking)" in proc.stdout and f"full summary: {run_summary(config)}" in proc.stdout
    # the stores keep the same JSON
    [kept] = (config.parent / "stores" / "summaries").glob("run-*.json")
    assert json.loads(kept.read_text()) == summary


def test_a_final_context_over_the_cost_limit_is_one_warning_line(finished):
    from evolve.cli.summary import warnings
    from evolve.verify.decision import CostLimits

    summary = json.loads(run_summary(finished[0]).read_text())
    words = summary["current"]["context_words"]["mean"]
    over = [line for line in warnings(summary, CostLimits(max_context_words=words / 2)) if "context" in line]
    assert over == [f"warning: final context {words:.1f} words per question exceeds max_context_words {words / 2:g}"]
    assert not any("context" in line for line in warnings(summary, CostLimits(max_context_words=words + 1)))


# ---------------------------------------------------------------- power check


def test_small_benchmark_warns_before_running_and_in_the_summary(finished):
    config, _, proc = finished
    assert ("power: 4 scored questions; no gain can be significant (needs >= 6 questions at alpha 0.05); "
            "probe 4 questions") in proc.stderr, proc.stderr
    assert "warning: benchmark too small to ever accept: 4 scored question(s)" in proc.stderr
    assert "warning: probe_size 10 is larger than the 4 scored questions; the probe uses 4" in proc.stderr
    power = json.loads(run_summary(config).read_text())["power"]
    assert power["n"] == 4 and power["min_improved"] == 6 and power["probe_n"] == 4
    assert power["min_delta_pp"] is None and power["failing"] is not None
    assert any(w.startswith("benchmark too small to ever accept") for w in power["warnings"])
    assert any(w.startswith("probe_size 10 is larger") for w in power["warnings"])


def test_a_large_enough_benchmark_states_the_smallest_significant_gain(capsys, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"benchmark": "synthetic:0", "limit": 60, "probe_size": 20, "rounds": 1,
                                      "candidates_per_round": 1, "stores": "stores"}))
    code, out = cli(capsys, "run", "--config", config, "--no-tracking", "--estimate")
    assert code == 0  # --estimate spends nothing: it prints the expected spend only
    code, out = cli(capsys, "run", "--config", config, "--no-tracking", "--json")
    summary = json.JSONDecoder().raw_decode(out, out.index("{"))[0]
    n = summary["power"]["n"]
    assert code == 0 and f"power: {n} scored questions; a significant gain needs >= 6 improved questions" in out
    assert f"at least {100 * 6 / n:+.1f} pp" in out and "probe 20 questions (1 question = 5.0 pp" in out
    assert summary["power"]["warnings"] == [] and 0 < summary["power"]["failing"] < n


# ---------------------------------------------------------------- config paths and keys


def test_config_paths_resolve_from_the_config_file(finished):
    config, _, proc = finished
    assert (config.parent / "stores" / "state.json").is_file()  # not under the working directory
    assert not (config.parent.parent / "elsewhere" / "stores").exists()


def test_a_missing_file_names_its_key(capsys, tmp_path, monkeypatch):
    config = project(tmp_path)
    text = config.read_text().replace("strategy: strategies/start.yaml", "strategy: strategies/missing.yaml")
    config.write_text(text)
    line = 1 + text.splitlines().index("strategy: strategies/missing.yaml")
    monkeypatch.chdir(tmp_path)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and (f"error: {config}:{line}: strategy: {config.parent / 'strategies' / 'missing.yaml'} "
                          f"does not exist (relative paths resolve from the config file's directory") in out, out
    config.write_text(text.replace("strategies/missing.yaml", "strategies/start.yaml")
                      .replace("locomo:data/bench.json", "locomo:data/gone.json"))
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f": benchmark: {config.parent / 'data' / 'gone.json'} does not exist" in out, out
    assert not (config.parent / "stores").exists()


@pytest.mark.parametrize("text, where, valid, not_valid", [
    ("roundz: 3\n", "roundz", ["rounds", "candidates_per_round", "probe_size", "acceptance"], ["alpha"]),
    ("acceptance: {alpah: 0.1}\n", "acceptance.alpah", ["alpha", "rho_min", "probe_delta"], ["rounds"]),
    ("holdout: {split: {fraction: 0.5}}\n", "holdout.split.fraction", ["holdout_fraction", "seed"], ["benchmark"]),
    ("roles: {}\nexecutor: {kind: local, workerz: 2}\n", "executor.workerz", ["num_workers", "kind"], ["workers"]),
])
def test_a_misspelt_key_lists_the_valid_keys_at_its_level(text, where, valid, not_valid, capsys, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(f"stores: {tmp_path / 'stores'}\n{text}")
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    keys = out[out.index("valid keys here: "):].split(": ", 1)[1].strip().split(", ")
    assert code == 2 and f": {where}: Extra inputs are not permitted; valid keys here: " in out, out
    assert set(valid) <= set(keys) and not set(not_valid) & set(keys)


# ---------------------------------------------------------------- one rule for config and stores


def test_read_commands_follow_the_run_config(finished, capsys, monkeypatch, tmp_path):
    config, _, _ = finished
    stores = config.parent / "stores"
    records = History(stores).records
    monkeypatch.chdir(tmp_path)  # no experiments/nightly.yaml here
    code, by_stores = cli(capsys, "candidates", "--stores", stores)
    assert code == 0 and all(r.candidate_id in by_stores for r in records)
    assert cli(capsys, "candidates", "--config", config) == (0, by_stores)
    code, out = cli(capsys, "candidates")
    assert code == 2 and "error: stores: not a stores directory" in out  # no config: stores/ here
    monkeypatch.setenv("MEMEVOLVE_CONFIG", str(config))
    assert cli(capsys, "candidates") == (0, by_stores)
    for record in records:
        code, out = cli(capsys, "show", record.candidate_id)
        assert code == 0 and out.startswith(f"candidate {record.candidate_id} (round 1)")
    code, out = cli(capsys, "journal", "verify")
    assert code == 0 and out.startswith(f"ok: {len(History(stores).entries)} entries")
    assert cli(capsys, "report", "--out", tmp_path / "report.html")[0] == 0
    assert f"stores <code>{stores}</code>" in (tmp_path / "report.html").read_text()
    code, out = cli(capsys, "serving", "--path", config.parent / "strategies" / "start.yaml")
    assert code == 0 and "untracked" in out and "note:" not in out  # the stores were found
    code, out = cli(capsys, "rollback", "--target", tmp_path / "serving.yaml", "--allow-outside")
    assert code == 1 and "the journal has no promotion of it" in out, out  # read the config's journal
    code, out = cli(capsys, "candidates", "--stores", tmp_path / "none")  # --stores wins over the config
    assert code == 2 and f"{tmp_path / 'none'}: not a stores directory" in out


def test_a_finished_config_says_how_to_run_more(finished, capsys):
    config, _, _ = finished
    code, out = cli(capsys, "run", "--config", config, "--no-tracking", "--json")
    assert code == 0 and "0 rounds run; the config's 1 rounds are done; --rounds N runs more" in out
    assert json.JSONDecoder().raw_decode(out, out.index("{"))[0]["rounds"] == 1


def test_progress_lines_on_a_terminal_only(finished, tmp_path):
    _, _, quiet = finished
    assert "(1 of at most 1 in this run)" not in quiet.stderr  # the fixture's stderr was a pipe
    config = project(tmp_path)
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "run", "--config", str(config), "--no-tracking"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=300) == 0
    os.close(leader)
    err = b"".join(chunks).decode(errors="replace")
    assert "round 1 (1 of at most 1 in this run): observing the current strategy" in err, err[-2000:]
    assert "round 1: current accuracy " in err and "round 1 committed in " in err
    for record in History(config.parent / "stores").records:
        assert f"  candidate {record.candidate_id} {record.direction['key']}: {record.verdict}" in err


# ---------------------------------------------------------------- eval --out


def test_eval_never_overwrites_silently(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ("eval", "--bench", "synthetic:0", "--limit", "5", "--cache", "")
    assert cli(capsys, *args)[0] == 0
    assert cli(capsys, *args)[0] == 0
    made = sorted((tmp_path / "runs").iterdir())
    assert len(made) == 2 and all(p.name.startswith("eval-") and (p / "summary.json").is_file() for p in made)
    out_dir = made[0]
    before = (out_dir / "summary.json").read_bytes()
    (out_dir / "notes.txt").write_text("mine")
    code, out = cli(capsys, *args, "--out", out_dir)
    assert code == 2 and f"--out {out_dir}: directory exists and is not empty" in out and "--force" in out
    assert (out_dir / "summary.json").read_bytes() == before
    code, out = cli(capsys, *args, "--out", out_dir, "--force")
    assert code == 0 and (out_dir / "notes.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    assert cli(capsys, *args, "--out", tmp_path / "empty")[0] == 0


# ---------------------------------------------------------------- labels, lineage, journal verify


def test_summary_and_report_labels_follow_the_objective(finished, capsys, tmp_path):
    config, objective, proc = finished
    field, label = {"accuracy": ("accuracy", "accuracy"),
                    "evidence": ("all_evidence_packed", "all evidence packed")}[objective]
    rows = json.loads(run_summary(config).read_text())["current_vs_baseline"]["per_category"]
    assert set(rows["single_hop"]) == {"n", f"{field}_baseline", f"{field}_candidate", "delta"}
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    assert cli(capsys, "report", "--config", config, "--out", html, "--markdown", md)[0] == 0
    header = next(line for line in md.read_text().splitlines() if line.startswith("| strategy |"))
    assert header == (f"| strategy | hash | {label} (objective) |" + (" accuracy |" if objective != "accuracy" else "")
                      + " safe rate |")  # the runs made answers, so their safe rate is shown
    assert f"<!-- {label[0].upper()}{label[1:]} by category vs baseline" in html.read_text()
    code, out = cli(capsys, "show", "r001-c00", "--config", config)
    assert code == 0
    if "paired comparison on" in out:
        assert f"questions ({label}): parent" in out
    assert f"probe: 4 questions ({label})" in out or "probe: not run" in out


def test_serving_shows_the_lineage_of_a_promoted_strategy(capsys, stores, tmp_path, monkeypatch):
    serving = tmp_path / "serving" / "serving.yaml"
    serving.parent.mkdir()
    monkeypatch.setenv("MEMEVOLVE_SERVING_DIR", str(serving.parent))
    assert cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)[0] == 0
    code, out = cli(capsys, "serving", "--path", serving, "--stores", stores)
    assert code == 0 and "lineage      baseline v1 + r002-c00 (1 accepted change(s))" in out, out
    code, out = cli(capsys, "serving", "--path", BASELINE_PATH, "--stores", stores)
    assert "lineage      baseline v1 (no evolved change in these stores)" in out


def test_journal_verify_first_line_is_the_verdict(capsys, stores, tmp_path, monkeypatch):
    serving = tmp_path / "serving" / "serving.yaml"
    serving.parent.mkdir()
    monkeypatch.setenv("MEMEVOLVE_SERVING_DIR", str(serving.parent))
    assert cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)[0] == 0
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code == 0 and out.startswith("ok: ")
    serving.write_text(serving.read_text().replace("top_k: 7", "top_k: 9"))  # hand-edited in production
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    first = out.splitlines()[0]
    assert code == 1 and first.startswith("verification failed: 1 serving file(s) do not match the journal (drift)")
    assert "ok" not in first.split(";")[0]


# ---------------------------------------------------------------- benchmark format errors


def test_a_category_of_the_wrong_type_says_what_is_expected(capsys, tmp_path):
    path = tiny_locomo(tmp_path / "bench.json")
    data = json.loads(path.read_text())
    data[0]["qa"][1]["category"] = "4"
    path.write_text(json.dumps(data))
    code, out = cli(capsys, "eval", "--bench", f"locomo:{path}", "--out", tmp_path / "eval")
    assert code == 2 and ("sample 0 (s1).qa[1]: field 'category' has type str; expected an integer 1-5 "
                          "(1 multi_hop, 2 temporal, 3 open_domain, 4 single_hop, 5 adversarial)") in out, out


# ---------------------------------------------------------------- --help


def test_help_imports_no_heavy_dependency():
    code = ("import sys; from evolve.cli.main import build_parser; build_parser().format_help(); "
            "print(sorted(m for m in ('openai', 'scipy', 'mlflow', 'torch', 'optuna', 'sentence_transformers', "
            "'numpy') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                yield from ((f"{name} {n}", s) for n, s in _subparsers(sub))


def test_every_option_has_help_and_the_description_is_plain_text():
    parser = build_parser()
    assert "`" not in parser.description
    missing = [f"{name} {a.option_strings or a.dest}" for name, sub in _subparsers(parser) for a in sub._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not a.help]
    assert missing == []
    subs = dict(_subparsers(parser))
    assert "lifecycle:SEED[:PERSONAS]" in subs["eval"].format_help()
    out_help = next(a.help for a in subs["eval"]._actions if "--out" in a.option_strings)
    assert "runs/eval-YYYYMMDD-HHMMSS" in out_help
    assert "$MEMEVOLVE_CONFIG" in subs["candidates"].format_help()


def test_choices_listed_without_imports_match_their_sources():
    from evolve.cli.workflow import DECISION_CHOICES
    from evolve.llm.local import MODELS
    from evolve.ops.review import DECISIONS

    assert sorted(DECISION_CHOICES) == sorted(DECISIONS)
    model = next(a for a in dict(_subparsers(build_parser()))["local-llm"]._actions if "--model" in a.option_strings)
    assert list(model.choices) == sorted(MODELS) and "smollm2" in model.choices and "nope" not in model.choices


# ---------------------------------------------------------------- eval: a table, or the JSON


def test_eval_prints_a_table_or_with_json_the_full_summary(capsys, tmp_path):
    args = ("eval", "--bench", "synthetic:0:2", "--limit", 12, "--cache", "")
    code = main([str(a) for a in (*args, "--out", tmp_path / "json", "--json", "--summary-out", tmp_path / "s.json")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)  # stdout is the JSON alone; where it was written goes to stderr
    assert f"wrote {tmp_path / 'json' / 'summary.json'}" in captured.err
    assert summary == json.loads((tmp_path / "s.json").read_text()) == \
        json.loads((tmp_path / "json" / "summary.json").read_text())
    code, out = cli(capsys, *args, "--out", tmp_path / "table")
    assert code == 0 and "{" not in out, out
    header, *rows = out.splitlines()
    assert header.split()[:3] == ["category", "n", "accuracy"]
    table = next(r for r in rows if r.startswith("all "))
    assert table.split()[1:3] == [str(summary["n_scored"]), f"{summary['accuracy']:.3f}"]
