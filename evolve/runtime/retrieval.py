"""Hybrid retrieval: BM25, vector and sub-query channels fused by weighted RRF, time decay, rerank, filters."""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

import numpy as np

from evolve.strategy.policy import Policy
from evolve.runtime.facts import FactMeta
from evolve.runtime.graph import expand
from evolve.runtime.lexical import Analyzer
from evolve.runtime.lifecycle import ACTIVE, Cues, Standing, category_channel, rescore, standing
from evolve.runtime.second_hop import bridge_terms, first_hits
from evolve.runtime.store import MemoryStore, day_number
from evolve.runtime.text import content_tokens

#: Decimals a dense (cosine) score is rounded to before ranking, so near-equal scores tie and keep store order. A
#: vector's last bits depend on the CPU's kernels (scores move by up to about 1e-6), so a score that close to a
#: rounding midpoint rounds up on one machine and down on another: one unit in this decimal.
DENSE_DECIMALS = 5


@dataclass(frozen=True)
class Hit:
    """One retrieved memory: final rank (1-based) and score, and its rank/score in each channel that found it."""

    id: str
    rank: int
    score: float
    source_ids: tuple[str, ...]
    channels: dict[str, dict] = field(default_factory=dict)
    meta: FactMeta = FactMeta()
    standing: Standing = ACTIVE  # the fact's lifecycle state for this question

    def to_dict(self) -> dict:
        fact = {**self.meta.to_dict(), **self.standing.to_dict()}
        return {"id": self.id, "rank": self.rank, "score": self.score, "source_ids": list(self.source_ids),
                "channels": {c: dict(v) for c, v in self.channels.items()}, "fact": fact}


@dataclass(frozen=True)
class Query:
    text: str
    intent: str
    subqueries: tuple[str, ...]
    vector: np.ndarray | None  # None when the vector channel is off
    asked_at: datetime | None = None


def _ranking(scores: np.ndarray, eligible: np.ndarray | None, depth: int, positive: bool) -> np.ndarray:
    """Indices of the ``depth`` best eligible items (ties by store order); ``eligible`` None: every item. A
    ``positive`` ranking keeps scores above 0 (BM25 sums and rank fusions, finite by construction), any other
    the finite ones."""
    if eligible is None and (positive or np.isfinite(scores.sum())):  # a finite sum: every score is finite
        return _best(scores, depth, positive)
    mask = scores > 0 if positive else np.isfinite(scores)
    if eligible is not None:
        mask &= eligible
    idx = mask.nonzero()[0]
    return idx[_best(scores[idx], depth, False)]


def _best(values: np.ndarray, depth: int, positive: bool) -> np.ndarray:
    """Positions of the ``depth`` best ``values``, best first, ties in position order; ``positive``: of those above 0.
    Only values at least the depth-th best (ties included) can make the cut."""
    n = values.size
    if n > depth:
        kth = np.partition(values, n - depth)[n - depth]
        keep = np.flatnonzero(values > 0 if positive and kth <= 0 else values >= kth)
    else:
        keep = np.flatnonzero(values > 0) if positive else np.arange(n)
    return keep[np.argsort(-values[keep], kind="stable")[:depth]]


def _rrf(ranked: np.ndarray, weight: float, kappa: int) -> np.ndarray:
    """The weighted reciprocal-rank share of each item of a ranking: ``weight / (kappa + rank)``."""
    return weight / (kappa + np.arange(1, len(ranked) + 1))


def _channel_scores(store: MemoryStore, query: Query, analyzer: Analyzer, terms: list[str], policy: Policy,
                    eligible: np.ndarray | None) -> dict[str, tuple]:
    """``{channel: (ranked indices, scores)}`` for every channel with a positive weight; ``terms``: the query's
    content tokens."""
    rt = policy.retrieval
    weights = rt.weights_for(query.intent)
    depth, kappa = rt.candidate_pool, rt.rrf_kappa
    out: dict[str, tuple] = {}
    subqueries = [tuple(analyzer.terms(sub)) for sub in query.subqueries] if weights.subquery > 0 else []
    lexical = _lexical(store, analyzer, ([tuple(terms)] if weights.bm25 > 0 else []) + subqueries, eligible, depth)
    if weights.bm25 > 0:
        out["bm25"] = lexical[tuple(terms)]
    if weights.vector > 0 and query.vector is not None:
        scores = store.embeddings @ query.vector.astype(np.float32, copy=False)
        np.round(scores, DENSE_DECIMALS, out=scores)
        out["vector"] = (_ranking(scores, eligible, depth, False), scores)
    if subqueries:
        fused = np.zeros(len(store), dtype=np.float64)
        for sub in subqueries:
            ranked = lexical[sub][0]
            fused[ranked] += _rrf(ranked, 1.0, kappa)
        ranked = lexical[subqueries[0]][0] if len(subqueries) == 1 else _ranking(fused, eligible, depth, True)
        out["subquery"] = (ranked, fused)  # one sub-query's fused scores fall along its own ranking
    if policy.lifecycle.category_channel.enabled:
        out["category"] = category_channel(store, query.text, policy.lifecycle.category_channel.depth,
                                           np.ones(len(store), dtype=bool) if eligible is None else eligible,
                                           analyzer)
    return out


def _lexical(store: MemoryStore, analyzer: Analyzer, queries: list[tuple[str, ...]], eligible: np.ndarray | None,
             depth: int) -> dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]]:
    """``{terms: (ranked indices, BM25 scores)}`` of each distinct query among ``queries`` (a sub-query often
    repeats the question's terms)."""
    distinct = list(dict.fromkeys(queries))
    rows = store.bm25_scores_many(distinct, analyzer)
    return {terms: (_ranking(row, eligible, depth, True), row) for terms, row in zip(distinct, rows)}


#: Bytes of channel results :func:`_memo_channels` keeps per store (a query costs about 16 bytes per item plus its
#: vector); once a store's share is spent, further queries are computed and not kept.
CHANNEL_MEMO_BYTES = 16 * 2**20


@dataclass
class _Memo:
    """One store's remembered channel results and their size in bytes."""

    entries: dict = field(default_factory=dict)
    nbytes: int = 0


_memos: "weakref.WeakKeyDictionary[MemoryStore, _Memo]" = weakref.WeakKeyDictionary()
_memo_lock = threading.Lock()


def _cut(store: MemoryStore, asked_at: datetime | None) -> datetime | None:
    """When a question asked at ``asked_at`` stops seeing ``store``: ``asked_at`` if something was said after it."""
    return asked_at if asked_at is not None and store.newest is not None and asked_at < store.newest else None


def _memo_channels(store: MemoryStore, query: Query, analyzer: Analyzer, terms: list[str], policy: Policy,
                   eligible: np.ndarray | None) -> dict[str, tuple]:
    """:func:`_channel_scores`, remembered per store (up to :data:`CHANNEL_MEMO_BYTES`) under everything it reads:
    a night's candidates retrieve the same questions from the same stores, and a store never changes. The arrays
    are read-only."""
    rt = policy.retrieval
    weights, category = rt.weights_for(query.intent), policy.lifecycle.category_channel
    vector = query.vector if weights.vector > 0 and query.vector is not None else None
    key = (analyzer, tuple(terms), tuple(query.subqueries) if weights.subquery > 0 else (), weights.bm25 > 0,
           None if vector is None else (vector.dtype.str, vector.tobytes()), rt.candidate_pool, rt.rrf_kappa,
           eligible is None, _cut(store, query.asked_at), (category.depth, query.text) if category.enabled else None)
    with _memo_lock:
        memo = _memos.get(store) or _memos.setdefault(store, _Memo())
        found = memo.entries.get(key)
    if found is None:
        found = _channel_scores(store, query, analyzer, terms, policy, eligible)
        size = 0 if vector is None else vector.nbytes
        for ranked, scores in found.values():
            ranked.flags.writeable = scores.flags.writeable = False
            size += ranked.nbytes + (scores if scores.base is None else scores.base).nbytes  # a row keeps its matrix
        with _memo_lock:
            if memo.nbytes + size <= CHANNEL_MEMO_BYTES and key not in memo.entries:
                memo.entries[key] = found
                memo.nbytes += size
    return dict(found)


def _decay(store: MemoryStore, policy: Policy, ref: float | None) -> np.ndarray:
    """The uniform time decay of every item (numeric facts keep the rescue floor when numeric rescue is on)."""
    td = policy.retrieval.time_decay
    if not td.enabled or ref is None or not np.isfinite(ref):
        return np.ones(len(store))
    age = np.clip(ref - store.days, 0.0, None)
    decay = np.where(np.isfinite(age), 0.5 ** (age / td.half_life_days), 1.0)
    rescue = policy.lifecycle.numeric_rescue
    return np.where(store.numeric, np.maximum(decay, rescue.floor), decay) if rescue.enabled else decay


def _lifecycle_scores(channels: dict[str, tuple], candidates: np.ndarray, store: MemoryStore, policy: Policy,
                      ref: float | None) -> np.ndarray:
    """The candidates' relevance as per-category decay and the event kernel rescore it. Relevance is the best of
    the item's BM25 and vector scores, each divided by that channel's best. Rank fusions (the fused score, the
    sub-query channel) cannot carry it: their sums differ by a few percent between ranks, far less than decay does."""
    relevance = np.zeros(len(store))
    for name in ("bm25", "vector"):
        if name not in channels:
            continue
        scores = channels[name][1]
        top = scores[candidates].max()
        if top > 0:
            relevance[candidates] = np.maximum(relevance[candidates], np.clip(scores[candidates] / top, 0.0, 1.0))
    out = np.zeros(len(store))
    out[candidates] = np.maximum(rescore(relevance, store, policy.lifecycle, ref)[candidates], 1e-12)  # stays one
    return out


def _refilled(candidates: np.ndarray, k: int, store: MemoryStore, policy: Policy,
              standing_of: Callable[[int], Standing]) -> np.ndarray:
    """The candidates, best first, up to the ``k``-th that :func:`filter_hits` keeps (those it removes on the way
    included, so the trace shows them filtered): the lifecycle filters act before the top-k cut."""
    kept = 0
    for n, i in enumerate(candidates.tolist(), start=1):
        if store.items[i].salience >= policy.lifecycle.prune_threshold and standing_of(i).state == "active":
            kept += 1
            if kept == k:
                return candidates[:n]
    return candidates


def retrieve(store: MemoryStore, query: Query, policy: Policy) -> list[Hit]:
    """The ``top_k_for(intent)`` best memories for ``query``, best first; with ``lifecycle.refill``, the best up to
    the ``top_k_for(intent)``-th the lifecycle filters keep."""
    rt, features = policy.retrieval, policy.features
    if not len(store):
        return []
    eligible = None if features.session_memory else store.layers != "SM"
    cut = _cut(store, query.asked_at)
    if cut is not None:  # a question asked inside the conversation sees what was said by then
        said = ~(store.days > day_number(cut))  # an undated item stays
        eligible = said if eligible is None else eligible & said
    weights = rt.weights_for(query.intent)
    analyzer = Analyzer(rt.lexical.stopwords, rt.lexical.stemmer)
    terms = analyzer.terms(query.text)
    channels = _memo_channels(store, query, analyzer, terms, policy, eligible)
    fused = np.zeros(len(store), dtype=np.float64)
    for name, (ranked, _) in channels.items():
        weight = policy.lifecycle.category_channel.weight if name == "category" else getattr(weights, name)
        fused[ranked] += _rrf(ranked, weight, rt.rrf_kappa)
    if rt.second_hop.enabled:
        everyone = np.ones(len(store), dtype=bool) if eligible is None else eligible
        bridges = bridge_terms(store, query.text, first_hits(store, fused, everyone, rt.second_hop.fan_out))
        if bridges:
            scores = store.bm25_scores(analyzer.terms(" ".join(bridges)), analyzer)
            ranked = _ranking(scores, eligible, rt.candidate_pool, True)
            channels["second_hop"] = (ranked, scores)
            fused[ranked] += _rrf(ranked, rt.second_hop.weight, rt.rrf_kappa)
    if rt.graph.enabled:
        everyone = np.ones(len(store), dtype=bool) if eligible is None else eligible
        ranked, scores = expand(store, first_hits(store, fused, everyone, rt.graph.fan_out), everyone, rt.graph)
        if ranked.size:
            ranked = ranked[: rt.candidate_pool]
            channels["graph"] = (ranked, scores)
            fused[ranked] += _rrf(ranked, rt.graph.weight, rt.rrf_kappa)
    now = query.asked_at or store.newest  # when the question is asked: its own time, else the newest memory's
    ref = day_number(now)
    cues = Cues.of(query.text)
    if rt.time_decay.enabled:
        fused *= _decay(store, policy, ref)
    candidates = np.flatnonzero(fused > 0)
    if policy.lifecycle.rescores and candidates.size and cues.current:
        fused = _lifecycle_scores(channels, candidates, store, policy, ref)
    candidates = candidates[np.argsort(-fused[candidates], kind="stable")]  # ties keep store order
    final = fused
    if rt.rerank.enabled and candidates.size:
        w = rt.rerank.overlap_weight
        final = (1.0 - w) * fused / fused[candidates[0]]
        # the store's token sets hold the runtime's own tokens, whatever the lexical channels' analyser
        wanted = set(terms if analyzer.is_default else content_tokens(query.text))
        if wanted:
            for i in candidates[: rt.rerank.top_n].tolist():
                final[i] += w * len(wanted & store.token_sets[i]) / len(wanted)
        candidates = candidates[np.lexsort((candidates, -final[candidates]))]
    standings: dict[int, Standing] = {}

    def standing_of(i: int) -> Standing:
        if store.settled[i]:
            return ACTIVE
        if i not in standings:
            standings[i] = standing(store, store.items[i], policy.lifecycle, cues, now)
        return standings[i]

    k = rt.top_k_for(query.intent)
    top = _refilled(candidates, k, store, policy, standing_of) if policy.lifecycle.refill else candidates[:k]
    return _hits(store, channels, top, final, standing_of)


def _hits(store: MemoryStore, channels: dict[str, tuple], top: np.ndarray, final: np.ndarray,
          standing_of: Callable[[int], Standing]) -> list[Hit]:
    """The hits of the ``top`` items (store indices, best first) with their ``final`` scores, each with its rank
    and score in every channel that found it."""
    found: list[dict[str, dict]] = [{} for _ in range(len(top))]
    for name, (ranked, scores) in channels.items():
        ranks = np.zeros(len(final), dtype=np.int64)  # 1-based rank of every item (0: not found by the channel)
        ranks[ranked] = np.arange(1, len(ranked) + 1)
        for channels_of, rank, score in zip(found, ranks[top].tolist(), scores[top].tolist()):
            if rank:
                channels_of[name] = {"rank": rank, "score": round(score, 6)}
    return [Hit(store.items[i].id, j, round(score, 8), store.items[i].source_ids, channels_of, store.items[i].meta,
                standing_of(i))
            for j, (i, score, channels_of) in enumerate(zip(top.tolist(), final[top].tolist(), found), start=1)]


def filter_hits(store: MemoryStore, hits: list[Hit], policy: Policy) -> tuple[list[Hit], list[tuple[str, str]]]:
    """Remove pruned memories and those the lifecycle policy does not let answer the question (superseded,
    slot_superseded, retracted, expired: the hit's standing); return kept and removed with the reason."""
    kept, removed = [], []
    for hit in hits:
        if store.item(hit.id).salience < policy.lifecycle.prune_threshold:
            removed.append((hit.id, "pruned"))
        elif hit.standing.state != "active":
            removed.append((hit.id, hit.standing.reason))
        else:
            kept.append(hit)
    return kept, removed
