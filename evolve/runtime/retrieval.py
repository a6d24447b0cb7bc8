"""Hybrid retrieval: BM25, vector and sub-query channels fused by weighted RRF, time decay, rerank, filters."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from evolve.strategy.policy import Policy
from evolve.runtime.store import MemoryStore, day_number
from evolve.runtime.text import content_tokens

@dataclass(frozen=True)
class Hit:
    """One retrieved memory: final rank (1-based) and score, and its rank/score in each channel that found it."""

    id: str
    rank: int
    score: float
    source_ids: tuple[str, ...]
    channels: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"id": self.id, "rank": self.rank, "score": self.score, "source_ids": list(self.source_ids),
                "channels": {c: dict(v) for c, v in self.channels.items()}}


@dataclass(frozen=True)
class Query:
    text: str
    intent: str
    subqueries: tuple[str, ...]
    vector: np.ndarray | None  # None when the vector channel is off
    asked_at: datetime | None = None


def _ranking(scores: np.ndarray, eligible: np.ndarray, depth: int, positive: bool) -> np.ndarray:
    """Indices of the ``depth`` best eligible items (ties by store order)."""
    mask = eligible & np.isfinite(scores)
    if positive:
        mask &= scores > 0
    idx = np.flatnonzero(mask)
    if idx.size > depth:  # only items scoring at least the depth-th best (ties included) can make the cut
        values = scores[idx]
        idx = idx[values >= np.partition(values, idx.size - depth)[idx.size - depth]]
    order = np.lexsort((idx, -scores[idx]))
    return idx[order[:depth]]


def _channel_scores(store: MemoryStore, query: Query, policy: Policy, eligible: np.ndarray) -> dict[str, tuple]:
    """``{channel: (ranked indices, scores)}`` for every channel with a positive weight."""
    rt = policy.retrieval
    weights = rt.weights_for(query.intent)
    depth, kappa = rt.candidate_pool, rt.rrf_kappa
    out: dict[str, tuple] = {}
    if weights.bm25 > 0:
        scores = store.bm25_scores(content_tokens(query.text))
        out["bm25"] = (_ranking(scores, eligible, depth, True), scores)
    if weights.vector > 0 and query.vector is not None and len(store):
        scores = np.round(store.embeddings @ query.vector.astype(np.float32), 5)
        out["vector"] = (_ranking(scores, eligible, depth, False), scores)
    if weights.subquery > 0 and query.subqueries:
        fused = np.zeros(len(store), dtype=np.float64)
        for sub in query.subqueries:
            ranked = _ranking(store.bm25_scores(content_tokens(sub)), eligible, depth, True)
            fused[ranked] += 1.0 / (kappa + np.arange(1, len(ranked) + 1))
        out["subquery"] = (_ranking(fused, eligible, depth, True), fused)
    return out


def _decay(store: MemoryStore, policy: Policy, asked_at: datetime | None) -> np.ndarray:
    td = policy.retrieval.time_decay
    if not td.enabled:
        return np.ones(len(store))
    ref = day_number(asked_at) if asked_at is not None else store.newest_day()
    if ref is None or not np.isfinite(ref):
        return np.ones(len(store))
    age = np.clip(ref - store.days, 0.0, None)
    return np.where(np.isfinite(age), 0.5 ** (age / td.half_life_days), 1.0)


def retrieve(store: MemoryStore, query: Query, policy: Policy) -> list[Hit]:
    """The ``top_k_for(intent)`` best memories for ``query``, best first."""
    rt, features = policy.retrieval, policy.features
    if not len(store):
        return []
    eligible = np.ones(len(store), dtype=bool)
    if not features.session_memory:
        eligible &= store.layers != "SM"
    weights = rt.weights_for(query.intent)
    channels = _channel_scores(store, query, policy, eligible)
    fused = np.zeros(len(store), dtype=np.float64)
    ranks: dict[str, np.ndarray] = {}  # channel -> 1-based rank of every item (0: not found by the channel)
    for name, (ranked, _) in channels.items():
        positions = np.arange(1, len(ranked) + 1)
        fused[ranked] += getattr(weights, name) / (rt.rrf_kappa + positions)
        ranks[name] = np.zeros(len(store), dtype=np.int64)
        ranks[name][ranked] = positions
    if rt.time_decay.enabled:
        fused *= _decay(store, policy, query.asked_at)
    candidates = np.flatnonzero(fused > 0)
    candidates = candidates[np.lexsort((candidates, -fused[candidates]))]
    final = fused
    if rt.rerank.enabled and candidates.size:
        w = rt.rerank.overlap_weight
        final = (1.0 - w) * fused / fused[candidates[0]]
        wanted = set(content_tokens(query.text))
        if wanted:
            for i in candidates[: rt.rerank.top_n].tolist():
                final[i] += w * len(wanted & store.token_sets[i]) / len(wanted)
        candidates = candidates[np.lexsort((candidates, -final[candidates]))]
    top = candidates[: rt.top_k_for(query.intent)]
    columns = {name: (ranks[name][top].tolist(), scores[top].tolist()) for name, (_, scores) in channels.items()}
    hits = []
    for j, (i, score) in enumerate(zip(top.tolist(), final[top].tolist())):
        item = store.items[i]
        found = {name: {"rank": r[j], "score": round(s[j], 6)} for name, (r, s) in columns.items() if r[j]}
        hits.append(Hit(item.id, j + 1, round(score, 8), item.source_ids, found))
    return hits


def filter_hits(store: MemoryStore, hits: list[Hit], policy: Policy) -> tuple[list[Hit], list[tuple[str, str]]]:
    """Remove pruned, superseded and retracted memories (as the lifecycle policy says); return kept and removed."""
    lc = policy.lifecycle
    kept, removed = [], []
    for hit in hits:
        item = store.item(hit.id)
        if item.salience < lc.prune_threshold:
            removed.append((hit.id, "pruned"))
        elif lc.supersession and item.superseded_by is not None:
            removed.append((hit.id, "superseded"))
        elif lc.forget_guard and item.retracted:
            removed.append((hit.id, "retracted"))
        else:
            kept.append(hit)
    return kept, removed
