"""Per-question measures: what one question's trace says about its evidence, derived from what the runtime
stored, retrieved and packed for it."""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from evolve.benchmarks.types import Question
from evolve.observe.answer import answer_check
from evolve.observe.diagnosis import answer_loss, diagnose, event_loss, image_loss
from evolve.observe.evidence import packed_evidence
from evolve.observe.judge import evidence_recall, first_seen, recall_any_all
from evolve.observe.ladder import derives_from
from evolve.observe.trace import RECALL_KS, Trace
from evolve.runtime.assembly import raw_turn
from evolve.runtime.fusion import PACK_LAYER
from evolve.runtime.ikb import NAME_REACH
from evolve.runtime.ikb_query import IKB_LAYER, reachable
from evolve.runtime.render import render
from evolve.runtime.store import MemoryStore


def measure(trace: Trace, q: Question, known: list[str], store: MemoryStore, turn_text: Mapping[str, str],
            session_of: Mapping[str, str], images_of: Mapping[str, Sequence[str]]) -> Trace:
    """Fill the evidence recall, retrieval recall, staleness, packed evidence, gold and packed images, answer check
    and diagnosis of the trace of ``q`` (``known``: its gold turns of the conversation; ``turn_text``,
    ``session_of`` and ``images_of``, the ids of the images a turn shares, by turn id of the conversation) in
    place; return it."""
    sources = [hit["source_ids"] for hit in trace.retrieved]
    trace.evidence_recall = {str(k): evidence_recall(known, sources, k) for k in RECALL_KS}
    if known and not q.abstention:
        units = {"turn": (set(known), first_seen(sources)),
                 "session": ({session_of[t] for t in known}, first_seen(sources, session_of.__getitem__))}
        trace.retrieval_recall = {
            level: {f"recall_{name}@{k}": value for k in RECALL_KS
                    for name, value in zip(("any", "all"), recall_any_all(gold, ranked, k))}
            for level, (gold, ranked) in units.items()}
    if q.outdated:
        trace.gold_outdated = list(q.outdated)
        hidden = {f["id"] for f in trace.filtered}  # what the lifecycle filter hid never reaches the answerer
        visible = [hit for hit in trace.retrieved if hit["id"] not in hidden]
        trace.stale_retrieved = {str(k): any(derives_from(hit, q.outdated) for hit in visible[:k]) for k in (5, 10)}
        trace.stale_packed = packed_evidence(list(q.outdated), turn_text, trace.packed)
    if images_of:
        trace.gold_images = [i for t in known for i in images_of.get(t, ())]
        trace.packed_images = list(dict.fromkeys(i for item in trace.packed for t in item["source_ids"]
                                                 for i in images_of.get(t, ())))
    if known:
        trace.packed_evidence = packed_evidence(known, turn_text, trace.packed)
        trace.evidence_share = round(len(trace.packed_evidence) / len(known), 4)
        trace.all_evidence_packed = len(trace.packed_evidence) == len(known)
        trace.answer_in_evidence, trace.answer_anywhere = answer_check(q.answer, known, trace.packed)
        if trace.answer_in_evidence is False:
            retrieved = [hit["id"] for hit in trace.retrieved if derives_from(hit, known)]
            cited = {s for item in trace.packed for s in item["source_ids"]}
            trace.answer_loss = answer_loss(q.answer, _dated_texts(store, trace.stored_ids),
                                            _dated_texts(store, retrieved), trace.answer_anywhere,
                                            [turn_text[t] for t in known] if set(known) <= cited else [])
    failed = not trace.correct or trace.answer_in_evidence is False
    if trace.gold_images and failed:
        trace.image_loss = _image_loss(trace, store, q.question)
    gold_events = [t for t in known if t in store.events]
    if len(gold_events) > 1 and failed:
        trace.event_loss = event_loss(gold_events, trace.packed_evidence or (),
                                      (item.source_ids for item in store.items if item.layer == PACK_LAYER))
    return diagnose(trace)


def _image_loss(trace: Trace, store: MemoryStore, question: str) -> str | None:
    """:func:`~evolve.observe.diagnosis.image_loss` of the trace: the images its IKB item carries, and the gold
    images whose name, recovered anywhere in reach of the IKB, that item does not say."""
    item = next((p for p in trace.packed if p.get("layer") == IKB_LAYER), None)
    routed = item.get("image_ids", []) if item else []
    known = {i.id for i in store.ikb.images}
    unnamed = [g for g in trace.gold_images if g not in known or (name := store.ikb.image(g).name(NAME_REACH)) is None
               or item is None or name not in item["text"]]
    return image_loss(trace.route, trace.gold_images, routed, unnamed,
                      reachable(store.ikb, question) if trace.route is None else ())


def _dated_texts(store: MemoryStore, item_ids: Iterable[str]) -> list[str]:
    """The texts of stored items and of the turns they derive from (which ``assembly.unit: turn`` packs in their
    place), dated as a context line would show them."""
    items = [store.item(i) for i in item_ids if i in store.position]
    turns = dict.fromkeys(s for item in items for s in item.source_ids if s in store.turns)
    return ([render(item.id, item.layer, item.text, item.timestamp, "dialogue") for item in items]
            + [raw_turn(store.turns[t], "dialogue").text for t in turns])
