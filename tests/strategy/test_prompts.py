"""Prompt edits: one instruction line before the output line, version bumped, recognised again in a diff."""
from __future__ import annotations

import json

import pytest

from evolve.data import BASELINE_PATH
from evolve.improve.planner import move_values
from evolve.strategy.artifact import derive, load_strategy, validate_strategy
from evolve.strategy.diff import change_keys
from evolve.strategy.moves import EDIT, Move, Step, value_text
from evolve.strategy.prompts import add_instruction, added_instruction, check_instruction
from evolve.strategy.schema import evolvable_dimensions

LINE = "Give dates exactly as the memory states them: day, month and year."


@pytest.fixture(scope="module")
def baseline() -> dict:
    return load_strategy(BASELINE_PATH)


def test_an_edit_goes_before_the_last_line_and_bumps_the_version(baseline):
    prompt = baseline["answering"]["prompt"]
    edited = add_instruction(prompt, LINE)
    old, new = prompt["template"].splitlines(), edited["template"].splitlines()
    assert new == old[:-1] + [LINE, old[-1]] and edited["version"] == prompt["version"] + 1
    assert {k: edited[k] for k in ("id", "required_markers")} == {k: prompt[k] for k in ("id", "required_markers")}
    assert add_instruction(edited, LINE) is None  # already there: no move
    assert added_instruction(prompt, edited) == LINE and added_instruction(edited, prompt) is None
    validate_strategy(derive(baseline, {"answering.prompt": edited}))


@pytest.mark.parametrize("text, problem", [
    ("two\nlines here", "one line"), ("short", "8 to 200"), ("x" * 201, "8 to 200"),
    ("Quote {context} back", "may not contain '{'"), ("Use this & that too", "may not contain '&'"),
    ("Then write ANSWER: first", "section marker"), (7, "must be a string"),
])
def test_instructions_that_could_break_a_template_are_refused(text, problem):
    with pytest.raises(ValueError, match=problem):
        check_instruction(text)


def test_the_move_text_round_trips_and_the_diff_names_the_same_move(baseline):
    move = Move.parse(f"answering.prompt::edit:{LINE}")
    assert move.first == Step("answering.prompt", EDIT, LINE) and str(move) == f"answering.prompt::edit:{LINE}"
    dim = evolvable_dimensions()["answering.prompt"]
    (edited,) = move_values(baseline, dim, move.first)
    child = derive(baseline, {"answering.prompt": edited})
    assert change_keys(baseline, child) == [str(move)]
    assert move_values(child, dim, move.first) == []  # the same edit again changes nothing


def test_a_whole_prompt_is_set_by_its_json_even_with_an_ampersand(baseline):
    prompt = {**baseline["answering"]["prompt"], "version": 2,
              "template": baseline["answering"]["prompt"]["template"].replace("Be brief.", "Be brief & exact.")}
    text = f"answering.prompt::set:{value_text(prompt)}"
    move = Move.parse(text)
    assert not move.coupled and json.loads(move.first.value) == prompt
    dim = evolvable_dimensions()["answering.prompt"]
    assert move_values(baseline, dim, move.first) == [prompt]
    assert change_keys(baseline, derive(baseline, {"answering.prompt": prompt})) == ["answering.prompt::set:answer.short@v2"]
    with pytest.raises(ValueError, match="exactly id, version, template, required_markers"):
        Step.parse('answering.prompt::set:{"id": "x"}').check(dim)
