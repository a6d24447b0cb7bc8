"""Ingestion: dialogue windows -> extracted facts -> capped, de-duplicated, lifecycle-marked layered memory."""
from __future__ import annotations

import contextvars
import dataclasses
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Callable, Collection, Sequence

import numpy as np
from scipy import sparse

from evolve.benchmarks.types import Conversation, Session, Turn
from evolve.strategy.policy import FACT_CATEGORIES, Extraction, Lifecycle, Policy
from evolve.runtime.roles import FACT_KINDS, ExtractedFact, Extractor
from evolve.runtime.extractor import LIFECYCLE_KINDS, turn_fact
from evolve.runtime.dates import without_dates
from evolve.runtime.facts import FactMeta, annotate, numeric
from evolve.runtime.fusion import FusionJudge, pack_items
from evolve.runtime.ikb import build_ikb
from evolve.runtime.store import MemoryItem, MemoryStore
from evolve.runtime.text import (CUE_STEMS, STOPWORDS, content_set, format_date, retraction_topic, split_attribution,
                                 tokens, topic_overlap, words)

ROLLUP_FACTS = 3
ROLLUP_KEYWORDS = 6
ROLLUP_MAX_WORDS = 80

Embed = Callable[[list[str]], np.ndarray]


@dataclasses.dataclass
class IngestMemo:
    """Results of the pure per-window and per-fact stages of one conversation under one ingestion policy, reused by
    its next build: a conversation growing turn by turn re-extracts only its open window and annotates only new
    facts. Only what the latest build used is kept (:meth:`keep_only`)."""

    windows: dict[tuple[Turn, ...], list[ExtractedFact]] = dataclasses.field(default_factory=dict)
    meta: dict[tuple, FactMeta] = dataclasses.field(default_factory=dict)
    turn_facts: dict[Turn, ExtractedFact] = dataclasses.field(default_factory=dict)

    def annotate(self, body: str, speaker: str | None, said) -> FactMeta:
        key = (body, speaker, said)
        if key not in self.meta:
            self.meta[key] = annotate(body, speaker, said)
        return self.meta[key]

    def turn_fact(self, turn: Turn, policy: Extraction) -> ExtractedFact:
        if turn not in self.turn_facts:
            self.turn_facts[turn] = turn_fact(turn, policy)
        return self.turn_facts[turn]

    def extract(self, extractor: Extractor, batch: list[list[Turn]], policy: Extraction) -> list[list[ExtractedFact]]:
        """:func:`_extract` of the windows not extracted before; windows of earlier builds not in ``batch`` are
        forgotten (a window still open then has grown since)."""
        keys = [tuple(w) for w in batch]
        todo = [w for w, k in zip(batch, keys) if k not in self.windows]
        found = dict(zip((tuple(w) for w in todo), _extract(extractor, todo, policy)))
        self.windows = {k: self.windows[k] if k in self.windows else found[k] for k in keys}
        return [self.windows[k] for k in keys]


def timed_turns(session: Session) -> list[Turn]:
    """The session's turns, each stamped with the session time when it has none of its own."""
    return [t if t.timestamp is not None else dataclasses.replace(t, timestamp=session.timestamp) for t in session.turns]


def windows(turns: Sequence[Turn], size: int, overlap: int) -> list[list[Turn]]:
    """Consecutive windows of ``size`` turns, each sharing ``overlap`` turns with the previous one."""
    if size < 1 or not 0 <= overlap < size:
        raise ValueError(f"extraction window_size={size}, window_overlap={overlap}: need 0 <= overlap < size")
    out: list[list[Turn]] = []
    start = 0
    while start < len(turns):
        out.append(list(turns[start:start + size]))
        if start + size >= len(turns):
            break
        start += size - overlap
    return out


def _anchored(fact: ExtractedFact, window: Sequence[Turn]) -> ExtractedFact:
    """Keep only source ids from the window (all of the window if none match), a known kind and category."""
    ids = {t.id for t in window}
    sources = tuple(s for s in fact.source_ids if s in ids) or tuple(t.id for t in window)
    kind = fact.kind if fact.kind in FACT_KINDS else "fact"
    salience = min(1.0, max(0.0, float(fact.salience)))
    meta = fact.meta
    if meta is not None and meta.category not in FACT_CATEGORIES:
        meta = dataclasses.replace(meta, category="other")
    return dataclasses.replace(fact, source_ids=sources, kind=kind, salience=salience, meta=meta)


def _cap(facts: list[ExtractedFact], limit: int) -> list[ExtractedFact]:
    """The ``limit`` most informative facts (lifecycle cues first), in their original order."""
    ranked = sorted(range(len(facts)), key=lambda i: (facts[i].kind not in LIFECYCLE_KINDS, -facts[i].salience, i))
    return [facts[i] for i in sorted(ranked[:limit])]


def _dedup(facts: list[ExtractedFact], threshold: float) -> list[ExtractedFact]:
    """Drop repeats and same-speaker facts whose body token-Jaccard with a kept one is >= ``threshold``; a fact
    carrying a number is never a near-duplicate (its number may be the news)."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    unique = []
    for fact in facts:
        key = (fact.text, fact.source_ids)
        if key not in seen:
            seen.add(key)
            unique.append(fact)
    if len(unique) < 2:
        return unique
    bodies = [split_attribution(f.text)[2] for f in unique]
    sets = [content_set(body) for body in bodies]
    vocab = {t: i for i, t in enumerate(sorted(set().union(*sets)))}
    rows = [i for i, s in enumerate(sets) for _ in s]
    cols = [vocab[t] for s in sets for t in s]
    matrix = sparse.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(len(sets), len(vocab)))
    overlap = (matrix @ matrix.T).tocsr()
    sizes = np.array([len(s) for s in sets], dtype=np.float32)
    speakers = [f.speaker for f in unique]
    kept = np.zeros(len(unique), dtype=bool)
    for i in range(len(unique)):
        start, end = overlap.indptr[i], overlap.indptr[i + 1]
        cols_i, inter = overlap.indices[start:end], overlap.data[start:end]
        earlier = (cols_i < i) & kept[cols_i]
        cols_i, inter = cols_i[earlier], inter[earlier]
        union = sizes[i] + sizes[cols_i] - inter
        similar = cols_i[(union > 0) & (inter / np.maximum(union, 1) >= threshold)]
        kept[i] = not any(speakers[j] == speakers[i] for j in similar) or numeric(bodies[i])
    return [f for f, k in zip(unique, kept) if k]


def _items(layer: str, facts: Sequence[ExtractedFact], memo: IngestMemo) -> list[MemoryItem]:
    return [MemoryItem(f"{layer}:{i}", layer, f.text, f.source_ids, f.speaker, f.timestamp, f.kind, f.salience,
                       meta=f.meta or memo.annotate(split_attribution(f.text)[2], f.speaker, f.timestamp))
            for i, f in enumerate(facts)]


def _first_turns(items: Sequence[MemoryItem], position: dict[str, int]) -> list[int]:
    """Per item, the dialogue position of its earliest source turn (when it was first said)."""
    return [min(position[s] for s in item.source_ids) for item in items]


def _versions(items: list[MemoryItem], first: list[int]) -> list[MemoryItem]:
    """Link every fact that sets a slot to the later facts setting the same slot (query time decides which of
    them supersede it: that depends on the strategy's thresholds, not on what is stored); ``first`` as
    :func:`_first_turns` gives it."""
    by_slot: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        if item.meta.slot is not None:
            by_slot.setdefault(item.meta.slot, []).append(i)
    out = list(items)
    for members in by_slot.values():
        members.sort(key=lambda i: (first[i], i))
        for i in members:
            later = tuple(items[j].id for j in members if first[j] > first[i])
            if later:
                out[i] = dataclasses.replace(items[i], versions=later)
    return out


@lru_cache(maxsize=100_000)
def _undated_set(text: str) -> frozenset[str]:
    """The content stems of ``text`` outside its date spans (memoised like :func:`content_set`): what a correction is
    about, not when; dates, resolved ones included, would make every fact of its month or year share two stems."""
    return content_set(without_dates(text))


def _lifecycle(items: list[MemoryItem], actors: int, policy: Lifecycle, first: list[int]) -> list[MemoryItem]:
    """Mark supersession and retraction. Only ``items[:actors]`` (the L0 facts) act; every item can be a target;
    ``first`` as :func:`_first_turns` gives it."""
    texts = [split_attribution(item.text)[2] for item in items]
    bodies = [content_set(text) for text in texts]
    undated = [_undated_set(text) for text in texts]
    superseded: list[str | None] = [None] * len(items)
    retracted: list[str | None] = [None] * len(items)

    def targets(actor: int) -> list[int]:
        return [j for j in range(len(items)) if first[j] < first[actor] and items[j].speaker == items[actor].speaker
                and items[j].kind != "retraction"]

    for a in range(actors):
        kind = items[a].kind
        if kind == "correction" and policy.supersession:
            topic = undated[a] - CUE_STEMS
            for j in targets(a):
                if superseded[j] is None and len(undated[j] & topic) >= 2:
                    superseded[j] = items[a].id
        elif kind == "retraction" and policy.forget_guard:
            topic = retraction_topic(texts[a])
            candidates = targets(a)
            if topic:
                need = min(2, len(topic))
                hit = [j for j in candidates if topic_overlap(topic, bodies[j]) >= need]
                if len(topic) == 1 and hit:  # one word ("the dog thing is dead") names its latest mention
                    hit = [j for j in hit if first[j] == max(first[k] for k in hit)]
            else:  # "scratch that": the speaker's previous turn
                latest = max((first[j] for j in candidates), default=None)
                hit = [j for j in candidates if first[j] == latest]
            for j in hit:
                retracted[j] = retracted[j] or items[a].id
    return [dataclasses.replace(item, superseded_by=superseded[i], retracted_by=retracted[i])
            for i, item in enumerate(items)]


def _turn_layer(sessions: Sequence[Session], policy: Extraction, context: int, memo: IngestMemo) -> list[MemoryItem]:
    """Every turn as an ``RT`` memory, found also by the ``context`` turns before it in its session (the question
    a reply answers)."""
    facts, contexts = [], []
    for session in sessions:
        for i, turn in enumerate(session.turns):
            facts.append(memo.turn_fact(turn, policy))
            contexts.append(" ".join(f"{t.speaker}: {t.text}" for t in session.turns[max(0, i - context):i]))
    return [dataclasses.replace(item, context=before) for item, before in zip(_items("RT", facts, memo), contexts)]


def _rollup(session: Session, facts: list[MemoryItem], index: int) -> MemoryItem | None:
    """One L1 summary: the session's keywords and its most salient facts."""
    if not facts:
        return None
    best = sorted(range(len(facts)), key=lambda i: (-facts[i].salience, i))[:ROLLUP_FACTS]
    top = [facts[i] for i in sorted(best)]
    counts: Counter[str] = Counter()
    for fact in facts:
        counts.update(t for t in tokens(split_attribution(fact.text)[2]) if t not in STOPWORDS and not t.isdigit())
    keywords = [w for w, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:ROLLUP_KEYWORDS]]
    speakers = list(dict.fromkeys(f.speaker for f in facts if f.speaker))
    when = f" ({format_date(session.timestamp)})" if session.timestamp else ""
    lines = [f"Session summary{when}: {' and '.join(speakers)} talked about {', '.join(keywords)}."]
    lines += [f"{f.speaker}: {split_attribution(f.text)[2]}" for f in top]
    text = " ".join(words(" ".join(lines))[:ROLLUP_MAX_WORDS])
    sources = tuple(dict.fromkeys(s for f in top for s in f.source_ids))
    return MemoryItem(f"L1:{index}", "L1", text, sources, None, session.timestamp, "summary", 1.0)


def _latest_sessions(sessions: Sequence[Session]) -> list[Session]:
    """The last session, plus any other session on the same calendar day."""
    if not sessions:
        return []
    last = sessions[-1]
    if last.timestamp is None:
        return [last]
    return [s for s in sessions if s.timestamp is not None and s.timestamp.date() == last.timestamp.date()]


def embedding_text(item: MemoryItem) -> str:
    speaker, _, body = split_attribution(item.text)
    text = f"{speaker}: {body}" if speaker else item.text
    return f"{item.context} {text}" if item.context else text


def _extract(extractor: Extractor, batch: list[list[Turn]], policy: Extraction) -> list[list[ExtractedFact]]:
    """The extractor's facts of every window, in window order. Windows are extracted independently, so an extractor
    that waits on a model server (one with a ``concurrency`` limit) gets that many windows in flight at once."""
    parallel = min(getattr(extractor, "concurrency", 1), len(batch))
    if parallel <= 1:
        return [extractor.extract(window, policy) for window in batch]
    contexts = [contextvars.copy_context() for _ in batch]  # each call tallied where ingestion is accounted
    with ThreadPoolExecutor(parallel) as pool:  # map yields in order and cancels what is left on an error
        return list(pool.map(lambda i: contexts[i].run(extractor.extract, batch[i], policy), range(len(batch))))


def build_store(conversation: Conversation, policy: Policy, extractor: Extractor, embed: Embed,
                embedder_name: str, *, memo: IngestMemo | None = None,
                rollup_sessions: Collection[str] | None = None, fuser: FusionJudge | None = None) -> MemoryStore:
    """Run the whole ingestion pipeline for one conversation, its image knowledge base included; ``memo`` (of this conversation and ingestion policy)
    skips the per-window and per-fact work of an earlier build; session rollups cover ``rollup_sessions`` only
    (default: every session); ``fuser`` judges fusion (default: the rule judge)."""
    ex: Extraction = policy.extraction
    memo = memo if memo is not None else IngestMemo()
    sessions = [dataclasses.replace(s, turns=tuple(timed_turns(s))) for s in conversation.sessions]
    turns = [t for s in sessions for t in s.turns]
    position = {t.id: i for i, t in enumerate(turns)}
    if len(position) != len(turns):
        raise ValueError(f"conversation {conversation.id}: turn ids are not unique")
    facts: list[ExtractedFact] = []
    all_windows = [w for s in sessions for w in windows(s.turns, ex.window_size, ex.window_overlap)]
    for window, extracted in zip(all_windows, memo.extract(extractor, all_windows, ex)):
        facts.extend(_cap([_anchored(f, window) for f in extracted], ex.max_facts_per_window))
    facts = _dedup(facts, ex.dedup_threshold)
    if ex.supplement:
        covered = {s for f in facts for s in f.source_ids}
        facts += [memo.turn_fact(t, ex) for t in turns if t.id not in covered]
    facts.sort(key=lambda f: min(position[s] for s in f.source_ids))
    l0 = _items("L0", facts, memo)
    if policy.features.turn_layer:  # every turn, dated; the latest sessions' turns need no SM copy
        sm = _turn_layer(sessions, ex, policy.features.turn_context, memo)
    else:
        sm = _items("SM", [memo.turn_fact(t, ex) for s in _latest_sessions(sessions) for t in s.turns], memo)
    first = _first_turns(l0 + sm, position)
    marked = _versions(_lifecycle(l0 + sm, len(l0), policy.lifecycle, first), first)
    l0, sm = marked[:len(l0)], marked[len(l0):]
    l2 = []
    if policy.features.profile_layer:
        l2 = [dataclasses.replace(item, id=f"L2:{i}", layer="L2")
              for i, item in enumerate(x for x in l0 if x.kind in ("profile", "correction"))]
    l1: list[MemoryItem] = []
    if policy.features.session_rollups:
        session_of = {t.id: s.id for s in sessions for t in s.turns}
        live = [x for x in l0 if x.salience >= policy.lifecycle.prune_threshold and not x.retracted
                and x.superseded_by is None and not x.versions]  # a summary states what is current
        for session in (s for s in sessions if rollup_sessions is None or s.id in rollup_sessions):
            rollup = _rollup(session, [x for x in live if session_of[x.source_ids[0]] == session.id], len(l1))
            if rollup is not None:
                l1.append(rollup)
    pk = pack_items(turns, policy.features.fusion, fuser) if policy.features.fusion.enabled else []
    items = l0 + l1 + l2 + sm + pk
    embeddings = embed([embedding_text(item) for item in items])
    return MemoryStore(conversation.id, items, turns, embeddings, embedder_name,
                       build_ikb(conversation.images(), turns), conversation.events())
