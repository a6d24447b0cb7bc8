"""Which generated probes a conversation keeps: a mix matched to a target distribution over LoCoMo's categories, at
least one per ``per_turns`` turns when the conversation has them, optionally without those the raw-turn BM25 peer
answers from its first hit (the difficulty filter)."""
from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from typing import Literal

import bm25s
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from evolve.benchmarks.locomo import format_locomo_date
from evolve.benchmarks.probe_base import Probe
from evolve.benchmarks.types import Conversation, Turn
from evolve.english import english_terms
from evolve.words import content_words

#: The LoCoMo category each probe kind stands for (``llm``: the questioner's, counted apart).
KIND_CATEGORY = {"paraphrase": "single_hop", "image": "single_hop", "attribute": "single_hop",
                 "temporal": "temporal", "link": "temporal", "aggregation": "multi_hop", "multi_hop": "multi_hop",
                 "inference": "open_domain", "update": "single_hop", "prior": "single_hop", "retraction": "single_hop",
                 "photo_count": "multi_hop", "photo_name": "multi_hop"}
#: LoCoMo's mix of its answerable categories (dev4: single-hop 53 %, temporal 22 %, multi-hop 19 %, open-domain 5 %).
LOCOMO_MIX = {"single_hop": 0.53, "temporal": 0.22, "multi_hop": 0.19, "open_domain": 0.05}


def locomo_category(category: str) -> str:
    """The LoCoMo category a question counts in: a probe's is the one its kind stands for (``probe_temporal`` →
    ``temporal``; the questioner's ``probe_llm`` stays as it is), any other question's its own."""
    kind = category.removeprefix("probe_")
    return KIND_CATEGORY.get(kind, category) if category.startswith("probe_") else category


class ProbeSettings(BaseModel):
    """How probe questions are chosen (run config ``probes:``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mix: dict[Literal["single_hop", "temporal", "multi_hop", "open_domain"], float] = Field(
        default_factory=lambda: dict(LOCOMO_MIX),
        description="target share of each LoCoMo category among a conversation's probes (normalised to sum 1); a "
                    "category the conversation yields too few probes for is filled as far as it goes")
    per_turns: int = Field(3, ge=1, le=1000, description="at least one probe per this many turns, when the "
                                                         "conversation yields enough")
    asked: Literal["latest", "drawn"] = Field(
        "latest", description="when a probe is asked, given a lifecycle timeline: latest: the last session at which "
                              "its answer holds; drawn: a session drawn between its evidence and that one")
    kind_caps: dict[str, float] = Field(
        default_factory=dict,
        description="at most this share of a conversation's probes are of a kind (taken out of its category's "
                    "share), so a kind a conversation yields in bulk does not fill its category (image probes are "
                    "44 % of dev4's probes uncapped). None by default: within the evolution half, capping images "
                    "at 0.05 or 0.15 predicted labelled deltas worse (experiments/bench/validity.py)")
    gallery: bool = Field(
        False, description="also ask how many photos of a kind a speaker shared and the names given to their subjects "
                           "(photo_count, photo_name), from the photos the reference image knowledge base files")
    difficulty: Literal["drop_trivial", "keep"] = Field(
        "keep", description="keep: every probe may be drawn; drop_trivial: leave out the probes that raw-turn BM25 "
                            "answers from its first hit (the hit is an evidence turn and holds every answer word). "
                            "keep predicted labelled deltas better within the evolution half "
                            "(experiments/bench/validity.py)")

    @field_validator("kind_caps")
    @classmethod
    def _caps(cls, caps: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(caps) - set(KIND_CATEGORY))
        if unknown:
            raise ValueError(f"unknown probe kind(s) {unknown}; kinds: {sorted(KIND_CATEGORY)}")
        if any(not math.isfinite(v) or not 0 <= v <= 1 for v in caps.values()):
            raise ValueError(f"caps must be shares in [0, 1], got {caps}")
        return caps

    @field_validator("mix")
    @classmethod
    def _shares(cls, mix: dict[str, float]) -> dict[str, float]:
        if any(not math.isfinite(v) or v < 0 for v in mix.values()) or not sum(mix.values()) > 0:
            raise ValueError(f"shares must be finite, >= 0 and not all 0, got {mix}")
        total = sum(mix.values())
        return {k: v / total for k, v in mix.items()}


def raw_turn_text(turn: Turn) -> str:
    """A turn as the raw-turn peers read it: ``(session date) Speaker: text``."""
    return f"({format_locomo_date(turn.timestamp)}) {turn.speaker}: {turn.text}" if turn.timestamp else \
        f"{turn.speaker}: {turn.text}"


class FirstHit:
    """The raw-turn BM25 peer (``bm25x``: English stop list, Snowball stems, over dated raw turns) of one
    conversation, asked for its first hit."""

    def __init__(self, conversation: Conversation):
        self.turns = conversation.turns()
        self.index = bm25s.BM25()
        self.index.index([english_terms(raw_turn_text(t)) or ["_"] for t in self.turns], show_progress=False)

    def first(self, question: str) -> Turn | None:
        terms = english_terms(question)
        if not terms:
            return None
        scores = np.asarray(self.index.get_scores(terms))
        return self.turns[int(np.argmax(scores))] if scores.max() > 0 else None

    def trivial(self, probe: Probe) -> bool:
        """Whether the first hit is an evidence turn holding every content word of the answer."""
        hit = self.first(probe.question)
        return hit is not None and hit.id in probe.evidence and \
            content_words(probe.answer) <= content_words(raw_turn_text(hit))


def quotas(available: dict[str, int], mix: dict[str, float], minimum: int,
           capped: frozenset[str] = frozenset()) -> dict[str, int]:
    """How many probes each category keeps: the largest set in exactly the ``mix`` the pools allow, grown to
    ``minimum`` (if the pools hold it) by filling the categories in proportion, each up to its pool; a ``capped``
    pool is never grown past its share of that set."""
    shares = {c: s for c, s in mix.items() if s > 0 and available.get(c, 0) > 0}
    if not shares:
        return {}
    total = sum(shares.values())
    shares = {c: s / total for c, s in shares.items()}
    exact = min(available[c] / s for c, s in shares.items())
    target = min(sum(available[c] for c in shares), max(math.floor(exact), minimum))
    available = {c: min(n, max(1, math.floor(target * shares[c]))) if c in capped and c in shares else n
                 for c, n in available.items()}
    target = min(target, sum(available[c] for c in shares))
    out = {c: 0 for c in shares}
    open_ = dict(shares)
    left = target
    while left > 0 and open_:
        weight = sum(open_.values())
        grant = {c: min(available[c] - out[c], max(1, math.floor(left * s / weight))) for c, s in open_.items()}
        for c in sorted(grant, key=lambda c: -open_[c]):
            step = min(grant[c], left)
            out[c] += step
            left -= step
        open_ = {c: s for c, s in open_.items() if out[c] < available[c]}
    return out


def _pool(kind: str, caps: dict[str, float]) -> str:
    """The pool a probe of ``kind`` is drawn from: its category, or the kind itself when it is capped."""
    return f"kind:{kind}" if kind in caps else KIND_CATEGORY.get(kind, "single_hop")


def _pool_mix(mix: dict[str, float], caps: dict[str, float]) -> dict[str, float]:
    """``mix`` with each capped kind's share taken out of its category's (never below 0)."""
    out = dict(mix)
    for kind, cap in caps.items():
        category = KIND_CATEGORY[kind]
        share = min(cap, out.get(category, 0.0))
        out[category] = out.get(category, 0.0) - share
        out[f"kind:{kind}"] = share
    return out


def _draw(probes: list[Probe], indices: list[int], settings: ProbeSettings, minimum: int,
          rng: random.Random) -> list[int]:
    """``indices`` of ``probes`` drawn per pool (a category, or a capped kind) to the quotas of :func:`quotas`."""
    caps = settings.kind_caps
    pools: dict[str, list[int]] = defaultdict(list)
    for i in indices:
        pools[_pool(probes[i].kind, caps)].append(i)
    kept: list[int] = []
    counts = {c: len(p) for c, p in pools.items()}
    capped = frozenset(f"kind:{k}" for k in caps)
    for category, n in sorted(quotas(counts, _pool_mix(settings.mix, caps), minimum, capped).items()):
        pool = list(pools[category])
        rng.shuffle(pool)
        kept += pool[:n]
    return kept


def select(conversation: Conversation, probes: list[Probe], settings: ProbeSettings) -> list[Probe]:
    """The probes ``conversation`` keeps (in generator order), drawn per category to the quotas of :func:`quotas`
    with a generator seeded by the conversation id: under ``drop_trivial`` from the non-trivial ones, the trivial
    ones drawn only to reach one probe per ``per_turns`` turns when the others fall short."""
    minimum = math.ceil(len(conversation.turns()) / settings.per_turns)
    rng = random.Random(f"mix:{conversation.id}")
    everything = list(range(len(probes)))
    if settings.difficulty == "keep" or not probes:
        return [probes[i] for i in sorted(_draw(probes, everything, settings, minimum, rng))]
    peer = FirstHit(conversation)
    easy = {i for i in everything if peer.trivial(probes[i])}
    kept = _draw(probes, [i for i in everything if i not in easy], settings, minimum, rng)
    if len(kept) < minimum:
        kept += _draw(probes, sorted(easy), settings, minimum - len(kept), rng)[:minimum - len(kept)]
    return [probes[i] for i in sorted(kept)]


def mix_of(kinds: list[str]) -> dict[str, int]:
    """Probe count per LoCoMo category of a list of probe kinds."""
    return dict(Counter(KIND_CATEGORY.get(k, "llm") for k in kinds))
