"""``memevolve review``: the review page of a verdict's discordant questions (rendered in headless Chromium), label
export and import, reviewers' agreement, and confirmed labels in the next round's planning input."""
from __future__ import annotations

import csv
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.loop.config import load_config
from evolve.loop.engine import Engine
from evolve.observe.labels import Label, read_labels, write_labels
from evolve.ops.audit import agreement, journal_labels
from evolve.ops.history import History

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from workflow_fixtures import write_config  # noqa: E402


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sample = _module(ROOT / "experiments" / "bench" / "bench_gate_scale.py").record
render = _module(ROOT / "experiments" / "render_report.py")


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _candidate(i: int) -> dict:
    """The candidate's sample ``i``: right where the base is, and on every fourth and fifth sample, except sample 3
    (a regression); samples 20-39 record the judgment and the packed context only."""
    row = sample(i, i != 3 and (i % 3 == 0 or i % 4 == 0 or i % 5 == 0))
    if 20 <= i < 40:
        for stage in ("stored", "retrieved", "filtered"):
            row.pop(stage)
    return row


@pytest.fixture(scope="module")
def verdict(tmp_path_factory) -> dict:
    """A gate verdict on two trace files and its review page."""
    tmp = tmp_path_factory.mktemp("review")
    base = _write(tmp / "base.jsonl", [sample(i, i % 3 == 0) for i in range(80)])
    cand = _write(tmp / "cand.jsonl", [_candidate(i) for i in range(80)])
    stores = tmp / "gate"
    assert main(["gate", str(base), str(cand), "--no-hypothesis", "--stores", str(stores)]) == 0
    page = tmp / "review-gate-0001.html"
    assert main(["review", "gate-0001", "--stores", str(stores), "--out", str(page)]) == 0
    record = History(stores).record("gate-0001")
    return {"tmp": tmp, "stores": stores, "page": page, "text": page.read_text(), "record": record,
            "base": base, "cand": cand}


def _sections(text: str) -> list[str]:
    return re.findall(r"<section class=.disc.*?</section>", text, re.S)


def test_the_page_shows_every_discordance_with_both_sides_stages(verdict):
    text, p = verdict["text"], verdict["record"].paired
    assert p.regressed == ["q3"] and len(p.improved) > 10
    sections = _sections(text)
    assert len(sections) == len(p.improved) + len(p.regressed)
    assert re.findall(r"data-qid='([^']+)'", text) == p.regressed + p.improved
    for section in sections:
        assert "side wrong parent" in section or "side right parent" in section
        assert "class='packed'" in section and section.count("<table class='packed'>") == 2
        assert "root cause of the" in section and "<select class='label'>" in section
    first = sections[0]  # q3: the candidate packs "other" where the parent packed the gold answer
    assert "parent right, candidate wrong" in first and "<mark>answer</mark> <mark>3</mark>" in first
    assert "candidate: <span class='cause'>retrieval_gap</span>" in first and "<b>D1:3</b>" in first
    assert "data-cause-candidate='retrieval_gap'" in first and "data-cause-parent=''" in first
    late = next(s for s in sections if "data-qid='q20'" in s)  # the candidate recorded no retrieval there
    parent, candidate = late.split("<div class='side", 2)[1:]
    assert "<details><summary>retrieved: 1 items" in parent and "retrieval: not recorded in this trace" in candidate
    assert "filter decisions: not recorded" in candidate and "stored items from the gold turns: not recorded" in candidate
    assert not re.search(r"<(?:script|img|link|iframe)\b[^>]*(?:src|href)=", text)  # self-contained
    assert f"{len(sections)} discordances; labelled (confirmed) 0" in text


def test_the_page_renders_and_filters_in_headless_chromium(verdict, tmp_path):
    chromium = render.find_chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium); the render check needs a headless browser")
    page, p = verdict["page"], verdict["record"].paired
    png = tmp_path / "review.png"
    render.screenshot(page, png, chromium)
    stats, problems = render.check_png(png)
    assert problems == [], (stats, problems)  # ink in every band, coloured marks (gold rows, answer words)
    n = len(p.improved) + len(p.regressed)
    dom = render.rendered_dom(page, chromium)
    assert f'data-shown="{n}">{n} of {n} discordances shown' in dom
    assert len(re.findall(r'<section class="disc"', dom)) == n and 'class="packed"' in dom
    categories = dict(re.findall(r"data-qid='([^']+)' data-category='([^']+)'", verdict["text"]))
    temporal = sorted(q for q, c in categories.items() if c == "temporal")
    dom = render.rendered_dom(page, chromium, "category=temporal")
    assert f'data-shown="{len(temporal)}">{len(temporal)} of {n}' in dom
    shown = re.findall(r'<section class="disc" id="q-([^"]+)"(?![^>]*hidden)', dom)
    assert sorted(shown) == temporal
    dom = render.rendered_dom(page, chromium, "cause=retrieval_gap&direction=regressed")
    assert re.findall(r'<section class="disc" id="q-([^"]+)"(?![^>]*hidden)', dom) == ["q3"]


def test_labels_are_exported_edited_and_imported_into_the_journal(verdict, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # journal verify looks for experiments/mlflow.db here
    stores = tmp_path / "gate"
    import shutil

    shutil.copytree(verdict["stores"], stores)
    exported = tmp_path / "labels.csv"
    assert main(["review", "gate-0001", "--stores", str(stores), "--export-labels", str(exported)]) == 0
    labels = read_labels(exported)
    assert [label.question_id for label in labels] == verdict["record"].paired.regressed + \
        verdict["record"].paired.improved
    assert all(label.label == label.ladder and not label.confirmed for label in labels)
    with exported.open() as fh:
        assert next(csv.reader(fh))[:4] == ["candidate_id", "question_id", "category", "direction"]
    edited = [Label.model_validate({**labels[0].model_dump(), "label": "kf_filtered", "confirmed": True,
                                    "reviewer": "ana"}),
              Label.model_validate({**labels[1].model_dump(), "confirmed": True, "reviewer": "ana"}), *labels[2:]]
    jsonl = tmp_path / "edited.jsonl"
    write_labels(jsonl, edited)
    assert main(["review", "gate-0001", "--stores", str(stores), "--import-labels", str(jsonl)]) == 0
    assert "imported 2 confirmed label(s) of gate-0001 (1 correct the ladder)" in capsys.readouterr().out
    entry = History(stores).entries[-1]
    assert entry.type == "LABELS" and [x.question_id for x in entry.payload.labels] == ["q3", labels[1].question_id]
    assert main(["journal", "verify", "--stores", str(stores)]) == 0
    again = tmp_path / "again.csv"
    assert main(["review", "gate-0001", "--stores", str(stores), "--export-labels", str(again)]) == 0
    assert read_labels(again)[:2] == edited[:2]  # the page and the export start from the imported labels
    page = tmp_path / "page.html"
    assert main(["review", "gate-0001", "--stores", str(stores), "--out", str(page)]) == 0
    first = _sections(page.read_text())[0]
    assert "<option value='kf_filtered' selected>" in first and "class='confirmed' checked" in first


def test_a_bad_label_file_is_refused_with_its_line_and_nothing_is_journaled(verdict, tmp_path, capsys):
    stores, exported = verdict["stores"], tmp_path / "labels.csv"
    assert main(["review", "gate-0001", "--stores", str(stores), "--export-labels", str(exported)]) == 0
    before = len(History(stores).entries)
    lines = exported.read_text().splitlines()
    lines[2] = lines[2].replace(",retrieval_gap,false", ",lost_somewhere,true")
    exported.write_text("\n".join(lines) + "\n")
    assert main(["review", "gate-0001", "--stores", str(stores), "--import-labels", str(exported)]) == 2
    assert f"{exported}:3: field 'label'" in capsys.readouterr().err
    other = tmp_path / "other.jsonl"
    write_labels(other, [Label(candidate_id="gate-0001", question_id="q1", category="single_hop",
                               direction="improved", failing="parent", ladder="retrieval_gap",
                               label="retrieval_gap", confirmed=True)])
    assert main(["review", "gate-0001", "--stores", str(stores), "--import-labels", str(other)]) == 2
    assert "question q1: is not a discordant question of gate-0001" in capsys.readouterr().err
    assert len(History(stores).entries) == before


def test_a_trace_file_changed_since_the_verdict_is_refused(verdict, tmp_path, capsys):
    import shutil

    stores = shutil.copytree(verdict["stores"], tmp_path / "gate")
    record = History(stores).record("gate-0001")
    base = Path(record.direction["base"])
    kept = base.read_bytes()
    try:
        base.write_bytes(kept + b"\n")
        assert main(["review", "gate-0001", "--stores", str(stores), "--out", str(tmp_path / "p.html")]) == 2
        assert "has changed since the verdict" in capsys.readouterr().err
    finally:
        base.write_bytes(kept)
    assert main(["review", "gate-0001", "--stores", str(stores), "--traces", str(verdict["base"]),
                 str(verdict["cand"]), "--adapter", "jsonl", "--out", str(tmp_path / "p.html")]) == 0


def _labels(pairs: list[tuple[str, str]], column: int) -> list[Label]:
    return [Label(candidate_id="r001-c00", question_id=f"q{i}", category="temporal", direction="improved",
                  failing="parent", ladder=pair[0], label=pair[column], confirmed=True)
            for i, pair in enumerate(pairs)]


def test_cohens_kappa_on_two_files_that_differ_in_two_labels(tmp_path, capsys):
    ig, rg, kf, ge = "ingestion_gap", "retrieval_gap", "kf_filtered", "generation_error"
    # reviewer A and B agree on 8 of 10; B says rg where A says ig (q2) and kf where A says rg (q6)
    pairs = [(ig, ig), (ig, ig), (ig, rg), (rg, rg), (rg, rg), (rg, rg), (rg, kf), (kf, kf), (kf, kf), (ge, ge)]
    a, b = tmp_path / "a.csv", tmp_path / "b.jsonl"
    write_labels(a, _labels(pairs, 0))
    write_labels(b, _labels(pairs, 1))
    result = agreement(read_labels(a), read_labels(b), ("a", "b"))
    # by hand: p_o = 8/10; marginals A ig 3 rg 4 kf 2 ge 1, B ig 2 rg 4 kf 3 ge 1:
    # p_e = (3*2 + 4*4 + 2*3 + 1*1) / 100 = 0.29, kappa = (0.8 - 0.29) / (1 - 0.29) = 0.51 / 0.71
    assert result.n == 10 and result.observed == pytest.approx(0.8)
    assert result.kappa == pytest.approx(0.51 / 0.71)
    # ig against the rest: p_o = 9/10, p_e = 0.3*0.2 + 0.7*0.8 = 0.62 -> 0.28 / 0.38; ge: the same on both -> 1
    assert result.per_label["ingestion_gap"] == pytest.approx(0.28 / 0.38)
    assert result.per_label["generation_error"] == pytest.approx(1.0) and "unresolved" not in result.per_label
    assert main(["review", "r001-c00", "--stores", str(tmp_path / "none"), "--agreement", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "10 questions labelled in both; observed agreement 0.800; Cohen's kappa 0.718" in out
    assert "  ingestion_gap: kappa 0.737" in out
    write_labels(b, _labels(pairs[:9], 1))
    assert main(["review", "r001-c00", "--agreement", str(a), str(b)]) == 2
    assert "label different questions: 1 only in" in capsys.readouterr().err


def test_one_label_throughout_says_kappa_undefined_in_one_line_without_library_warnings(tmp_path, capsys):
    import warnings

    a = tmp_path / "a.csv"
    write_labels(a, _labels([("retrieval_gap", "retrieval_gap")] * 4, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any library warning fails the test
        assert main(["review", "r001-c00", "--agreement", str(a), str(a)]) == 0
    out = capsys.readouterr()
    assert "kappa undefined" in out.out and "Warning" not in out.out + out.err


def test_confirmed_labels_change_the_next_rounds_planning_input(tmp_path):
    """A reviewer's correction of a failure the ladder diagnosed moves that failure's count in the next round's
    digest, and the round's diagnosis record says which counts came from reviewers."""
    config = load_config(write_config(tmp_path / "run.yaml", stores=tmp_path / "stores", rounds=2,
                                      candidates_per_round=1, limit=30, probe_size=10))
    Engine(config, track=False, progress=False).run(1)
    first = History(config.stores).diagnosis[0]
    assert first["reviewed"] == {"applied": [], "not_applied": 0, "counts": {}, "corrected": 0}
    causes = first["digest"]["signals"]["root_causes"]
    gap = next(s for s in first["digest"]["aggregates"] if s["key"] == "ingestion_gap/*")
    qid = gap["evidence"]["question_ids"][0]
    label = Label(candidate_id="r001-c00", question_id=qid, category="single_hop", direction="improved",
                  failing="parent", ladder="ingestion_gap", label="retrieval_gap", confirmed=True, reviewer="ana")
    journal_labels(config.stores, "r001-c00", [label], "labels.csv")
    Engine(config, track=False, progress=False).run(1)
    second = History(config.stores).diagnosis[1]
    assert second["strategy_hash"] == first["strategy_hash"]  # nothing applied in round 1: the same failures
    moved = second["digest"]["signals"]["root_causes"]
    assert moved["ingestion_gap"] == causes["ingestion_gap"] - 1
    assert moved["retrieval_gap"] == causes.get("retrieval_gap", 0) + 1
    assert second["summary"]["root_causes"] == causes  # the evaluation itself is the ladder's
    reviewed = second["reviewed"]
    assert [(f["question_id"], f["ladder"], f["label"]) for f in reviewed["applied"]] == [
        (qid, "ingestion_gap", "retrieval_gap")]
    assert reviewed["counts"] == {"retrieval_gap": 1} and reviewed["corrected"] == 1


def test_the_report_links_a_review_page_beside_it(verdict, tmp_path):
    beside = verdict["tmp"] / "report.html"
    assert main(["report", "--stores", str(verdict["stores"]), "--out", str(beside)]) == 0
    assert "<a class='review' href='review-gate-0001.html'>review page</a> (22 discordances)" in beside.read_text()
    elsewhere = tmp_path / "report.html"
    assert main(["report", "--stores", str(verdict["stores"]), "--out", str(elsewhere)]) == 0
    assert "<code>memevolve review gate-0001 --out review-gate-0001.html</code>" in elsewhere.read_text()


def test_the_page_says_whose_hypothesis_was_tested_and_what_its_mismatch_did(verdict):
    """A planner's mismatch refutes its mechanism and does not flag; an engineer's flags under the human rule."""
    from copy import copy

    from evolve.ops.review_page import _hypothesis
    from evolve.verify.hypothesis import HypothesisCheck

    assert _hypothesis(verdict["record"]) == ""  # gated with --no-hypothesis: nothing to say
    for author, said in (("planner", "planner's hypothesis"), ("engineer", "engineer's hypothesis")):
        record = copy(verdict["record"])
        record.hypothesis = HypothesisCheck("kf_filtered/*", "down", -0.01, 300, 30, 27, 4, 1, 0.375, 0.2, author)
        shown = _hypothesis(record)
        assert said in shown and "30 -&gt; 27 of 300 questions" in shown and f"data-author='{author}'" in shown
        assert ("refutes the mechanism in the planner (does not flag)" in shown) == (author == "planner")
