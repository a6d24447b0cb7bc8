"""The answer-bearing-context check: content words, answer in evidence / anywhere."""
from __future__ import annotations

import pytest

from evolve.observe.answer import answer_check, content_words


def item(text: str, *sources: str) -> dict:
    return {"id": f"x{len(text)}", "text": text, "source_ids": list(sources)}


@pytest.mark.parametrize("text, words", [
    ("Caroline's dog", {"caroline", "dog"}),
    ("1,000 dollars", {"1000", "dollars"}),
    ("twenty-five", {"25"}),
    ("Three kids", {"3", "kids"}),
    ("one hundred", {"1", "100"}),
    ("the 7th of Sept. 2023", {"7", "september", "2023"}),
    ("the seventh of september", {"7", "september"}),
    ("the twenty-first", {"21"}),
    ("1st, 2nd and 3rd", {"1", "2", "3"}),
    ("It may rain in Aug", {"may", "rain", "august"}),
    ("Yes, she did that", set()),
])
def test_content_words_normalise_numbers_dates_and_possessives(text, words):
    assert content_words(text) == words


def test_answer_in_an_evidence_item():
    packed = [item("(8 May 2023) Caroline: I went to the LGBTQ support group yesterday", "D1:3"),
               item("Melanie likes painting", "D1:5")]
    assert answer_check("LGBTQ support group", ["D1:3"], packed) == (True, True)


def test_answer_only_in_an_unrelated_item_is_anywhere_but_not_in_evidence():
    packed = [item("Caroline talked about her week", "D1:3"), item("Caroline joined a LGBTQ support group", "D2:1")]
    assert answer_check("LGBTQ support group", ["D1:3"], packed) == (False, True)
    assert answer_check("LGBTQ support group", ["D1:3"], packed[:1]) == (False, False)


def test_answer_split_across_two_evidence_items_counts():
    packed = [item("Caroline adopted a kitten called Luna", "D1:1"), item("the kitten is grey and shy", "D4:2")]
    assert answer_check("a grey kitten, Luna", ["D1:1", "D4:2"], packed) == (True, True)
    assert answer_check("a grey kitten, Luna", ["D1:1"], packed) == (False, True)  # grey only outside evidence


def test_answer_without_a_content_word_or_without_evidence_is_left_out():
    packed = [item("Caroline said yes", "D1:1")]
    assert answer_check("Yes", ["D1:1"], packed) == (None, None)
    assert answer_check("Luna", [], packed) == (None, None)


def test_numbers_and_dates_match_across_forms():
    packed = [item("[7 May 2023] Melanie: we ran the twenty-five km charity race, raised 1,000 dollars", "D3:4")]
    assert answer_check("25", ["D3:4"], packed) == (True, True)
    assert answer_check("1000 dollars", ["D3:4"], packed) == (True, True)
    assert answer_check("The seventh of May, 2023", ["D3:4"], packed) == (True, True)
    assert answer_check("8 May 2023", ["D3:4"], packed) == (False, False)
    assert answer_check("7 June 2023", ["D3:4"], packed) == (False, False)
