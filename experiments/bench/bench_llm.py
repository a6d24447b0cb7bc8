"""Evaluation wall time on the LLM path at several concurrency levels, against a loopback OpenAI-compatible server.

The tests' loopback server (``tests/llm_server.py``: a real HTTP server on 127.0.0.1 speaking the chat-completions
protocol) answers every request after ``--delay-ms``; the answerer and the judge (three votes) are LLM roles, the
other roles deterministic (with ``--extractor``, the extractor is an LLM role too and ingestion is timed). A fixed
slice of the synthetic benchmark is evaluated on a fresh response cache at each level of ``concurrency``; the
script prints wall time, speed-up over concurrency 1, the most requests the server saw in flight, and whether the
traces equal those of concurrency 1 (measured retrieval times aside). Run from the repository root:

    python experiments/bench/bench_llm.py [--delay-ms 100] [--levels 1 4 16] [--questions 64] [--extractor]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from llm_server import LoopbackLLMServer  # noqa: E402

from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy  # noqa: E402
from evolve.llm import RolesConfig  # noqa: E402
from evolve.loop.backends import build_backends  # noqa: E402
from evolve.runtime import IngestionCache  # noqa: E402


def responder(body: dict) -> str:
    """A stand-in model: one fact per dialogue turn; answers with the question's last word; judges by word overlap."""
    text = "\n".join(m["content"] for m in body["messages"])
    turns = re.findall(r"^(\S+) \([^)]*\) \[([^\]]+)\]: (.*)$", text, re.MULTILINE)
    if "QUESTION:" not in text and turns:
        return "FACTS:\n" + "\n".join(f"{speaker} said {said} [{tid}]" for speaker, tid, said in turns)
    if "GOLD ANSWER:" in text:
        gold, answer = (re.search(rf"{k}: (.*)", text).group(1) for k in ("GOLD ANSWER", "GENERATED ANSWER"))
        label = "CORRECT" if set(gold.lower().split()) & set(answer.lower().split()) else "WRONG"
        return json.dumps({"reasoning": "overlap", "label": label})
    return "ANSWER: " + re.search(r"QUESTION: (.*)", text).group(1).split()[-1].rstrip("?")


def evaluate(server: LoopbackLLMServer, cache: Path, concurrency: int, ids: list[str], bench,
             ingestion: IngestionCache, llm_roles: tuple[str, ...]) -> tuple[list, float]:
    roles = {role: {"backend": "llm", "base_url": server.base_url, "model": f"{role}-model", "timeout_s": 30,
                    "max_retries": 0, "concurrency": concurrency} for role in llm_roles}
    backends = build_backends(RolesConfig.from_sources(roles, source="bench"), 0.5, cache)
    harness = Harness(bench, backends.roles, cache=ingestion, progress=False)
    strategy = load_strategy(BASELINE_PATH)
    started = time.perf_counter()
    run = harness.evaluate(strategy, ids)
    wall = time.perf_counter() - started
    return [t.deterministic_dict() for t in run.traces], wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=float, default=100.0, help="server time per request (default 100)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16], help="concurrency levels")
    parser.add_argument("--questions", type=int, default=64, help="scored questions evaluated (default 64)")
    parser.add_argument("--bench", default="synthetic:0:4")
    parser.add_argument("--extractor", action="store_true", help="the extractor is an LLM role too (ingestion timed)")
    args = parser.parse_args(argv)
    llm_roles = ("extractor", "answerer", "judge") if args.extractor else ("answerer", "judge")
    bench = load_benchmark(args.bench)
    by_conv: dict[str, list[str]] = {}
    for q in bench.questions:
        if q.category != "adversarial":
            by_conv.setdefault(q.conversation_id, []).append(q.id)
    ids = [qid for qids in by_conv.values() for qid in qids][: args.questions]
    chosen = {cid for cid, qids in by_conv.items() if set(qids) & set(ids)}
    ingestion = IngestionCache()  # deterministic extractor: stores built once, outside the timing
    if not args.extractor:
        Harness(bench, cache=ingestion, progress=False).evaluate(load_strategy(BASELINE_PATH), ids)
    print(f"{args.bench}: {len(ids)} questions in {len(chosen)} conversation(s); {' + '.join(llm_roles)} on the "
          f"LLM path (judge: 3 votes); server delay {args.delay_ms:g} ms")
    print(f"{'concurrency':>11} {'requests':>9} {'wall s':>8} {'speed-up':>9} {'max in flight':>14} {'traces':>10}")
    reference, base_wall = None, None
    with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp:
        for level in args.levels:
            with LoopbackLLMServer(responder, models=tuple(f"{r}-model" for r in llm_roles),
                                   delay_s=args.delay_ms / 1000) as server:
                traces, wall = evaluate(server, Path(tmp) / f"cache-{level}", level, ids, bench,
                                        IngestionCache() if args.extractor else ingestion, llm_roles)
                requests, in_flight = server.request_count, server.max_in_flight
            reference = reference if reference is not None else traces
            base_wall = base_wall or wall
            same = "identical" if traces == reference else "DIFFER"
            print(f"{level:>11} {requests:>9} {wall:>8.2f} {base_wall / wall:>8.1f}x {in_flight:>14} {same:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
