"""Served memory against the offline harness on LoCoMo, captured as a client sends the raw file: equivalence.

For each strategy, one ``memevolve serve`` (uvicorn, 127.0.0.1, a fresh data directory) serves it. The client reads
the LoCoMo JSON itself and sends it as it stands: every turn of every conversation with its own
``POST /v1/users/{sample_id}/turns`` in dialogue order, with the file's ``dia_id``, ``speaker`` and ``text``, the
session key (``session_3``) as its session, the session's ``session_N_date_time`` (``1:56 pm on 8 May, 2023``) as its
time, ``blip_caption`` as its ``image_caption`` and the first ``img_url`` as its ``image_url`` (with ``--photos
observations``: the turn on ``POST .../observations``, followed by its photo as an image observation); a new session closes the previous one, ``POST .../close`` closes
the last. Then every question the harness scores is asked with ``POST .../answer``, its text as the file has it. The
offline harness (:class:`evolve.observe.harness.Harness`, batch ingestion of the adapter's turns) evaluates the same
strategy, answers included.

Figures per strategy:

* **identical packed contexts**: share of questions (every question the harness traces, adversarial ones included)
  whose served packed items equal the harness's (same ids, texts and source ids, in order), with the ids of any
  that differ;
* **equivalence** of answer in evidence (on the non-adversarial questions the answer check scores: gold evidence
  known, an answer with a content word) and of accuracy (on the non-adversarial questions, the harness's judge; a
  declined abstention question counts as correct):
  served / offline. Served and offline are one runtime over the same turns, so this checks that nothing is lost on
  the way through HTTP; it is not LiteMem's retention, which compares two different memory substrates;
* capture and recall latency as one client sees them (p50 / p95 ms), and the wall time of each phase.

    python experiments/bench/bench_serve_equivalence.py [--file PATH] [--strategy PATH ...] [--photos observations]
        [--out report.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np

from evolve.benchmarks import load_benchmark
from evolve.observe.abstention import abstains
from evolve.observe.answer import answer_check
from evolve.observe.harness import Harness
from evolve.strategy.artifact import load_strategy

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILE = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
#: The baseline (no turn layer, memories as the unit), the loop's strategy evolved on dev4 (turn layer) and the
#: hand-set turn strategy (turn layer, turns as the unit).
DEFAULT_STRATEGIES = [ROOT / "strategies" / "baseline.yaml",
                      ROOT / "experiments" / "strategies" / "locomo_answer_evolved4.yaml",
                      ROOT / "experiments" / "strategies" / "locomo_answer_turns.yaml"]
_SESSION = re.compile(r"session_(\d+)")


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


def raw_turns(conversation: dict) -> Iterator[dict]:
    """Every turn of a raw LoCoMo conversation as a client sends it, in dialogue order."""
    keys = sorted((k for k in conversation if _SESSION.fullmatch(k)), key=lambda k: int(_SESSION.fullmatch(k)[1]))
    for key in keys:
        for t in conversation[key]:
            urls = t.get("img_url") if isinstance(t.get("img_url"), list) else [t.get("img_url")]
            yield {"id": t["dia_id"], "speaker": t["speaker"], "text": t["text"], "session": key,
                   "time": conversation.get(f"{key}_date_time"), "image_caption": t.get("blip_caption"),
                   "image_url": next((u for u in urls if isinstance(u, str) and u), None)}


def capture_request(turn: dict, photos: str) -> tuple[str, dict]:
    """The path and body that capture ``turn``: ``captions``, the turn with its photo's fields on ``/turns``;
    ``observations``, a turn observation then its photo's image observation on ``/observations``."""
    if photos == "captions":
        return "turns", {"turns": [turn]}
    plain = {k: v for k, v in turn.items() if not k.startswith("image_")}
    seen = [{"kind": "turn", **plain}]
    if turn["image_caption"] or turn["image_url"]:
        seen.append({"kind": "image", "turn": turn["id"], "caption": turn["image_caption"], "url": turn["image_url"]})
    return "observations", {"observations": seen}


def _serve(samples: list[dict], asked: dict[str, str], strategy_path: Path, photos: str) -> dict:
    """Capture ``samples`` raw and ask ``asked`` (question id -> text) on a fresh service; replies and timings."""
    packed: dict[str, list[dict]] = {}
    answers: dict[str, str] = {}
    capture_ms, recall_ms = [], []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _start(strategy_path, Path(tmp) / "data")
        try:
            with httpx.Client(base_url=url, timeout=600) as client:
                started = time.perf_counter()
                for sample in samples:
                    user = sample["sample_id"]
                    for turn in raw_turns(sample["conversation"]):
                        sent = time.perf_counter()
                        route, body = capture_request(turn, photos)
                        reply = client.post(f"/v1/users/{user}/{route}", json=body)
                        capture_ms.append((time.perf_counter() - sent) * 1000)
                        reply.raise_for_status()
                    client.post(f"/v1/users/{user}/close").raise_for_status()
                capture_s = time.perf_counter() - started
                started = time.perf_counter()
                for qid, question in asked.items():
                    sent = time.perf_counter()
                    reply = client.post(f"/v1/users/{qid.rpartition('/q')[0]}/answer", json={"question": question})
                    recall_ms.append((time.perf_counter() - sent) * 1000)
                    reply.raise_for_status()
                    packed[qid], answers[qid] = reply.json()["packed"], reply.json()["answer"]
                recall_s = time.perf_counter() - started
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    return {"packed": packed, "answers": answers, "capture_ms": capture_ms, "recall_ms": recall_ms,
            "capture_s": capture_s, "recall_s": recall_s}


def _ratio(served: float, offline: float) -> float | None:
    return round(served / offline, 4) if offline else None


def run_strategy(samples: list[dict], harness: Harness, strategy_path: Path, photos: str) -> dict:
    """One strategy served and evaluated offline on the same file; its figures."""
    bench = harness.benchmark
    started = time.perf_counter()
    traces = harness.evaluate(load_strategy(strategy_path)).traces  # answered and judged
    offline_s = time.perf_counter() - started
    offline = {t.question_id: t.packed for t in traces}
    offline_correct = {t.question_id: t.correct for t in traces if t.scored}  # adversarial questions left out
    questions = [q for q in bench.questions if q.id in offline]  # every question traced: its context compared
    asked = {f"{s['sample_id']}/q{i}": r["question"] for s in samples for i, r in enumerate(s.get("qa", []))}
    served = _serve(samples, {q.id: asked[q.id] for q in questions}, strategy_path, photos)

    identical = [q.id for q in questions if _key(served["packed"][q.id]) == _key(offline[q.id])]
    judged = [q for q in questions if q.id in offline_correct]
    scored = [q for q in judged if answer_check(q.answer, bench.known_evidence(q), [])[0] is not None]

    def aie(contexts: dict[str, list[dict]]) -> float:
        return round(float(np.mean([bool(answer_check(q.answer, bench.known_evidence(q), contexts[q.id])[0])
                                    for q in scored])), 4)

    def correct(q, answer: str) -> bool:  # as the evaluator judges: the run's judge, a declined abstention counts
        judged = harness.roles.judge.judge(q.question, q.answer, answer, category=q.category, abstention=q.abstention)
        return judged.correct or bool(answer and q.abstention and abstains(answer))

    in_evidence = {"served": aie(served["packed"]), "offline": aie(offline)}
    accuracy = {"served": round(float(np.mean([correct(q, served["answers"][q.id]) for q in judged])), 4),
                "offline": round(float(np.mean([offline_correct[q.id] for q in judged])), 4)}
    return {
        "strategy": str(strategy_path.relative_to(ROOT)) if strategy_path.is_relative_to(ROOT) else str(strategy_path),
        "questions": len(questions),
        "identical_packed": {"n": len(identical), "share": round(len(identical) / len(questions), 4),
                             "differing": sorted(set(q.id for q in questions) - set(identical))},
        "answer_in_evidence": {"scored_questions": len(scored), **in_evidence,
                               "equivalence": _ratio(in_evidence["served"], in_evidence["offline"])},
        "accuracy": {"questions": len(judged), **accuracy,
                     "equivalence": _ratio(accuracy["served"], accuracy["offline"])},
        "latency": {"capture": _ms(served["capture_ms"]), "recall": _ms(served["recall_ms"])},
        "wall_s": {"offline_harness": round(offline_s, 1), "capture": round(served["capture_s"], 1),
                   "recall": round(served["recall_s"], 1)},
    }


def run(path: Path, strategies: list[Path], photos: str = "captions") -> dict:
    started = time.perf_counter()
    samples = json.loads(path.read_text())
    bench = load_benchmark(f"locomo:{path}")
    harness = Harness(bench, progress=False)  # adversarial questions left out, as in every evaluation
    sent = [t for s in samples for t in raw_turns(s["conversation"])]
    results = [run_strategy(samples, harness, s, photos) for s in strategies]
    return {
        "file": path.name, "conversations": len(samples), "turns": len(sent),
        "turns_with_image_caption": sum(bool(t["image_caption"]) for t in sent),
        "photos": photos, "images_sent": sum(bool(t["image_caption"] or t["image_url"]) for t in sent),
        "captions_starting_a_photo_of": sum(str(t["image_caption"]).lower().startswith("a photo of") for t in sent),
        "strategies": results, "wall_s": round(time.perf_counter() - started, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU(s), Python {platform.python_version()}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="LoCoMo-format file (default: dev4)")
    parser.add_argument("--strategy", type=Path, action="append",
                        help="strategy to serve and evaluate (repeatable; default: the baseline, "
                             "locomo_answer_evolved4.yaml and locomo_answer_turns.yaml)")
    parser.add_argument("--photos", choices=("captions", "observations"), default="captions",
                        help="send a turn's photo as its image_caption/image_url on /turns (default), or as an image "
                             "observation after its turn on /observations")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        print(f"error: {args.file} does not exist")
        return 2
    result = run(args.file, [p.absolute() for p in args.strategy or DEFAULT_STRATEGIES], args.photos)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
