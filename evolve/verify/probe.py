"""A fixed, stratified probe subset for cheap screening before a full evaluation."""
from __future__ import annotations

import math
import random
from typing import Any, Mapping


def _categories(items: Mapping[str, Any]) -> dict[str, str]:
    """``qid -> category`` from either that mapping or an Outcome map."""
    out: dict[str, str] = {}
    for qid, value in items.items():
        category = value.get("category") if isinstance(value, Mapping) else value
        if not isinstance(category, str):
            raise ValueError(f"probe input[{qid!r}]: category must be a string, got {category!r}")
        out[qid] = category
    return out


def _allocate(counts: dict[str, int], size: int) -> dict[str, int]:
    """Largest-remainder proportional allocation with at least one per category, capped at its count."""
    total = sum(counts.values())
    quota = {c: size * n / total for c, n in counts.items()}
    alloc = {c: min(n, max(1, math.floor(quota[c]))) for c, n in counts.items()}
    while sum(alloc.values()) < size:
        open_ = [c for c in counts if alloc[c] < counts[c]]
        alloc[max(open_, key=lambda c: (quota[c] - alloc[c], counts[c], c))] += 1
    while sum(alloc.values()) > size:
        shrinkable = [c for c in counts if alloc[c] > 1]
        if not shrinkable:
            break  # fewer slots than categories: one question per category wins
        alloc[min(shrinkable, key=lambda c: (quota[c] - alloc[c], -counts[c], c))] -= 1
    return alloc


def stratified_probe(outcomes_or_questions: Mapping[str, Any], size: int = 80, seed: int = 0) -> list[str]:
    """Sorted question ids of a deterministic subset stratified by category.

    Accepts ``{qid: category}`` or an Outcome map ``{qid: {"category": ...}}``. Each category gets a
    share proportional to its size (largest remainder) and at least one question, so when ``size`` is
    smaller than the number of categories the probe holds one question per category. When ``size``
    covers everything, every id is returned. Within a category the pick depends only on ``seed``, the
    category name and its ids, so the probe is stable across runs and processes.
    """
    if size < 1:
        raise ValueError(f"size: must be >= 1, got {size}")
    categories = _categories(outcomes_or_questions)
    if size >= len(categories):
        return sorted(categories)
    members: dict[str, list[str]] = {}
    for qid in sorted(categories):
        members.setdefault(categories[qid], []).append(qid)
    alloc = _allocate({c: len(ids) for c, ids in members.items()}, size)
    chosen: list[str] = []
    for category in sorted(members):
        ids = list(members[category])
        random.Random(f"{seed}:{category}").shuffle(ids)
        chosen.extend(ids[: alloc[category]])
    return sorted(chosen)
