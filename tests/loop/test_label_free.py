"""Label-free runs: a benchmark file with no labelled question (no ``qa``, or the empty ``qa`` of capture-export) is
evolved on the probe questions of its conversations, with no extra key, and the run's summary says so."""
from __future__ import annotations

import json

import pytest

from evolve.benchmarks import load_benchmark
from evolve.benchmarks.synthetic import write_locomo
from evolve.cli.summary import questions_line
from evolve.loop.config import load_config
from evolve.loop.setup import RunSetup
from workflow_fixtures import write_config


def _unlabelled(tmp_path, keep_empty_qa: bool):
    path = tmp_path / "unlabelled.json"
    write_locomo(load_benchmark("synthetic:0:2"), path)
    samples = json.loads(path.read_text())
    for sample in samples:
        if keep_empty_qa:
            sample["qa"] = []  # what capture-export writes for a user with no answered question
        else:
            del sample["qa"]
    path.write_text(json.dumps(samples))
    return path


@pytest.mark.parametrize("keep_empty_qa", [False, True])
def test_a_file_without_labels_is_evolved_on_its_probes(tmp_path, keep_empty_qa):
    path = _unlabelled(tmp_path, keep_empty_qa)
    config = load_config(write_config(tmp_path / "run.yaml", benchmark=f"locomo:{path}", limit=None,
                                      stores=tmp_path / "stores", objective="answer",
                                      probes={"mix": {"single_hop": 1, "temporal": 1}}))
    setup = RunSetup.prepare(config)
    categories = {q.id: q.category for q in setup.benchmark.questions}
    assert setup.scored and all(categories[q].startswith("probe_") for q in setup.scored)
    assert setup.sources.label_free and setup.sources.probes == len(setup.scored)
    assert set(setup.sources.mix) <= {"single_hop", "temporal"}  # the operator's mix
    line = questions_line(setup.sources.to_dict())
    assert line.startswith(f"label-free: no labelled question, evolved on {len(setup.scored)} probe questions")


def test_a_labelled_run_names_its_sources_only_when_probes_join(tmp_path):
    labelled = RunSetup.prepare(load_config(write_config(tmp_path / "a.yaml", benchmark="synthetic:0:1",
                                                         stores=tmp_path / "a", objective="answer")))
    assert not labelled.sources.label_free and labelled.sources.probes == 0
    assert questions_line(labelled.sources.to_dict()) is None
    both = RunSetup.prepare(load_config(write_config(tmp_path / "b.yaml", benchmark="synthetic:0:1", limit=None,
                                                     stores=tmp_path / "b", objective="answer", augment="probes")))
    assert questions_line(both.sources.to_dict()).startswith(
        f"questions: {both.sources.labelled} labelled and {both.sources.probes} probe questions (probe mix ")


def test_the_label_free_run_prints_it_in_its_summary(tmp_path, capsys):
    from evolve.cli import main

    path = _unlabelled(tmp_path, keep_empty_qa=False)
    config = write_config(tmp_path / "run.yaml", benchmark=f"locomo:{path}", limit=None, rounds=1,
                          candidates_per_round=1, stores=tmp_path / "stores", objective="answer")
    assert main(["run", "--config", str(config), "--no-tracking"]) == 0
    out = capsys.readouterr().out
    assert "label-free: no labelled question, evolved on" in out
    summary = json.loads(next((tmp_path / "stores" / "summaries").glob("*.json")).read_text())
    assert summary["questions"]["label_free"] and summary["questions"]["probes"] > 0
