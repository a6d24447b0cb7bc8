"""``memevolve gate``: the decision contract on two trace files, journaled in a gate store that show, candidates,
report, journal verify and escalations read; bad input exits 2 with nothing journaled; on our own runtime's traces it
reproduces the decisions the loop recorded."""
from __future__ import annotations

import importlib.util
import json
import tracemalloc
from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.ops.history import History
from evolve.state.bundle import RoundBundle
from evolve.state.stores import StoreSet

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gate_scale", ROOT / "experiments" / "bench" /
                                                  "bench_gate_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: One sample of a constructed trace file: all six stages (``full``) or the judge's verdict alone; the gate benchmark
#: builds its files from the same records.
sample = _bench().record


def write(path: Path, samples: list[dict]) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    return path


@pytest.fixture
def files(tmp_path):
    base = write(tmp_path / "base.jsonl", [sample(i, i % 3 == 0) for i in range(80)])
    cand = write(tmp_path / "cand.jsonl", [sample(i, i % 3 == 0 or i % 4 == 0 or i % 5 == 0) for i in range(80)])
    return base, cand


def gate(tmp_path, *args) -> int:
    """``memevolve gate`` into the test's gate store; ``--no-hypothesis`` unless the arguments say otherwise."""
    said = {"--hypothesis", "--predict", "--no-hypothesis"} & set(map(str, args))
    return main(["gate", *map(str, args), *([] if said else ["--no-hypothesis"]), "--stores", str(tmp_path / "gate")])


def test_a_verdict_is_journaled_and_read_like_a_candidate(tmp_path, files, capsys):
    assert gate(tmp_path, *files) == 0
    out = capsys.readouterr().out
    assert out.startswith("gate-0001: ACCEPT (rule accept)") and "DCR@3 1.000" in out
    assert gate(tmp_path, *files, "--hypothesis", "fewer misses on dates", "--predict",
                "retrieval_gap/temporal") == 0
    assert "hypothesis_mismatch" in capsys.readouterr().out
    stores = tmp_path / "gate"
    records = History(stores).records
    assert [(r.candidate_id, str(r.verdict), r.decision.rule) for r in records] == [
        ("gate-0001", "ACCEPT", "accept"), ("gate-0002", "FEATURE_FLAG", "hypothesis_mismatch")]
    assert records[1].hypothesis.category == "retrieval_gap/temporal"
    assert records[1].direction["why"] == "fewer misses on dates"
    assert main(["show", "gate-0001", "--stores", str(stores)]) == 0
    shown = capsys.readouterr().out
    assert "not promotable: no strategy file (a memevolve gate verdict" in shown
    improved = records[0].paired.improved
    assert improved and f"improved questions ({min(len(improved), 25)} of {len(improved)} shown)" in shown
    assert f"[{improved[0]}]" in shown and "schema ?" not in shown
    assert main(["show", "gate-0002", "--stores", str(stores)]) == 0
    assert "hypothesis mismatch: predicted retrieval_gap/temporal down: 13 -> 10 of 20 questions (-0.1500; 3 left, 0 entered, exact McNemar p=0.25" in capsys.readouterr().out
    assert main(["journal", "verify", "--stores", str(stores)]) == 0
    assert "2 candidate records match their journaled decisions" in capsys.readouterr().out
    assert main(["report", "--stores", str(stores), "--out", str(tmp_path / "r.html")]) == 0
    assert "gate-0002" in (tmp_path / "r.html").read_text()


def test_a_results_only_log_cannot_be_diagnosed(tmp_path):
    base = write(tmp_path / "b.jsonl", [sample(i, i % 3 == 0, "results") for i in range(80)])
    cand = write(tmp_path / "c.jsonl", [sample(i, i % 3 == 0 or i % 4 == 0 or i % 5 == 0, "results")
                                        for i in range(80)])
    assert gate(tmp_path, base, cand) == 0
    record = History(tmp_path / "gate").records[0]
    assert record.dcr == 0.0 and (str(record.verdict), record.decision.rule) == ("FEATURE_FLAG", "dcr_floor")


def test_bad_input_exits_2_with_nothing_journaled(tmp_path, files, capsys):
    base, cand = files
    fewer = write(tmp_path / "fewer.jsonl", [sample(i, True) for i in range(3, 81)])
    dup = write(tmp_path / "dup.jsonl", [sample(i, True) for i in (*range(80), 7)])
    mixed = write(tmp_path / "mixed.jsonl", [sample(0, True), {**sample(1, True), "trace_version": "2"}])
    noid = write(tmp_path / "noid.jsonl", [sample(0, True), {k: v for k, v in sample(1, True).items() if k != "id"}])
    mem0 = write(tmp_path / "mem0.jsonl", [{"id": "q0", "category": "temporal", "search": {"results": [{"id": "x"}]}}])
    cases = [((base, fewer), "3 only in .*base.jsonl: q0, q1, q2; 1 only in .*fewer.jsonl: q80"),
             ((base, dup), "dup.jsonl:81: duplicate id 'q7' \\(first at .*dup.jsonl:8\\)"),
             ((mixed, cand), "mixed.jsonl:2: trace_version '2' differs from '1' on line 1"),
             ((noid, cand), "noid.jsonl:2: \\(record\\): 'id' is a required property"),
             ((mem0, mem0, "--adapter", "mem0"),
              r"mem0.jsonl:1: the mem0 adapter cannot read this line: KeyError\('memory'\)"),
             ((base, tmp_path / "absent.jsonl"), "absent.jsonl"),
             ((base, cand, "--hypothesis", "h", "--predict", "retrieval_gap/lifecycle:up"),
              "no sample has category 'lifecycle'"),
             ((base, cand), "a gate run needs --hypothesis TEXT and --predict"),
             ((base, cand, "--hypothesis", "h"), "a gate run needs --hypothesis TEXT and --predict"),
             ((base, cand, "--no-hypothesis", "--predict", "generation_error"), "--no-hypothesis: leave out")]
    import re
    for args, message in cases:
        code = (main(["gate", *map(str, args), "--stores", str(tmp_path / "gate")]) if "needs" in message
                else gate(tmp_path, *args))
        assert code == 2, args
        err = capsys.readouterr().err
        assert re.search(message, err), err
    with pytest.raises(SystemExit) as exc:
        gate(tmp_path, base, cand, "--hypothesis", "h", "--predict", "temporal")
    assert exc.value.code == 2 and "'temporal' is not a root cause" in capsys.readouterr().err
    assert not (tmp_path / "gate").exists()


def test_a_100_mb_file_is_streamed_and_its_bad_last_line_refused(tmp_path, files, capsys):
    """Bounded memory over the whole file, then exit 2 naming the last line, nothing journaled."""
    big, n, text = tmp_path / "big.jsonl", 0, "word " * 4000
    with big.open("w") as fh:
        while fh.tell() < 100 * 2**20:
            fh.write(json.dumps({**sample(n, n % 2 == 0), "retrieved": [
                {"id": f"m{n}-{k}", "rank": k + 1, "text": f"{n} {k} {text}"} for k in range(5)]}) + "\n")
            n += 1
        fh.write(json.dumps(sample(0, True)) + "\n")
    assert gate(tmp_path, tmp_path / "absent.jsonl", files[1]) == 2  # imports the gate before memory is traced
    capsys.readouterr()
    tracemalloc.start()
    try:
        code = gate(tmp_path, big, files[1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 2
    assert f"big.jsonl:{n + 1}: duplicate id 'q0' (first at {big}:1)" in capsys.readouterr().err
    assert peak < 32 * 2**20, f"peak {peak / 2**20:.1f} MiB reading a {big.stat().st_size / 2**20:.0f} MiB file"
    assert not (tmp_path / "gate").exists()


def test_a_gate_run_answers_an_escalation(tmp_path, files, capsys):
    loop = tmp_path / "loop"
    with StoreSet(loop) as stores:
        bundle = RoundBundle(docs={"escalations": {"blocked": {"retrieval.top_k::up": {"count": 3, "rounds": [1]}},
                                                   "escalated": ["retrieval.top_k::up"]}},
                             journal=[("ESCALATE", {"key": "retrieval.top_k::up", "count": 3, "rounds": [1]})])
        stores.commit_round(1, bundle)
    config = tmp_path / "run.yaml"
    config.write_text(f"benchmark: synthetic:0\nstores: {loop}\n")
    assert main(["gate", *map(str, files), "--rules", str(config), "--answers", "retrieval.top_k::down",
                 "--no-hypothesis"]) == 2
    assert "no such escalation (known: retrieval.top_k::up)" in capsys.readouterr().err
    assert main(["gate", *map(str, files), "--rules", str(config), "--answers", "retrieval.top_k::up",
                 "--no-hypothesis"]) == 0
    assert History(loop / "gate").records[0].symptom == "retrieval.top_k::up"
    capsys.readouterr()
    assert main(["escalations", "--stores", str(loop)]) == 0
    assert "answered by gate gate-0001 (ACCEPT)" in capsys.readouterr().out


def test_gate_reproduces_every_decision_of_a_small_run(tmp_path):
    spec = importlib.util.spec_from_file_location("gate_reproduces", ROOT / "experiments" / "bench" /
                                                  "gate_reproduces.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    config = tmp_path / "run.yaml"
    config.write_text(f"benchmark: synthetic:0\nstores: {tmp_path / 'stores'}\nlimit: 40\nprobe_size: 15\n"
                      "candidates_per_round: 3\nobjective: answer\nacceptance:\n  require_significance: false\n"
                      "  secondary: evidence\n")
    rows = script.reproduce(config, tmp_path / "out", rounds=1)
    compared = [row for row in rows if row["same"] is not None]
    assert compared and all(row["same"] for row in compared), rows


def test_two_configurations_of_an_external_system_are_gated(tmp_path, capsys):
    """Strategies evaluated under a run config's external system (experiments/bench/eval_strategies.py) give trace
    files the gate decides on, journaled in the config's gate store."""
    import yaml
    from evolve.strategy.schema import activate
    from external_fixtures import BASELINE, write_system

    spec = importlib.util.spec_from_file_location("eval_strategies", ROOT / "experiments" / "bench" /
                                                  "eval_strategies.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    config = write_system(tmp_path / "ext")
    wider = tmp_path / "wider.yaml"
    wider.write_text(yaml.safe_dump({**BASELINE, "name": "wider", "recall": {"top_k": 2}}))
    out = tmp_path / "eval"
    try:
        assert script.main(["--config", str(config), "--out", str(out), f"base={config.parent / 'knobs.yaml'}",
                            f"wider={wider}"]) == 0
        with pytest.raises(SystemExit):  # traces written before are not replaced
            script.main(["--config", str(config), "--out", str(out), f"base={wider}"])
    finally:
        activate(None)  # the run config made the knob schema the process's strategy schema
    captured = capsys.readouterr()
    assert f"already written, not replaced: {out / 'base'}" in captured.err
    printed = captured.out
    assert "base: answer " in printed and "wider: answer " in printed and "120 traces" in printed
    traces = [out / name / "traces.jsonl" for name in ("base", "wider")]
    assert main(["gate", *map(str, traces), "--adapter", "memevolve", "--rules", str(config),
                 "--no-hypothesis"]) == 0
    record = History(config.parent / "stores" / "gate").records[0]
    summaries = [json.loads((out / name / "summary.json").read_text()) for name in ("base", "wider")]
    assert (str(record.verdict), record.decision.rule) == ("ACCEPT", "accept")  # one recalled item misses most
    assert record.paired.n == summaries[0]["n_answer_known"] == summaries[1]["n_answer_known"]
    assert (record.paired.acc_baseline, record.paired.acc_candidate) == pytest.approx(
        [s["answer_in_evidence"] for s in summaries], abs=1e-4)



def test_accuracy_needs_a_valid_judge_on_every_scored_sample(tmp_path, files, capsys):
    """A missing or invalid judge is not a wrong answer: exit 2 counting the samples, nothing journaled."""
    base, _ = files
    judged = [sample(i, i % 2 == 0) for i in range(80)]
    unjudged = write(tmp_path / "unjudged.jsonl", [{k: v for k, v in s.items() if k != "judge"} for s in judged])
    invalid = write(tmp_path / "invalid.jsonl", [{**s, "judge": {"correct": "yes"}} if i < 5 else s
                                                 for i, s in enumerate(judged)])
    for cand, words in ((unjudged, f"80 of 80 scored sample(s) in {unjudged}: q0, q1, q10"),
                        (invalid, f"5 of 80 scored sample(s) in {invalid}: q0, q1, q2, q3, q4 have no valid one")):
        assert gate(tmp_path, base, cand) == 2
        err = capsys.readouterr().err
        assert "objective accuracy needs every scored sample's judge" in err and words in err, err
    assert not (tmp_path / "gate").exists()
    unscored = write(tmp_path / "unscored.jsonl", [{**s, "scored": False} if i < 5 else s
                                                   for i, s in enumerate(json.loads(line) for line in
                                                                         invalid.read_text().splitlines())])
    base_unscored = write(tmp_path / "base_unscored.jsonl", [{**sample(i, i % 3 == 0), "scored": i >= 5}
                                                             for i in range(80)])
    assert gate(tmp_path, base_unscored, unscored) == 0, capsys.readouterr().err  # unscored samples need none
    config = tmp_path / "answer.yaml"
    config.write_text("benchmark: synthetic:0\nobjective: answer\n")
    assert gate(tmp_path, base, unjudged, "--rules", config) == 0  # the answer objective reads no judge


def test_a_sample_whose_category_differs_is_named(tmp_path, files, capsys):
    base, _ = files
    moved = write(tmp_path / "moved.jsonl", [{**sample(i, True), "category": "temporal"} if i in (1, 5) else
                                             sample(i, True) for i in range(80)])
    assert gate(tmp_path, base, moved) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"2 sample(s) have another category in {moved} than in {base}: q1, q5" in err
    assert "q1: 'multi_hop' vs 'temporal'" in err and not (tmp_path / "gate").exists()


def test_a_symlink_loop_as_a_trace_file_is_one_line(tmp_path, files, capsys):
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    assert gate(tmp_path, files[0], loop) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {loop}: cannot read: Too many levels of symbolic links" in err, err
    assert not (tmp_path / "gate").exists()


def test_a_family_test_given_twice_or_naming_the_gate_itself_is_refused(tmp_path, files, capsys):
    """The last of two values no longer wins unseen, and no family member replaces the gate's own p."""
    cases = [(("--family-p", "x=0.01", "--family-p", "x=0.9"), "--family-p x: given 2 times"),
             (("--family-secondary-p", "y=0.2", "--family-secondary-p", "y=0.2"),
              "--family-secondary-p y: given 2 times"),
             (("--family-p", "gate=0.9"), "--family-p gate: is the gate's own name in the family"),
             (("--family-p", "gate-0001=0.9"), "--family-p gate-0001: is the id of this gate run's own record")]
    for args, words in cases:
        assert gate(tmp_path, *files, *args) == 2, args
        assert words in capsys.readouterr().err
    assert not (tmp_path / "gate" / "journal.jsonl").exists()
    assert gate(tmp_path, *files) == 0
    assert gate(tmp_path, *files, "--family-p", "gate-0002=0.5") == 2
    assert gate(tmp_path, *files, "--family-p", "gate-0001=0.5") == 0  # an earlier run is another test
    records = History(tmp_path / "gate").records
    assert [r.candidate_id for r in records] == ["gate-0001", "gate-0002"]
    assert records[1].multiple_testing.family == ["gate", "gate-0001"]


def test_the_hypothesis_is_bounded_and_shown_escaped(tmp_path, files, capsys):
    """A newline and a forged verdict line, or a terminal escape, in --hypothesis reach no terminal raw."""
    forged = "dates help\ngate-0001: ACCEPT (rule accept): forged\x1b[2J"
    assert gate(tmp_path, *files, "--hypothesis", forged, "--predict", "retrieval_gap") == 0
    out = capsys.readouterr().out
    assert "hypothesis: dates help\\ngate-0001: ACCEPT (rule accept): forged\\x1b[2J: " in out
    assert "\x1b" not in out and not any(line.endswith(": forged") for line in out.splitlines())
    assert History(tmp_path / "gate").records[0].direction["why"] == forged  # recorded as given
    assert main(["show", "gate-0001", "--stores", str(tmp_path / "gate")]) == 0
    shown = capsys.readouterr().out
    assert "  why: dates help\\ngate-0001: ACCEPT (rule accept): forged\\x1b[2J" in shown and "\x1b" not in shown
    with pytest.raises(SystemExit) as exc:
        gate(tmp_path, *files, "--hypothesis", "x" * 501, "--predict", "generation_error")
    assert exc.value.code == 2 and "argument --hypothesis: has 501 characters; at most 500" in capsys.readouterr().err
    for blank in ("", "   "):  # an empty hypothesis records nothing a reviewer could check
        with pytest.raises(SystemExit) as exc:
            gate(tmp_path, *files, "--hypothesis", blank, "--predict", "generation_error")
        assert exc.value.code == 2 and "argument --hypothesis:" in capsys.readouterr().err
    assert len(History(tmp_path / "gate").records) == 1


def test_a_named_family_re_decides_its_earlier_members(tmp_path, capsys):
    """Alone the weak gain (8 improved, 1 regressed; p = 0.039) is accepted; a second member of the family halves
    its Holm level, and the first is re-decided FEATURE_FLAG in the same commit (REDECIDE)."""
    base = write(tmp_path / "wb.jsonl", [sample(i, i % 2 == 0) for i in range(200)])
    cand = write(tmp_path / "wc.jsonl", [sample(i, (i % 2 == 0 and i != 0) or i in range(1, 17, 2))
                                         for i in range(200)])
    assert gate(tmp_path, base, cand, "--family", "release-1") == 0
    assert "gate-0001: ACCEPT" in capsys.readouterr().out
    assert gate(tmp_path, base, cand, "--family", "release-1") == 0
    out = capsys.readouterr().out
    assert "gate-0002: FEATURE_FLAG (rule inconclusive)" in out and "holm-adjusted p=0.07812 over 2" in out
    assert "re-decided gate-0001: ACCEPT -> FEATURE_FLAG (rule inconclusive, adjusted p=0.07812)" in out
    stores = tmp_path / "gate"
    entry = History(stores).entries[-1]
    assert entry.type == "REDECIDE" and entry.round == 2
    assert entry.payload.candidate_id == "gate-0001" and entry.payload.by == "gate-0002"
    assert gate(tmp_path, base, cand, "--family", "release-1") == 0  # no verdict changes again: nothing journaled
    assert [e.type for e in History(stores).entries].count("REDECIDE") == 1
    assert gate(tmp_path, base, cand, "--family", "other") == 0 and "gate-0004: ACCEPT" in capsys.readouterr().out
    assert main(["journal", "verify", "--stores", str(stores)]) == 0
    assert gate(tmp_path, base, cand, "--family", "x", "--family-p", "a=0.1") == 2
    assert "leave out --family-p" in capsys.readouterr().err


def test_sweep_lists_the_decisions_that_flip_and_the_report_catalogs_anti_patterns(tmp_path, files, capsys):
    base, cand = files
    weak = write(tmp_path / "weak.jsonl", [sample(i, i % 3 == 0 or i in (1, 2, 4, 5, 7, 8)) for i in range(80)])
    assert gate(tmp_path, base, cand) == 0 and gate(tmp_path, base, weak) == 0
    stores = tmp_path / "gate"
    assert main(["sweep", "--stores", str(stores), "--alphas", "0.005", "0.05", "--epsilons", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "2 fully compared record(s) re-decided" in out and "1 flip somewhere on the grid" in out
    assert "gate-0002 at alpha 0.005, epsilon 0.02: ACCEPT (accept) -> FEATURE_FLAG (inconclusive)" in out
    assert "gate-0001 at" not in out  # p = 9.5e-7: stable over the grid
    worse = write(tmp_path / "worse.jsonl", [sample(i, False) for i in range(80)])
    other = tmp_path / "other"
    for _ in range(2):
        assert main(["gate", str(base), str(worse), "--no-hypothesis", "--stores", str(other)]) == 0
    assert main(["report", "--stores", str(other), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    section = page[page.index("<h2 id='anti-patterns'>"):page.index("<h2 id='candidates'>")]
    assert "<code>gate</code></td><td class=\"num\">2</td><td class=\"num\">2</td>" in section, section
    assert "significant_harm 2" in section and "examples of <code>gate</code>" in section


def test_a_change_only_ever_flagged_is_no_anti_pattern_and_one_a_refused_night_undid_is(tmp_path):
    from types import SimpleNamespace as NS

    from evolve.loop.night import NightRecord
    from evolve.ops.antipatterns import catalog
    from evolve.state.content import ContentStore
    from evolve.verify.decision import Verdict

    def record(cid: str, key: str, verdict: Verdict, rule: str, delta: float) -> NS:
        return NS(candidate_id=cid, round=int(cid[1:4]), direction={"key": key}, verdict=verdict, probe=None,
                  paired=object(), decision=NS(rule=rule), symptom="retrieval_gap/*", delta=delta, examples=None)

    records = [
        record("r001-c00", "retrieval.top_k::increase", Verdict.FEATURE_FLAG, "inconclusive", 0.004),
        record("r001-c01", "assembly.replies::increase", Verdict.REJECT, "significant_harm", -0.05),
        record("r002-c00", "assembly.replies::increase", Verdict.FEATURE_FLAG, "inconclusive", 0.0),
        record("r002-c01", "retrieval.weights.bm25::increase", Verdict.REJECT, "significant_harm", -0.03),
        record("r003-c00", "retrieval.weights.bm25::increase", Verdict.ACCEPT, "accept", 0.04),
        record("r005-c00", "assembly.unit::set:turn", Verdict.ACCEPT, "accept", 0.02)]
    night = NightRecord(ended="patience", first_round=4, last_round=6, rounds=3, evaluations=9, start="a", final="b",
                        diff={}, restored="a")
    view = NS(content=ContentStore(tmp_path / "content"), records=records, nights=[])
    assert [(a.change, a.tried, a.rejected, a.reverted, a.flagged) for a in catalog(view)] == [
        ("assembly.replies::increase", 2, 1, 0, 1)]
    view.nights = [(7, night)]
    assert [(a.change, a.rejected, a.reverted) for a in catalog(view)] == [
        ("assembly.replies::increase", 1, 0), ("assembly.unit::set:turn", 0, 1)]
