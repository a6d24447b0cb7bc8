"""Served memory against the offline harness on LoCoMo: equivalence of packed contexts and LiteMem's retention.

One ``memevolve serve`` (uvicorn, 127.0.0.1, a fresh data directory) serves the strategy; every turn of every
conversation is captured with its own ``POST /v1/users/{conversation}/turns`` (one turn per request, in dialogue
order; a new session id closes the previous session), the last session is closed with ``POST .../close``, then
every question is asked with ``POST .../answer`` (the packed context and the configured answerer's answer). The offline
harness (:class:`evolve.observe.harness.Harness`, batch ingestion) evaluates the same strategy, answers included.

Figures:

* **identical packed contexts**: share of questions whose served packed items equal the harness's (same ids, texts
  and source ids, in order);
* **retention** (LiteMem, Mi-Memory report section 7): answer in evidence of a no-memory baseline (nothing packed,
  so 0 by construction), of served memory and of the offline harness, on the questions the answer check scores
  (non-adversarial, gold evidence known, an answer with a content word); retention = served / offline;
* **accuracy** of the same three on every non-adversarial question, judged as the evaluator judges (the harness's
  judge; a declined abstention question counts as correct); the no-memory answer is the answerer's on an empty
  context;
* capture and recall latency as one client sees them (p50 / p95 ms), and the wall time of each phase.

    python experiments/bench/bench_serve_equivalence.py [--file PATH] [--strategy PATH] [--out report.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from evolve.benchmarks import load_benchmark
from evolve.observe.abstention import abstains
from evolve.observe.answer import answer_check
from evolve.observe.harness import Harness
from evolve.runtime import MemoryRuntime, classify_intent
from evolve.strategy.artifact import load_strategy

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILE = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
DEFAULT_STRATEGY = ROOT / "experiments" / "strategies" / "locomo_answer_evolved4.yaml"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(strategy: Path, data: Path) -> tuple[subprocess.Popen, str]:
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "serve", "--serving", str(strategy), "--stores",
                             str(data.parent / "no-stores"), "--data", str(data), "--port", str(port),
                             "--allow-untracked", "--idle", "3600"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("error: the server did not start")


def _ms(values: list[float]) -> dict:
    return {"n": len(values), "p50_ms": round(float(np.percentile(values, 50)), 2),
            "p95_ms": round(float(np.percentile(values, 95)), 2)}


def _key(packed: list[dict]) -> list[tuple]:
    return [(p["id"], p["text"], tuple(p["source_ids"])) for p in packed]


def run(path: Path, strategy_path: Path) -> dict:
    bench = load_benchmark(f"locomo:{path}")
    started = time.perf_counter()
    harness = Harness(bench, progress=False)  # adversarial questions left out, as in every evaluation
    strategy = load_strategy(strategy_path)
    traces = harness.evaluate(strategy).traces  # answered and judged: accuracy beside the packed context
    offline = {t.question_id: t.packed for t in traces}
    offline_correct = {t.question_id: t.correct for t in traces}
    offline_s = time.perf_counter() - started
    questions = [q for q in bench.questions if q.id in offline]

    served: dict[str, list[dict]] = {}
    answers: dict[str, str] = {}
    capture_ms, recall_ms = [], []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _start(strategy_path, Path(tmp) / "data")
        try:
            with httpx.Client(base_url=url, timeout=600) as client:
                started = time.perf_counter()
                for cid, conversation in bench.conversations.items():
                    for session in conversation.sessions:
                        for t in session.turns:
                            when = t.timestamp or session.timestamp
                            body = {"turns": [{"id": t.id, "speaker": t.speaker, "text": t.text, "session": session.id,
                                               "time": when.isoformat() if when else None}]}
                            sent = time.perf_counter()
                            reply = client.post(f"/v1/users/{cid}/turns", json=body)
                            capture_ms.append((time.perf_counter() - sent) * 1000)
                            reply.raise_for_status()
                    client.post(f"/v1/users/{cid}/close").raise_for_status()
                capture_s = time.perf_counter() - started
                started = time.perf_counter()
                for q in questions:
                    sent = time.perf_counter()
                    reply = client.post(f"/v1/users/{q.conversation_id}/answer",
                                        json={"question": q.question,
                                              "asked_at": q.asked_at.isoformat() if q.asked_at else None})
                    recall_ms.append((time.perf_counter() - sent) * 1000)
                    reply.raise_for_status()
                    served[q.id], answers[q.id] = reply.json()["packed"], reply.json()["answer"]
                recall_s = time.perf_counter() - started
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)

    identical = [q.id for q in questions if _key(served[q.id]) == _key(offline[q.id])]
    scored = [q for q in questions if q.category != "adversarial"
              and answer_check(q.answer, bench.known_evidence(q), [])[0] is not None]

    def aie(contexts: dict[str, list[dict]] | None) -> float:
        hits = [bool(answer_check(q.answer, bench.known_evidence(q), contexts[q.id] if contexts else [])[0])
                for q in scored]
        return round(float(np.mean(hits)), 4)

    none, live, batch = aie(None), aie(served), aie(offline)

    runtime = MemoryRuntime(strategy)

    def correct(q, answer: str) -> bool:  # as the evaluator judges: the run's judge, a declined abstention counts
        judged = harness.roles.judge.judge(q.question, q.answer, answer, category=q.category, abstention=q.abstention)
        return judged.correct or bool(answer and q.abstention and abstains(answer))

    silent = {q.id: runtime.answerer.answer(q.question, [], runtime.policy.answering, classify_intent(q.question)).text
              for q in questions}  # no memory: the answerer with an empty context
    accuracy = {name: round(float(np.mean([hit(q) for q in questions])), 4) for name, hit in (
        ("no_memory", lambda q: correct(q, silent[q.id])), ("served", lambda q: correct(q, answers[q.id])),
        ("offline", lambda q: offline_correct[q.id]))}
    return {
        "file": str(path), "strategy": str(strategy_path), "conversations": len(bench.conversations),
        "turns": sum(len(c.turns()) for c in bench.conversations.values()), "questions": len(questions),
        "identical_packed": {"n": len(identical), "share": round(len(identical) / len(questions), 4),
                             "differing": sorted(set(q.id for q in questions) - set(identical))},
        "answer_in_evidence": {"scored_questions": len(scored), "no_memory": none, "served": live, "offline": batch,
                               "retention": round((live - none) / (batch - none), 4) if batch > none else None},
        "accuracy": {"questions": len(questions), **accuracy,
                     "retention": (round((accuracy["served"] - accuracy["no_memory"]) /
                                         (accuracy["offline"] - accuracy["no_memory"]), 4)
                                   if accuracy["offline"] > accuracy["no_memory"] else None)},
        "latency": {"capture": _ms(capture_ms), "recall": _ms(recall_ms)},
        "wall_s": {"offline_harness": round(offline_s, 1), "capture": round(capture_s, 1),
                   "recall": round(recall_s, 1)},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU(s), Python {platform.python_version()}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="LoCoMo-format file (default: dev4)")
    parser.add_argument("--strategy", type=Path, default=DEFAULT_STRATEGY, help="strategy to serve and evaluate")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        print(f"error: {args.file} does not exist")
        return 2
    result = run(args.file, args.strategy)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
