"""The abstention classifier on the committed labelled phrasings, and on cases that pin down its rules."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evolve.observe.abstention import abstains

ROOT = Path(__file__).resolve().parents[2]


def bench():
    spec = importlib.util.spec_from_file_location("bench_abstention", ROOT / "experiments/bench/bench_abstention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_labelled_set_is_large_and_varied():
    rows = bench().load(bench().DEFAULT)
    kinds = {r["kind"] for r in rows}
    assert len(rows) >= 200 and {"decline", "hedge", "no-record", "confident-wrong", "hedged-guess"} <= kinds
    assert sum(r["split"] == "heldout" for r in rows) >= 50


@pytest.mark.parametrize("split", ["heldout", None])
def test_precision_and_recall_floor(split):
    rows = [r for r in bench().load(bench().DEFAULT) if split is None or r["split"] == split]
    s = bench().scores(rows)
    assert s["precision"] >= 0.95 and s["recall"] >= 0.95, s


@pytest.mark.parametrize("text", ["I'm not sure.", "The memory does not mention this.", "There's no record of that",
                                  "I can't tell from what I have", "", "  None ", "Unknown.",
                                  "I don\u2019t know", "Not mentioned in the conversation."])
def test_declines_and_hedges_abstain(text):
    assert abstains(text)


@pytest.mark.parametrize("text", ["Lyon", "not mentioned, but probably Lyon", "I'm not sure, I think it was May",
                                  "He doesn't know how to drive.", "None of her friends came.",
                                  "Unknown Mortal Orchestra", "She has no siblings."])
def test_assertions_answer(text):
    assert not abstains(text)
