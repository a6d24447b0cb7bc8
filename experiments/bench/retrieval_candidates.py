"""Retrieval changes for the misses packing leaves, measured before any is built into the runtime.

After ``assembly.fact_unit`` stops facts from cutting answers, what LoCoMo loses is retrieval: single-hop questions
whose gold turn no packed item cites ("gold absent") and multi-hop ones that cite some gold turns, not all ("partial
gold"; see ``../shared/tools/miss_anatomy.py``). Each candidate below is applied to a strategy from outside the
runtime, so it can be measured without a schema dimension:

* ``speaker:<focus>`` — a speaker constraint the question states: when it names exactly one of the conversation's
  speakers, the final score of each memory another speaker said is multiplied by ``1 - focus`` (1: the other
  speaker's memories go last), over the strategy's whole candidate pool;
* ``sessions:<cap>`` / ``sessions_mh:<cap>`` — session-diverse hits for list questions: at most ``cap`` hits from one
  session before any hit of a session already holding that many (``_mh``: multi-hop intent only);
* ``statement`` — question-to-statement rewriting for the vector channel ("What pet does Caroline have?" is embedded
  as "Caroline have pet"); the lexical channels read the question as before;
* ``fields:<body|speaker|nocaption|caption2>`` — field-weighted lexical scoring: the BM25 index reads the body only,
  the speaker and the body (no date), the attributed text without the photo caption, or the caption twice;
* ``feedback:<fan_out>:<terms>:<weight>`` — a second hop from the first hits: the ``terms`` rarest content words of
  the ``fan_out`` best first hits (session summaries, speakers and the question's own words left out) extend the
  question, and that second ranking joins the first by reciprocal-rank fusion with ``weight``.

Only the evolution half of LoCoMo dev (conv-26, conv-30) is read: no choice is made on conv-41 or conv-42.

    python experiments/bench/retrieval_candidates.py STRATEGY OUT_DIR [VARIANT ...]

writes ``OUT_DIR/<variant>/traces.jsonl`` for each variant (``none``: the strategy as it is) and prints answer in
evidence; compare them with ``context_metrics.py`` and ``miss_anatomy.py``.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from evolve import Harness, load_benchmark
from evolve.observe.evaluator import Roles
from evolve.observe.judge import TokenF1Judge
from evolve.runtime import IngestionCache, runtime as runtime_module, store as store_module
from evolve.runtime import cache as cache_module
from evolve.runtime.text import content_tokens, split_attribution
from evolve.strategy.artifact import load_strategy

ROOT = Path(__file__).resolve().parents[2]
BENCH = f"locomo:{(ROOT / '../shared/data/locomo/locomo_dev4.json').resolve()}#conv-26,conv-30"
_WH = re.compile(r"^\s*(?:what|which|who|whom|where|when|why|how)(?: (?:kind|type|sort) of| many| much| long| often)?"
                 r"\s+(?:(\w+)\s+)??(?:did|does|do|is|are|was|were|has|have|had|will|would|can|could)\s+", re.I)
_CAPTION = re.compile(r"\[shares a photo of ([^\]]*)\]")


def statement(question: str) -> str:
    """The question as a statement, for the vector channel: wh-word and auxiliary dropped, the asked noun last."""
    text = question.strip().rstrip("?")
    match = _WH.match(text)
    return f"{text[match.end():]} {match.group(1) or ''}".strip() if match else text


def _pool(policy):
    """``policy`` retrieving its whole candidate pool."""
    return policy.model_copy(update={"retrieval": policy.retrieval.model_copy(
        update={"top_k": policy.retrieval.candidate_pool})})


def _ranked(hits: list, k: int) -> list:
    return [dataclasses.replace(h, rank=i) for i, h in enumerate(hits[:k], start=1)]


def _speaker(focus: float):
    def rerank(store, query, hits):
        speakers = {t.speaker for t in store.turns.values()}
        named = [s for s in speakers if re.search(rf"\b{re.escape(s)}\b", query.text, re.I)]
        if len(named) != 1:
            return hits
        weight = [h.score * (1 - focus if store.item(h.id).speaker not in (None, named[0]) else 1.0) for h in hits]
        return [hits[i] for i in sorted(range(len(hits)), key=lambda i: (-weight[i], i))]
    return rerank


def _sessions(cap: int, multi_hop_only: bool):
    def rerank(store, query, hits):
        if multi_hop_only and query.intent != "multi_hop":
            return hits
        seen: Counter = Counter()
        kept, later = [], []
        for h in hits:
            sources = [s for s in store.item(h.id).source_ids if s in store.turns]
            session = store.turns[sources[0]].session_id if sources else None
            (later if session is not None and seen[session] >= cap else kept).append(h)
            seen[session] += 1
        return kept + later
    return rerank


def _feedback(fan_out: int, n_terms: int, weight: float, original):
    def rerank(store, query, hits, policy):
        own = set(content_tokens(query.text)) | {t.speaker.lower() for t in store.turns.values()}
        df = Counter(t for tokens in store.token_sets for t in tokens)
        score: Counter = Counter()
        for h in [h for h in hits if store.item(h.id).layer != "L1"][:fan_out]:
            for t in set(content_tokens(split_attribution(store.item(h.id).text)[2])) - own:
                if not t.isdigit():
                    score[t] += math.log(len(store) / (1 + df[t]))
        terms = [t for t, _ in score.most_common(n_terms)]
        if not terms:
            return hits
        second = original(store, dataclasses.replace(query, text=f"{query.text} {' '.join(terms)}"), policy)
        fused: Counter = Counter()
        for ranking, w in ((hits, 1.0), (second, weight)):
            for r, h in enumerate(ranking, start=1):
                fused[h.id] += w / (60 + r)
        by_id = {h.id: h for h in second + hits}
        return [by_id[i] for i in sorted(fused, key=lambda i: -fused[i])]
    return rerank


@contextmanager
def variant(name: str) -> Iterator[None]:
    """The runtime with candidate ``name`` applied (``none``: as it is); restored on exit."""
    kind, _, arg = name.partition(":")
    original = runtime_module.retrieve
    index_text, store_format, ask = store_module.MemoryItem.index_text, cache_module.STORE_FORMAT, None
    try:
        if kind in ("speaker", "sessions", "sessions_mh", "feedback"):
            if kind == "speaker":
                rerank = _speaker(float(arg))
            elif kind == "feedback":
                fan_out, n_terms, weight = arg.split(":")
                rerank = _feedback(int(fan_out), int(n_terms), float(weight), original)
            else:
                rerank = _sessions(int(arg), kind == "sessions_mh")

            def retrieve(store, query, policy):
                wide = _pool(policy)
                hits = original(store, query, wide)
                ranked = rerank(store, query, hits, wide) if kind == "feedback" else rerank(store, query, hits)
                return _ranked(ranked, policy.retrieval.top_k_for(query.intent))

            runtime_module.retrieve = retrieve
        elif kind == "statement":
            ask = runtime_module.MemoryRuntime.ask

            def asking(self, store, question, *args, **kwargs):
                encode = self.cache.embeddings.encode
                self.cache.embeddings.encode = lambda embedder, texts: encode(
                    embedder, [statement(question)] if texts == [question] else texts)
                try:
                    return ask(self, store, question, *args, **kwargs)
                finally:
                    del self.cache.embeddings.encode

            runtime_module.MemoryRuntime.ask = asking
        elif kind == "fields":
            def fields(item) -> str:
                speaker, _, body = split_attribution(item.text)
                text = {"body": body, "speaker": f"{speaker}: {body}" if speaker else body,
                        "nocaption": _CAPTION.sub("", item.text),
                        "caption2": _CAPTION.sub(lambda m: f"{m.group(0)} {m.group(1)}", item.text)}[arg]
                return f"{item.context} {text}" if item.context else text

            store_module.MemoryItem.index_text = property(fields)
            cache_module.STORE_FORMAT = f"{store_format}-fields-{arg}"  # stores indexed otherwise are not reused
        elif kind != "none":
            raise SystemExit(f"unknown variant {name!r}")
        yield
    finally:
        runtime_module.retrieve = original
        store_module.MemoryItem.index_text, cache_module.STORE_FORMAT = index_text, store_format
        if ask is not None:
            runtime_module.MemoryRuntime.ask = ask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("strategy")
    parser.add_argument("out", type=Path)
    parser.add_argument("variants", nargs="*", default=["none"])
    parser.add_argument("--cache", default="stores/cache/ingestion")
    args = parser.parse_args()
    bench = load_benchmark(BENCH)
    strategy = load_strategy(args.strategy)
    for name in args.variants:
        with variant(name):
            harness = Harness(bench, Roles(judge=TokenF1Judge(0.5)), cache=IngestionCache(args.cache))
            run = harness.evaluate(strategy)
        run.write(args.out / name.replace(":", "_"))
        print(f"{name:<28} answer in evidence {run.summary.answer_in_evidence:.4f}  "
              f"context words {run.summary.context_words['mean']:.1f}")


if __name__ == "__main__":
    main()
