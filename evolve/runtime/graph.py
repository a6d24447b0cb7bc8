"""The memory graph and its expansion at query time (``retrieval.graph``): MemFuse's two-layer graph over one store.

Nodes are the store's memories. Edges, each of one type:

* ``belong``: two memories citing the same observation (a fused pack and its members' memories; a fact and the
  turn it came from);
* ``causal``: the memories of consecutive members of one fused pack (``features.fusion``), in time order, so the
  calendar entry reaches the bag the camera saw and the car's detour after it;
* ``semantic``: memories of different observations sharing at least ``min_shared`` telling words (content stems held
  by at most ``max_share`` of the store's memories);
* ``entity``: memories of different observations naming the same entity (a capitalised name, speakers' names left
  out) that few memories name.

Each memory keeps its ``per_node`` strongest neighbours per edge type (most shared words, then store order). At query
time the ``fan_out`` best first-pass hits are the seeds, expanded breadth-first for ``hops`` hops along the chosen edge
types; what they reach joins the fusion as one more ranked channel (``graph``, with ``weight``), so a memory that
shares no word with the question ("anything to check before training?" -> "training bag near the doorway") can reach
the context through the memory that does. The graph is derived from the store alone: it is rebuilt with it, and
erased with its user.
"""
from __future__ import annotations

import threading
import weakref
from collections import Counter
from itertools import combinations

import numpy as np

from evolve.runtime.expander import entities
from evolve.runtime.fusion import PACK_LAYER
from evolve.runtime.store import MemoryStore
from evolve.runtime.text import split_attribution
from evolve.strategy.policy import Graph

EDGE_TYPES = ("belong", "causal", "semantic", "entity")

#: ``{type: neighbours of each item}``, each a tuple of (item index, weight), strongest first.
Adjacency = dict[str, tuple[tuple[tuple[int, int], ...], ...]]

_built: "weakref.WeakKeyDictionary[MemoryStore, dict]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def adjacency(store: MemoryStore, graph: Graph) -> Adjacency:
    """The store's edges under ``graph``'s word rules (built once per store and rules)."""
    key = (graph.min_shared, graph.max_share, graph.per_node)
    with _lock:
        found = _built.setdefault(store, {}).get(key)
    if found is None:
        found = _build(store, graph)
        with _lock:
            _built[store][key] = found
    return found


def _build(store: MemoryStore, graph: Graph) -> Adjacency:
    n = len(store)
    weights: dict[str, list[Counter[int]]] = {t: [Counter() for _ in range(n)] for t in EDGE_TYPES}
    by_turn: dict[str, list[int]] = {}
    for i, item in enumerate(store.items):
        for tid in item.source_ids:
            by_turn.setdefault(tid, []).append(i)
    sources = [frozenset(item.source_ids) for item in store.items]

    def link(kind: str, group_a: list[int], group_b: list[int], weight: int = 1) -> None:
        for a in group_a:
            for b in group_b:
                if a != b:
                    weights[kind][a][b] += weight
                    weights[kind][b][a] += weight

    for members in by_turn.values():
        link("belong", members, members)
    for item in store.items:
        if item.layer == PACK_LAYER:
            for earlier, later in zip(item.source_ids, item.source_ids[1:]):
                link("causal", _own(by_turn.get(earlier, []), store), _own(by_turn.get(later, []), store))
    cap = max(2, int(graph.max_share * n))
    speakers = {item.speaker.lower() for item in store.items if item.speaker}
    names = [frozenset(e.lower() for e in entities(split_attribution(item.text)[2])) - speakers
             for item in store.items]
    for kind, sets in (("semantic", store.body_sets), ("entity", names)):
        shared: dict[tuple[int, int], int] = Counter()
        postings: dict[str, list[int]] = {}
        for i, words in enumerate(sets):
            if store.layers[i] in ("L1", PACK_LAYER):  # summaries and packs name everything: reached by belong
                continue
            for w in words:
                postings.setdefault(w, []).append(i)
        for items in postings.values():
            if len(items) <= cap:
                for a, b in combinations(items, 2):
                    if not sources[a] & sources[b]:
                        shared[a, b] += 1
        least = graph.min_shared if kind == "semantic" else 1
        for (a, b), count in shared.items():
            if count >= least:
                weights[kind][a][b] = weights[kind][b][a] = count
    return {kind: tuple(tuple(sorted(row.items(), key=lambda e: (-e[1], e[0]))[: graph.per_node]) for row in rows)
            for kind, rows in weights.items()}


def _own(indices: list[int], store: MemoryStore) -> list[int]:
    """The memories of one observation, its packs left out (a pack is every member's)."""
    return [i for i in indices if store.layers[i] != PACK_LAYER]


def expand(store: MemoryStore, seeds: np.ndarray, eligible: np.ndarray, graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """What ``seeds`` (store indices, best first) reach in ``graph.hops`` hops along ``graph.edges``: the eligible
    memories reached, in the order reached (seed by seed, strongest edge first), and each memory's score (the
    weight of the edge that reached it over its hop; 0 elsewhere)."""
    edges = adjacency(store, graph)
    seen = set(seeds.tolist())
    order: list[int] = []
    scores = np.zeros(len(store), dtype=np.float64)
    frontier = seeds.tolist()
    for hop in range(1, graph.hops + 1):
        reached: list[int] = []
        for node in frontier:
            for kind in graph.edges:
                for other, weight in edges[kind][node]:
                    if other not in seen and eligible[other]:
                        seen.add(other)
                        reached.append(other)
                        scores[other] = weight / hop
        order += reached
        frontier = reached
    return np.array(order, dtype=np.int64), scores
