"""The scene-to-sensor benchmark: memory strategies against the raw-event peers, judged by each question's checklist.

Every system packs a context of at most about 160 words per question from the events the asking user may see that
were observed before the question (``asked_at``). Judged by content, the same way for every system
(:func:`evolve.benchmarks.scenes.coverage`): a checklist item counts when all its content words reach the context.

* memory strategies (``--strategy``, default: the baseline, the hand-set ``locomo_answer_turns.yaml``, the LoCoMo
  night's final and the scenes night's final ``scenes_final.yaml``) through the offline harness, context only, each
  also with ``features.fusion`` on at its defaults (``+fusion``: the events fused into packs,
  :mod:`evolve.runtime.fusion`), and with ``retrieval.graph`` on at its defaults too (``+fusion+graph``: the first
  hits expanded along the memory graph, :mod:`evolve.runtime.graph`);
* ``bm25x``: every raw event as ``(date) source: text``, ranked by BM25 over English stems without function words,
  packed in rank order to 160 words;
* ``dense``: the same events ranked by the bundled all-MiniLM-L6-v2 embedder's cosine similarity;
* ``mem0`` (``--mem0``): Mem0 OSS (:mod:`evolve.systems.mem0`, offline: MiniLM, in-memory Qdrant, ``infer`` off) with
  ``experiments/mem0/baseline.yaml``'s ingestion (one event per memory, its source named, dated), its search widened
  to 30 results; Mem0 has no notion of when a question is asked, so the items from events after the question are
  dropped before the 160 words are packed.

Per question kind (event, device, causal, conflict) and over all: checklist coverage (mean share of items carried),
complete (every item carried), the answer carried, and mean words. Then the fusion judge against the generator's
truth: of the pairs of events it packs together, the share that belong together (the same happening, or two one
leads to: precision), and of those pairs, the share it packs (recall). Run from the repository root:

    python experiments/bench/scenes_report.py [--bench scenegen:0] [--strategy PATH ...] [--mem0] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import bm25s
import yaml
import numpy as np

from evolve import Harness, load_benchmark, load_strategy
from evolve.benchmarks import Benchmark, Question, Turn
from evolve.benchmarks.scene_gen import generate_scenes
from evolve.benchmarks.scenes import SCENE_KINDS, carried, coverage, linked_pairs
from evolve.english import english_terms
from evolve.runtime import default_embedder
from evolve.runtime.fusion import FusionJudge, fuse
from evolve.runtime.text import count_words
from evolve.strategy.paths import with_value
from evolve.strategy.policy import Fusion

ROOT = Path(__file__).resolve().parents[2]
STRATEGIES = [ROOT / "strategies" / "baseline.yaml", ROOT / "experiments" / "strategies" / "locomo_answer_turns.yaml",
              ROOT / "experiments" / "strategies" / "locomo_answer_final.yaml",
              ROOT / "experiments" / "strategies" / "scenes_final.yaml"]
BUDGET = 160


def raw_text(turn: Turn) -> str:
    return f"({turn.timestamp:%d %B %Y %H:%M}) {turn.speaker}: {turn.text}"


def peer_contexts(bench: Benchmark, ranker: str) -> dict[str, str]:
    """Each question's context from the raw events before it, ranked by ``ranker`` (bm25x, dense), to the budget."""
    embedder = default_embedder() if ranker == "dense" else None
    out = {}
    for cid, conversation in bench.conversations.items():
        turns = conversation.turns()
        texts = [raw_text(t) for t in turns]
        if embedder is not None:
            vectors = embedder.encode(texts)
        else:
            index = bm25s.BM25()
            index.index([english_terms(t) or ["_"] for t in texts], show_progress=False)
        for q in (q for q in bench.questions if q.conversation_id == cid):
            seen = np.array([q.asked_at is None or t.timestamp <= q.asked_at for t in turns])
            if embedder is not None:
                scores = vectors @ embedder.encode([q.question])[0]
            else:
                terms = english_terms(q.question)
                scores = np.asarray(index.get_scores(terms)) if terms else np.zeros(len(turns))
            scores = np.where(seen, scores, -np.inf)
            packed, words = [], 0
            for i in np.argsort(-scores, kind="stable"):
                if not np.isfinite(scores[i]) or words + count_words(texts[i]) > BUDGET:
                    break
                packed.append(texts[i])
                words += count_words(texts[i])
            out[q.id] = "\n".join(packed)
    return out


def mem0_contexts(bench: Benchmark) -> dict[str, str]:
    """Each question's context from Mem0 over the user's events, items after the question dropped, to the budget."""
    from evolve.runtime.external import ExternalSystem, load_knob_schema

    mem0 = ROOT / "experiments" / "mem0"
    knobs = yaml.safe_load((mem0 / "baseline.yaml").read_text())
    knobs = {**knobs, "ingest": {**knobs["ingest"], "dated": True}, "search": {**knobs["search"], "top_k": 30}}
    runtime = ExternalSystem("evolve.systems.mem0:Mem0Session", load_knob_schema(mem0 / "knobs.schema.json"),
                             timeout_s=1800).runtime(knobs)
    out = {}
    for cid, conversation in bench.conversations.items():
        when = {t.id: t.timestamp for t in conversation.turns()}
        store = runtime.ingest(conversation)
        for q in (q for q in bench.questions if q.conversation_id == cid):
            packed, words = [], 0
            for item in runtime.ask(store, q.question, q.asked_at, answer=False).packed:
                if all(when[s] <= q.asked_at for s in item.source_ids if s in when):
                    if words + count_words(item.text) > BUDGET:
                        break
                    packed.append(item.text)
                    words += count_words(item.text)
            out[q.id] = "\n".join(packed)
    return out


def fused(strategy: dict) -> dict:
    """``strategy`` with fusion on (the section at its defaults when the strategy leaves it out)."""
    return with_value(strategy, "features.fusion.enabled", True)


def expanded(strategy: dict) -> dict:
    """``strategy`` with the graph expansion on (the section at its defaults when the strategy leaves it out)."""
    return with_value(strategy, "retrieval.graph.enabled", True)


def strategy_contexts(bench: Benchmark, strategy: dict) -> dict[str, str]:
    run = Harness(bench, progress=False).evaluate(strategy, answer=False)
    return {t.question_id: "\n".join(item["text"] for item in t.packed) for t in run.traces}


def pack_agreement(spec: str, bench: Benchmark, judge: FusionJudge | None = None) -> dict | None:
    """Precision and recall of the fusion judge's event pairs (default: the rule judge) against the generator's truth
    (``None``: no truth)."""
    if not spec.startswith("scenegen"):
        return None
    args = [int(a) for a in spec.split(":")[1:]]
    truth = set().union(*(linked_pairs(home) for home in generate_scenes(*args).homes))
    got = set()
    for conversation in bench.conversations.values():
        for pack in fuse(conversation.turns(), Fusion(enabled=True), judge):
            ids = sorted(t.id for t in pack.members)
            got |= {frozenset((a, b)) for i, a in enumerate(ids) for b in ids[i + 1:]}
    right = len(got & truth)
    return {"pairs": len(got), "truth_pairs": len(truth), "precision": right / len(got) if got else 0.0,
            "recall": right / len(truth) if truth else 0.0}


def scores(questions: list[Question], contexts: dict[str, str]) -> dict[str, dict]:
    """Per kind and over all: coverage, complete, answer carried, words (means over the kind's questions)."""
    rows: dict[str, list[tuple[float, bool, bool, int]]] = defaultdict(list)
    for q in questions:
        text = contexts[q.id]
        cover = coverage(q.checklist, text)
        row = (cover, cover == 1.0, carried(q.answer, text), count_words(text))
        rows[q.category.removeprefix("scene_")].append(row)
        rows["all"].append(row)
    return {kind: {"n": len(r), "coverage": float(np.mean([x[0] for x in r])),
                   "complete": float(np.mean([x[1] for x in r])), "answer": float(np.mean([x[2] for x in r])),
                   "words": float(np.mean([x[3] for x in r]))} for kind, r in rows.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default="scenegen:0", help="scenegen[:SEED[:HOMES]] or scenes:PATH")
    parser.add_argument("--strategy", type=Path, action="append", help="memory strategy (repeatable)")
    parser.add_argument("--mem0", action="store_true", help="also Mem0 OSS over the raw events (a few minutes)")
    parser.add_argument("--out", type=Path, help="write the table as markdown (and JSON beside it)")
    args = parser.parse_args(argv)
    bench = load_benchmark(args.bench)
    systems = {}
    for path in args.strategy or STRATEGIES:
        strategy = load_strategy(path)
        systems[path.stem] = strategy_contexts(bench, strategy)
        systems[f"{path.stem}+fusion"] = strategy_contexts(bench, fused(strategy))
        systems[f"{path.stem}+fusion+graph"] = strategy_contexts(bench, expanded(fused(strategy)))
    systems |= {ranker: peer_contexts(bench, ranker) for ranker in ("bm25x", "dense")}
    if args.mem0:
        systems["mem0"] = mem0_contexts(bench)
    table = {name: scores(bench.questions, contexts) for name, contexts in systems.items()}
    devices = sorted({t.speaker.split("'s ")[-1] for c in bench.conversations.values() for t in c.turns()})
    lines = [f"`{args.bench}`: {len(bench.questions)} questions over {len(bench.conversations)} user memories, "
             f"{sum(len(c.turns()) for c in bench.conversations.values())} events from {len(devices)} device kinds "
             f"({', '.join(devices)}).", "",
             "| system | kind | n | checklist coverage | complete | answer carried | words |",
             "|---|---|---|---|---|---|---|"]
    for name, kinds in table.items():
        for kind in (*SCENE_KINDS, "all"):
            if kind in kinds:
                r = kinds[kind]
                lines.append(f"| {name} | {kind} | {r['n']} | {r['coverage']:.3f} | {r['complete']:.3f} | "
                             f"{r['answer']:.3f} | {r['words']:.1f} |")
    agreement = pack_agreement(args.bench, bench)
    if agreement is not None:
        lines += ["", f"Fusion at its defaults against the generator's truth: {agreement['pairs']} event pairs packed "
                      f"together, precision {agreement['precision']:.3f}, recall {agreement['recall']:.3f} (of "
                      f"{agreement['truth_pairs']} pairs that belong together)."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(f"# Scene-to-sensor benchmark\n\n{text}\n")
        args.out.with_suffix(".json").write_text(json.dumps({"systems": table, "fusion": agreement}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
