"""Second-hop retrieval (``retrieval.second_hop``): a name the first hits mention leads to the fact the question
needs next; where the first hits name nothing new the retrieved set is the same."""
from __future__ import annotations

from datetime import datetime

import numpy as np

from evolve.runtime.second_hop import bridge_terms
from test_lifecycle_policies import conversation, runtime

SISTER = conversation((datetime(2023, 5, 1, 10), [
    "My sister is called Ana.", "Ana has a flat in Porto near the river.", "My sister loves jazz records.",
    "My sister plays tennis on Sundays.", "Marco has a flat in Rome.", "My sister bakes bread.",
    "My neighbour has a flat in Lima."]))
PORTO = "Ana has a flat in Porto"


def _l0(rt, conv, question: str) -> list[str]:
    store = rt.ingest(conv)
    return [store.item(h.id).text for h in rt.ask(store, question).retrieved if store.item(h.id).layer == "L0"]


def test_a_name_in_the_first_hits_brings_the_second_fact():
    question = "Where does Tomas's sister live?"
    one_hop = runtime(retrieval__top_k=5)
    two_hop = runtime(retrieval__top_k=5, retrieval__second_hop__enabled=True, retrieval__second_hop__weight=2.0)
    assert not any(PORTO in text for text in _l0(one_hop, SISTER, question))
    assert any(PORTO in text for text in _l0(two_hop, SISTER, question))
    store = two_hop.ingest(SISTER)
    first = np.array([next(i for i, item in enumerate(store.items) if "called Ana" in item.text)])
    assert bridge_terms(store, question, first) == ["Ana"]  # not the speakers, nor the question's own names


def test_without_a_new_name_or_date_nothing_changes():
    conv = conversation((datetime(2023, 5, 1, 10), ["I bake sourdough bread every week.", "I play tennis badly.",
                                                    "I keep bees in the garden."]))
    question = "What does Tomas bake?"
    plain, hop = runtime(), runtime(retrieval__second_hop__enabled=True, retrieval__second_hop__weight=2.0)
    before, after = (rt.ask(rt.ingest(conv), question) for rt in (plain, hop))
    assert [h.to_dict() for h in after.retrieved] == [h.to_dict() for h in before.retrieved]
