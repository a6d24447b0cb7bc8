"""Packed context of the project's strategies side by side with raw-turn peers, on system-neutral measures.

Systems, on a LoCoMo-format file (default: the four dev conversations):

* the project's strategies: ``strategies/baseline.yaml`` plus every ``--strategy`` file, evaluated up to the packed
  context (no answerer);
* raw-turn peers: each turn of the conversation is one unit, ``"(session date) Speaker: text [photo caption]"``,
  ranked for the question by ``bm25s`` (its English stop words), by ``bm25x`` (``bm25s`` over the terms of a full
  English function-word list and the Snowball stemmer, ``retrieval.lexical`` ``english`` + ``snowball``: the
  tokenization AutoRAG's BM25 uses, the stronger lexical peer), by dense similarity (all-MiniLM-L6-v2 through the
  project's embedder), or by RRF (k = 60) of ``bm25s`` and dense (``rrf``) or of ``bm25x`` and dense (``rrfx``),
  and packed in rank order to 100 / 160 / 400 words: a turn that does not fit is skipped, packing stops once
  within 3 words of the budget;
* the gold-turn ceiling: the question's gold evidence turns only, dated the same way.

Measures per system, over the questions the answer check counts (scored, gold evidence known, an answer with a
content word; :mod:`evolve.observe.answer`): mean whitespace words of the packed text, answer in evidence, answer
anywhere, all gold turns cited (every gold turn id among the packed items' sources), content-checked evidence
(every gold turn carried, :mod:`evolve.observe.evidence`). Each strategy is compared, paired by question (McNemar
and bootstrap CI, :func:`evolve.verify.statistics.paired_comparison`), on answer in evidence with the best peer at
the smallest budget not below its mean words, overall and per category.

    python experiments/bench/bench_context.py [--file PATH] [--conversations conv-41,conv-42]
        [--strategy PATH ...] [--out report.md]

``--out`` writes the markdown report and, next to it, the same figures as JSON (``.json``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import bm25s
import numpy as np

from evolve.benchmarks import Benchmark, Question, load_benchmark
from evolve.benchmarks.locomo import format_locomo_date
from evolve.data import BASELINE_PATH
from evolve.observe.answer import answer_check
from evolve.observe.evidence import packed_evidence
from evolve.observe.harness import Harness
from evolve.runtime.embedder import default_embedder
from evolve.runtime.lexical import Analyzer
from evolve.strategy.artifact import load_strategy
from evolve.verify.statistics import paired_comparison

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILE = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
BUDGETS = (100, 160, 400)
RANKERS = ("bm25s", "bm25x", "dense", "rrf", "rrfx")
#: How ``bm25x`` reads turns and questions.
BM25X = Analyzer("english", "snowball")
RRF_K = 60
MEASURES = ("words", "answer_in_evidence", "answer_anywhere", "all_cited", "evidence_content")


def raw_turns(bench: Benchmark) -> dict[str, list[tuple[str, str]]]:
    """Per conversation, ``(turn id, "(session date) Speaker: text")`` in conversation order."""
    return {cid: [(t.id, f"({format_locomo_date(t.timestamp)}) {t.speaker}: {t.text}" if t.timestamp
                   else f"{t.speaker}: {t.text}") for t in conv.turns()]
            for cid, conv in bench.conversations.items()}


def rankings(turns: list[str], questions: list[str]) -> dict[str, list[list[int]]]:
    """Per ranker, each question's full ranking of ``turns`` (indices, best first)."""
    index = bm25s.BM25()
    index.index(bm25s.tokenize(turns, stopwords="en", show_progress=False), show_progress=False)
    ranked, _ = index.retrieve(bm25s.tokenize(questions, stopwords="en", show_progress=False), k=len(turns),
                               show_progress=False)
    stemmed = bm25s.BM25()
    stemmed.index([BM25X.terms(t) for t in turns], show_progress=False)
    embedder = default_embedder()
    similarity = embedder.encode(questions) @ embedder.encode(turns).T
    out: dict[str, list[list[int]]] = {r: [] for r in RANKERS}
    for row, question in enumerate(questions):
        bm, dense = [int(x) for x in ranked[row]], [int(x) for x in np.argsort(-similarity[row], kind="stable")]
        terms = BM25X.terms(question)
        scores = np.asarray(stemmed.get_scores(terms)) if terms else np.zeros(len(turns))
        out["bm25s"].append(bm)
        out["bm25x"].append([int(x) for x in np.argsort(-scores, kind="stable")])  # ties in conversation order
        out["dense"].append(dense)
        out["rrf"].append(fuse(bm, dense))
        out["rrfx"].append(fuse(out["bm25x"][-1], dense))
    return out


def fuse(*orders: list[int]) -> list[int]:
    """Reciprocal-rank fusion (k = :data:`RRF_K`) of full rankings, best first."""
    fused: dict[int, float] = {}
    for order in orders:
        for rank, x in enumerate(order):
            fused[x] = fused.get(x, 0.0) + 1.0 / (RRF_K + rank + 1)
    return sorted(fused, key=lambda x: -fused[x])


def pack(order: list[int], turns: list[tuple[str, str]], budget: int) -> list[dict]:
    """Turns in rank order, first fit, until within 3 words of ``budget``."""
    used, packed = 0, []
    for x in order:
        n = len(turns[x][1].split())
        if used + n > budget:
            continue
        used += n
        packed.append({"source_ids": [turns[x][0]], "text": turns[x][1]})
        if used >= budget - 3:
            break
    return packed


def peer_contexts(bench: Benchmark, questions: list[Question]) -> dict[str, dict[str, list[dict]]]:
    """``{system: {question id: packed items}}`` of the raw-turn peers and the gold-turn ceiling."""
    turns = raw_turns(bench)
    out: dict[str, dict[str, list[dict]]] = {"gold turns (ceiling)": {}}
    for cid in sorted({q.conversation_id for q in questions}):
        qs = [q for q in questions if q.conversation_id == cid]
        orders = rankings([text for _, text in turns[cid]], [q.question for q in qs])
        by_id = dict(turns[cid])
        for row, q in enumerate(qs):
            for ranker in RANKERS:
                for budget in BUDGETS:
                    out.setdefault(f"{ranker} {budget}", {})[q.id] = pack(orders[ranker][row], turns[cid], budget)
            out["gold turns (ceiling)"][q.id] = [{"source_ids": [g], "text": by_id[g]}
                                                 for g in bench.known_evidence(q)]
    return out


def measure(bench: Benchmark, q: Question, packed: list[dict], turn_text: dict[str, str]) -> dict:
    """The measures of one question's packed context."""
    known = bench.known_evidence(q)
    cited = {s for p in packed for s in p["source_ids"]}
    in_evidence, anywhere = answer_check(q.answer, known, packed)
    return {"words": len(" ".join(p["text"] for p in packed).split()), "answer_in_evidence": in_evidence,
            "answer_anywhere": anywhere, "all_cited": all(g in cited for g in known),
            "evidence_content": len(packed_evidence(known, turn_text, packed)) == len(known)}


def means(rows: dict[str, dict]) -> dict[str, float]:
    return {m: round(float(np.mean([r[m] for r in rows.values()])), 4) for m in MEASURES}


def outcomes(rows: dict[str, dict], questions: dict[str, Question]) -> dict[str, dict]:
    return {qid: {"correct": r["answer_in_evidence"], "category": questions[qid].category} for qid, r in rows.items()}


def run(path: Path, conversations: list[str] | None, strategies: list[Path]) -> dict:
    bench = load_benchmark(f"locomo:{path}")
    wanted = set(conversations or bench.conversations)
    unknown = sorted(wanted - set(bench.conversations))
    if unknown:
        raise SystemExit(f"error: --conversations: {', '.join(unknown)} not in {path}")
    questions = [q for q in bench.questions if q.conversation_id in wanted and q.category != "adversarial"
                 and answer_check(q.answer, bench.known_evidence(q), [])[0] is not None]
    by_id = {q.id: q for q in questions}
    turn_text = {cid: {t.id: t.text for t in c.turns()} for cid, c in bench.conversations.items()}
    contexts: dict[str, dict[str, list[dict]]] = {}
    harness = Harness(bench, progress=False)
    for file in [BASELINE_PATH, *strategies]:
        traces = harness.evaluate(load_strategy(file), list(by_id), answer=False).traces
        contexts[Path(file).stem] = {t.question_id: t.packed for t in traces}
    strategy_names = list(contexts)
    contexts.update(peer_contexts(bench, questions))
    rows = {name: {qid: measure(bench, by_id[qid], packed, turn_text[by_id[qid].conversation_id])
                   for qid, packed in ctx.items()} for name, ctx in contexts.items()}
    table = {name: means(r) for name, r in rows.items()}
    comparisons = {}
    for name in strategy_names:
        words = table[name]["words"]
        budget = next((b for b in BUDGETS if b >= words), BUDGETS[-1])
        peer = max((f"{r} {budget}" for r in RANKERS), key=lambda p: table[p]["answer_in_evidence"])
        report = paired_comparison(outcomes(rows[peer], by_id), outcomes(rows[name], by_id), alpha=0.01)
        comparisons[name] = {"peer": peer, **{k: report.to_dict()[k] for k in
                                              ("n", "acc_baseline", "acc_candidate", "delta", "mcnemar_p", "ci_low",
                                               "ci_high", "per_category")},
                             "per_category_p": {c: paired_comparison(
                                 outcomes({q: r for q, r in rows[peer].items() if by_id[q].category == c}, by_id),
                                 outcomes({q: r for q, r in rows[name].items() if by_id[q].category == c}, by_id)
                             ).mcnemar_p for c in report.per_category}}
    return {"file": str(path), "conversations": sorted(wanted), "n": len(questions),
            "left_out": sum(1 for q in bench.questions if q.conversation_id in wanted and q.category != "adversarial")
            - len(questions), "strategies": strategy_names, "systems": table, "comparisons": comparisons}


def markdown(result: dict) -> str:
    lines = ["# Packed context against raw-turn peers", "",
             f"`{Path(result['file']).name}`, conversations {', '.join(result['conversations'])}: {result['n']} "
             f"questions (scored, gold evidence known, an answer with a content word; {result['left_out']} other "
             "scored questions left out).", "",
             "| context | mean words | answer in evidence | answer anywhere | all gold turns cited | "
             "content-checked evidence |", "|---|---|---|---|---|---|"]
    for name, m in result["systems"].items():
        label = f"`{name}`" if name in result["strategies"] else name
        lines.append(f"| {label} | {m['words']:.0f} | {m['answer_in_evidence']:.3f} | {m['answer_anywhere']:.3f} | "
                     f"{m['all_cited']:.3f} | {m['evidence_content']:.3f} |")
    lines += ["", "Answer in evidence, each strategy against the best raw-turn peer at the smallest budget not below "
              "its mean words (paired by question; McNemar p, 95 % bootstrap CI of the difference):", ""]
    for name, c in result["comparisons"].items():
        lines.append(f"- `{name}` vs {c['peer']}: {c['acc_candidate']:.3f} vs {c['acc_baseline']:.3f}, "
                     f"delta {c['delta']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}], p = {c['mcnemar_p']:.2g} "
                     f"(n = {c['n']})")
        lines += ["", "  | category | n | peer | strategy | delta | p |", "  |---|---|---|---|---|---|"]
        for cat, v in c["per_category"].items():
            lines.append(f"  | {cat} | {v['n']} | {v['acc_baseline']:.3f} | {v['acc_candidate']:.3f} | "
                         f"{v['delta']:+.3f} | {c['per_category_p'][cat]:.2g} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="LoCoMo-format file (default: dev4)")
    parser.add_argument("--conversations", help="comma-separated sample ids to keep (default: all)")
    parser.add_argument("--strategy", type=Path, action="append", default=[], help="a strategy file (repeatable)")
    parser.add_argument("--out", type=Path, help="write the markdown report here and the JSON next to it")
    args = parser.parse_args(argv)
    result = run(args.file, args.conversations.split(",") if args.conversations else None, args.strategy)
    text = markdown(result)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
