"""Replay of dev4 traffic: the evolved strategy against the baseline, staleness judged by the neutral referee, by slice.

Every LoCoMo dev conversation is captured by the service app (in process, a fresh data directory, the baseline
serving): one ``POST /v1/users/{conversation}/turns`` per session, in dialogue order, then the open session closed.
Every non-adversarial question is then recalled with ``POST .../recall``; ``asked_at`` is the conversation's last
session time (the moment the offline harness takes as "now": its newest memory), or with ``--asked-at none`` left
out, so the referee judges each recall at its own time. The operator's answers (LoCoMo's gold answer and category)
give answer in context and the slices. The recall log is then replayed with :func:`evolve.serve.replay.replay`, the
function ``memevolve replay`` runs, serving = the baseline, candidate = the evolved strategy, held to the floors of
the run config whose loop evolved it.

    python experiments/bench/replay_referee.py [--file PATH] [--candidate PATH] [--rules CONFIG]
        [--asked-at last-session|none] [--out replay_referee.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from evolve.benchmarks import load_benchmark
from evolve.data import BASELINE_PATH
from evolve.loop.config import load_config
from evolve.runtime.embedder import default_embedder
from evolve.serve.app import create_app
from evolve.serve.filestore import FileBackend
from evolve.serve.memory import MemoryService
from evolve.serve.replay import replay, stored_recalls, text
from evolve.serve.strategy import Loaded, RuntimeParts, StrategySlot
from evolve.strategy.artifact import load_strategy, strategy_hash

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILE = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
DEFAULT_CANDIDATE = ROOT / "experiments" / "strategies" / "locomo_answer_final.yaml"
DEFAULT_RULES = ROOT / "experiments" / "locomo_answer.yaml"


def capture(bench, data: Path, parts: RuntimeParts, asked_at: str) -> int:
    """Capture every conversation and recall every non-adversarial question through the service app (the baseline
    serving); the number of recalls."""
    serving = data.parent / "serving.yaml"
    serving.write_bytes(BASELINE_PATH.read_bytes())
    slot = StrategySlot(None, serving, RuntimeParts(parts.embedder), allow_untracked=True)
    memory = MemoryService(FileBackend(data), lambda: slot.current)
    recalls = 0
    with TestClient(create_app(slot, memory)) as client:
        for cid, conversation in bench.conversations.items():
            for session in conversation.sessions:
                turns = [{"id": t.id, "speaker": t.speaker, "text": t.text, "session": session.id,
                          "time": (t.timestamp or session.timestamp).isoformat()
                          if (t.timestamp or session.timestamp) else None} for t in session.turns]
                client.post(f"/v1/users/{cid}/turns", json={"turns": turns}).raise_for_status()
            client.post(f"/v1/users/{cid}/close").raise_for_status()
            last = conversation.sessions[-1].timestamp
            for q in (q for q in bench.questions if q.conversation_id == cid and q.category != "adversarial"):
                body = {"question": q.question}
                if asked_at == "last-session" and last is not None:
                    body["asked_at"] = last.isoformat()
                client.post(f"/v1/users/{cid}/recall", json=body).raise_for_status()
                recalls += 1
    return recalls


def run(path: Path, candidate_path: Path, rules_path: Path, asked_at: str) -> dict:
    bench = load_benchmark(f"locomo:{path}")
    parts = RuntimeParts(default_embedder())
    rules = load_config(rules_path, check_files=False).acceptance
    scored = [q for q in bench.questions if q.category != "adversarial"]
    answers = {(q.conversation_id, q.question): str(q.answer) for q in scored}
    categories = {(q.conversation_id, q.question): q.category for q in scored}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        started = time.perf_counter()
        recalls = capture(bench, data, parts, asked_at)
        capture_s = time.perf_counter() - started
        loaded = {}
        for role, source in (("serving", BASELINE_PATH), ("candidate", candidate_path)):
            strategy = load_strategy(source)
            loaded[role] = Loaded(parts.runtime(strategy), strategy_hash(strategy), str(source), None, role, None)
        backend = FileBackend(data)
        started = time.perf_counter()
        report = replay(stored_recalls(backend), backend, loaded["serving"], loaded["candidate"], answers,
                        categories=categories, rules=rules)
        replay_s = time.perf_counter() - started
    payload = report.payload([], str(candidate_path))
    print(text(report))
    return {"file": str(path), "serving": str(BASELINE_PATH.relative_to(ROOT)),
            "candidate": str(candidate_path.relative_to(ROOT)) if candidate_path.is_relative_to(ROOT)
            else str(candidate_path), "rules": str(rules_path.relative_to(ROOT))
            if rules_path.is_relative_to(ROOT) else str(rules_path), "asked_at": asked_at, "recalls": recalls,
            "wall_s": {"capture": round(capture_s, 1), "replay": round(replay_s, 1)},
            **{k: v for k, v in payload.items() if k not in ("logs", "candidate")}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="LoCoMo-format file (default: dev4)")
    parser.add_argument("--candidate", type=Path, default=DEFAULT_CANDIDATE, help="strategy replayed as candidate")
    parser.add_argument("--rules", type=Path, default=DEFAULT_RULES, help="run config whose acceptance: floors apply")
    parser.add_argument("--asked-at", choices=("last-session", "none"), default="last-session",
                        help="asked_at each recall sends (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        print(f"error: {args.file} does not exist", file=sys.stderr)
        return 2
    result = run(args.file, args.candidate.resolve(), args.rules.resolve(), args.asked_at)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
