"""The extractive answerer against each packaged model as the answerer, on a fixed LoCoMo dev slice, same retrieval.

Every packaged model (``memevolve local-llm``: llama.cpp's OpenAI-compatible server on 127.0.0.1, needs the
local-llm extra) answers the same questions from the same packed context: the baseline strategy, deterministic
extractor and expander, token-F1 judge (threshold 0.5). Each model runs twice on a fresh response cache: sequential
(answerer concurrency 1) and concurrent (``--concurrency``), and the two runs' answers are compared. Reported per
answerer: token-F1 accuracy and mean F1, packed evidence share, seconds, requests and tokens per question, and
throughput in questions per second. The slice is the first ``--per-conversation`` scored questions of each
conversation. Writes ``experiments/bench/local_llm_report.md`` (``--out``). Run from the repository root:

    python experiments/bench/bench_local_llm.py [--bench locomo:PATH] [--per-conversation 25] [--concurrency 4]
        [--models smollm2 gemma3-270m] [--repeat 1] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy
from evolve.llm import RolesConfig
from evolve.llm.local import MODELS, LocalLLMServer, missing_requirements
from evolve.loop.backends import build_backends
from evolve.observe.evaluator import Roles
from evolve.observe.judge import TokenF1Judge
from evolve.runtime import IngestionCache

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "experiments" / "bench" / "local_llm_report.md"
DEFAULT_BENCH = "locomo:../shared/data/locomo/locomo_dev4.json"


@dataclass(frozen=True)
class Row:
    answerer: str
    mode: str
    accuracy: float
    f1: float
    evidence_share: float
    seconds: float
    n: int
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    answers: tuple[str, ...] = ()
    load: float = 0.0  # the machine's 1-minute load average when the evaluation ended

    def cells(self) -> list[str]:
        per_q = lambda x: f"{x / self.n:.1f}" if self.requests else "-"  # noqa: E731
        return [self.answerer, self.mode, f"{self.accuracy:.3f}", f"{self.f1:.3f}", f"{self.evidence_share:.3f}",
                f"{self.seconds / self.n:.3f}", f"{self.n / self.seconds:.2f}", per_q(self.requests),
                per_q(self.prompt_tokens), per_q(self.completion_tokens), f"{self.load:.1f}"]


HEADER = ["answerer", "mode", "accuracy", "F1", "evidence share", "s / question", "questions / s", "requests / q",
          "prompt tok / q", "completion tok / q", "load avg"]


def slice_ids(bench, per_conversation: int) -> list[str]:
    by_conv: dict[str, list[str]] = {}
    for q in bench.questions:
        if q.category != "adversarial":
            by_conv.setdefault(q.conversation_id, []).append(q.id)
    return [qid for qids in by_conv.values() for qid in qids[:per_conversation]]


def evaluate(bench, ids: list[str], roles: Roles, ingestion: IngestionCache, label: str, mode: str) -> Row:
    harness = Harness(bench, roles, cache=ingestion, progress=False)
    started = time.perf_counter()
    run = harness.evaluate(load_strategy(BASELINE_PATH), ids)
    seconds = time.perf_counter() - started
    s = run.summary
    usage = s.llm.get("answerer", {})
    return Row(label, mode, s.accuracy, s.f1, s.evidence_share, seconds, s.n_scored, usage.get("requests", 0),
               usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0),
               tuple(t.answer for t in run.traces), os.getloadavg()[0])


def model_rows(model: str, bench, ids: list[str], ingestion: IngestionCache, concurrency: int, repeat: int,
               tmp: Path) -> list[Row]:
    """Sequential and concurrent evaluations, alternating ``repeat`` times, each on a fresh response cache."""
    rows = []
    modes = [("sequential", 1), (f"concurrent ({concurrency})", concurrency)] * repeat
    with LocalLLMServer(model) as server:
        for i, (mode, level) in enumerate(modes):
            cfg = {"answerer": {"backend": "llm", "base_url": server.base_url, "model": model, "seed": 0,
                                "timeout_s": 300, "max_retries": 0, "concurrency": level}}
            backends = build_backends(RolesConfig.from_sources(cfg, env={}, source="bench"), 0.5,
                                      tmp / f"{model}-{i}")
            rows.append(evaluate(bench, ids, backends.roles, ingestion, model, mode))
            print(" | ".join(rows[-1].cells()), flush=True)
    return rows


def report(rows: list[Row], command: str, spec: str, ids: list[str], per_conversation: int) -> str:
    same = {r.answerer: all(x.answers == r.answers for x in rows if x.answerer == r.answerer) for r in rows}
    lines = ["# Local models as the answerer (`bench_local_llm.py`)", "",
             f"`{command}` on `{spec}`: {len(ids)} scored questions (the first "
             f"{per_conversation} of each conversation), baseline strategy, "
             "deterministic extractor and expander (the same retrieval and packed context for every answerer), "
             "token-F1 judge at 0.5. Models served by llama.cpp's OpenAI-compatible server "
             "(llama-cpp-python 0.3.36, CPU), temperature 0, seed 0, the answerer's length limit "
             "(2 tokens a word of `max_answer_tokens` + 24) and stop sequences; each mode on a fresh response "
             f"cache. Machine: {platform.machine()}, {os.cpu_count()} cores, shared with other jobs (load avg: the "
             "1-minute load average as each evaluation ended; above about 2, timings include waiting for a core).", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    lines += ["", "Answers identical across the runs of a model: "
              + ", ".join(f"{m}: {'yes' if ok else 'NO'}" for m, ok in same.items() if m != "extractive") + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", default=DEFAULT_BENCH)
    parser.add_argument("--per-conversation", type=int, default=25, help="scored questions per conversation")
    parser.add_argument("--concurrency", type=int, default=4, help="answerer calls in flight, concurrent mode")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS, reverse=True))
    parser.add_argument("--repeat", type=int, default=1, help="sequential/concurrent pairs per model, alternating")
    parser.add_argument("--out", type=Path, default=REPORT, help=f"report file (default {REPORT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    for model in args.models:
        reason = missing_requirements(model)
        if reason:
            print(f"error: {reason}", file=sys.stderr)
            return 2
    bench = load_benchmark(args.bench)
    ids = slice_ids(bench, args.per_conversation)
    ingestion = IngestionCache()
    extractive = Roles(judge=TokenF1Judge(0.5))
    evaluate(bench, ids, extractive, ingestion, "extractive", "warm-up")  # ingestion outside the timings
    print(f"{args.bench}: {len(ids)} scored questions\n" + " | ".join(HEADER), flush=True)
    rows = [evaluate(bench, ids, extractive, ingestion, "extractive", "in process")]
    print(" | ".join(rows[0].cells()), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-local-llm-") as tmp:
        for model in args.models:
            rows += model_rows(model, bench, ids, ingestion, args.concurrency, args.repeat, Path(tmp))
    command = " ".join(["python experiments/bench/bench_local_llm.py", *(sys.argv[1:] if argv is None else argv)])
    args.out.write_text(report(rows, command, args.bench, ids, args.per_conversation), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
