"""The public API in ``evolve/__init__.py``: every exported name resolves, and the documented example runs."""
from __future__ import annotations

import subprocess
import sys

import evolve
from evolve.observe.ladder import ROOT_CAUSES


def test_every_exported_name_resolves():
    for name in evolve.__all__:
        assert getattr(evolve, name) is not None, name
    assert set(evolve.__all__) <= set(dir(evolve))


def test_unknown_name_is_an_attribute_error():
    try:
        evolve.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_import_is_cheap():
    code = "import sys, evolve; evolve.load_strategy; print(sorted(m for m in ('mlflow', 'optuna', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_documented_example(tmp_path):
    config = evolve.RunConfig(benchmark="synthetic:0:3", stores=tmp_path / "stores", rounds=1,
                              candidates_per_round=1, limit=40, probe_size=10)
    summary = evolve.Engine(config, track=False, progress=False).run(rounds=1)
    assert summary["rounds"] == 1 and set(summary["decisions"]) <= {v.value for v in evolve.Verdict}
    run = evolve.Harness(evolve.load_benchmark("synthetic:0:3"), progress=False).evaluate(
        evolve.load_strategy(evolve.BASELINE_PATH))
    assert isinstance(run.summary, evolve.Summary) and 0 <= run.summary.accuracy <= 1
    assert all(isinstance(t, evolve.Trace) for t in run.traces)
    assert {t.root_cause for t in run.traces if t.failed} <= set(ROOT_CAUSES)
