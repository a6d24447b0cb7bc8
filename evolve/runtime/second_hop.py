"""Second-hop retrieval (``retrieval.second_hop``): the names and dates the first hits mention, beyond the question's
own, expand the question into a query for the fact the first one leads to."""
from __future__ import annotations

import numpy as np

from evolve.runtime.expander import entities
from evolve.runtime.text import DATE_PATTERN, split_attribution


def bridge_terms(store, question: str, first: np.ndarray) -> list[str]:
    """Names and absolute dates in the bodies of the ``first`` items (store indices, best first) that neither the
    question nor any speaker's name already holds, in order of appearance, without repeats."""
    known = {name.lower() for name in entities(question)}
    known |= {item.speaker.lower() for item in store.items if item.speaker}
    found: list[str] = []
    for i in first.tolist():
        body = split_attribution(store.items[i].text)[2]
        for term in [*entities(body), *(m.group(0) for m in DATE_PATTERN.finditer(body))]:
            if term.lower() not in known:
                known.add(term.lower())
                found.append(term)
    return found


def first_hits(store, fused: np.ndarray, eligible: np.ndarray, fan_out: int) -> np.ndarray:
    """The ``fan_out`` best eligible items by first-pass fused score (ties by store order), session summaries left
    out (they name everyone of a session)."""
    idx = np.flatnonzero(eligible & (fused > 0) & (store.layers != "L1"))
    return idx[np.lexsort((idx, -fused[idx]))][:fan_out]
