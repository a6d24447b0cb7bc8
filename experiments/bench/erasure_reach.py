"""Erasure reach on a LoCoMo dev4 conversation: does erasing a user remove its words from every copy the project made?

A conversation of ``locomo_dev4.json`` (``--conversation``, default conv-26) gets a distinctive marker word in the
first turn of every session and in every question, and is captured into a real ``memevolve serve`` (uvicorn,
127.0.0.1, a fresh data directory) as user ``--user``, one request per session, with a few recalls. Then, each
step through the CLI: ``capture-export`` (with the operator's answers: the conversation's questions), a short night
(``memevolve run``: 1 round, 2 candidates, objective answer, no tracking) on the export, two evaluations (the baseline,
and a 40-token budget) gated with ``memevolve gate`` into the stores' gate store, ``DELETE /v1/users/{user}``, and
``memevolve erase --user U --export EXPORT_DIR``. Figures: the files holding the marker (a case-insensitive byte
search of every file) in the data directory, the export and the stores with their caches, before and after;
``journal verify`` of both stores; the recall's status after the erasure; the wall time of each step.

    python experiments/bench/erasure_reach.py [--file PATH] [--conversation conv-26] [--out report.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from evolve.benchmarks.locomo import CATEGORY_BY_CODE
from evolve.data import BASELINE_PATH

ROOT = Path(__file__).resolve().parents[2]
DEV4 = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
MARKER = "Quillfeather"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*argv: object, ok: tuple[int, ...] = (0,)) -> str:
    done = subprocess.run([sys.executable, "-m", "evolve.cli", *map(str, argv)], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode not in ok:
        raise SystemExit(f"error: memevolve {argv[0]} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def _marked(*roots: Path) -> list[str]:
    return [str(p) for root in roots for p in sorted(root.rglob("*"))
            if p.is_file() and MARKER.lower().encode() in p.read_bytes().lower()]


def _sample(path: Path, conversation: str) -> dict:
    sample = next(s for s in json.loads(path.read_text()) if s["sample_id"] == conversation)
    for key, turns in sample["conversation"].items():
        if key.startswith("session_") and isinstance(turns, list) and turns:
            turns[0]["text"] = f"{turns[0]['text']} {MARKER}"
    for q in sample["qa"]:
        q["question"] = f"{q['question']} ({MARKER})"
    return sample


def _requests(sample: dict) -> list[dict]:
    """One capture request per session, turns as LoCoMo has them (the caption as ``image_caption``)."""
    conv = sample["conversation"]
    out = []
    for n in range(1, 100):
        turns = conv.get(f"session_{n}")
        if not turns:
            continue
        when = conv.get(f"session_{n}_date_time")
        out.append({"turns": [{"id": t["dia_id"], "speaker": t["speaker"], "text": t["text"], "session": f"S{n}",
                               **({"time": when} if when else {}),
                               **({"image_caption": t["blip_caption"]} if t.get("blip_caption") else {})}
                              for t in turns]})
    return out


def run(path: Path, conversation: str, user: str, work: Path) -> dict:
    sample = _sample(path, conversation)
    data, export, stores, operator, runs = (work / d for d in ("data", "export", "stores", "operator", "runs"))
    for d in (export, operator, runs):
        d.mkdir()
    timings: dict[str, float] = {}
    started = time.perf_counter()
    port = _port()
    server = subprocess.Popen([sys.executable, "-m", "evolve.cli", "serve", "--serving", str(BASELINE_PATH),
                               "--stores", str(work / "no-stores"), "--data", str(data), "--port", str(port),
                               "--allow-untracked", "--idle", "3600"],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            raise SystemExit("error: the server did not start")
        with httpx.Client(base_url=url, timeout=600) as client:
            for body in _requests(sample):
                reply = client.post(f"/v1/users/{user}/turns", json=body)
                assert reply.status_code == 201, reply.text
            client.post(f"/v1/users/{user}/close")
            for q in sample["qa"][:5]:
                assert client.post(f"/v1/users/{user}/recall", json={"question": q["question"]}).status_code == 200
            timings["capture_s"] = time.perf_counter() - started

            answers = operator / "answers.yaml"
            answers.write_text(yaml.safe_dump([
                {"user": user, "question": q["question"], "answer": str(q["answer"]),
                 "category": CATEGORY_BY_CODE[q["category"]],
                 "evidence": [e.strip() for ids in q["evidence"] for e in ids.split(";")]}  # as the reader splits
                for q in sample["qa"] if q["category"] != 5 and "answer" in q]))
            step = time.perf_counter()
            _cli("capture-export", "--data", data, "--user", user, "--out", export / "night.json", "--answers", answers)
            config = work / "run.yaml"
            config.write_text(yaml.safe_dump({"benchmark": f"locomo:{export / 'night.json'}",
                                              "strategy": str(BASELINE_PATH), "stores": str(stores), "rounds": 1,
                                              "candidates_per_round": 2, "seed": 0, "probe_size": 20,
                                              "objective": "answer"}))
            night = _cli("run", "--config", config, "--no-tracking")
            timings["export_and_night_s"] = time.perf_counter() - step
            step = time.perf_counter()
            small = yaml.safe_load(BASELINE_PATH.read_text())
            small["assembly"]["token_budget"] = 40
            (work / "small.yaml").write_text(yaml.safe_dump(small))
            for name, strategy in (("base", BASELINE_PATH), ("small", work / "small.yaml")):
                _cli("eval", "--strategy", strategy, "--bench", f"locomo:{export / 'night.json'}", "--out", runs / name,
                     "--cache", stores / "cache" / "ingestion")
            gate = _cli("gate", runs / "base" / "traces.jsonl", runs / "small" / "traces.jsonl", "--adapter",
                        "memevolve", "--rules", config, "--no-hypothesis", "--stores", stores / "gate", ok=(0, 1))
            timings["gate_s"] = time.perf_counter() - step
            before = _marked(data, export, stores)
            side_files = len(list(stores.rglob("content/*/*.json")))

            step = time.perf_counter()
            deleted = client.delete(f"/v1/users/{user}").status_code
            erase = json.loads(_cli("erase", "--user", user, "--export", export, "--stores", stores, "--json"))
            timings["erase_s"] = time.perf_counter() - step
            after = _marked(data, export, stores)
            recall = client.post(f"/v1/users/{user}/recall", json={"question": "anything?"}).status_code
    finally:
        server.terminate()
        server.wait(30)
    verify = {str(s.relative_to(work)): _cli("journal", "verify", "--stores", s, "--config", config,
                                             ok=(0, 1)).splitlines()[0] for s in (stores, stores / "gate")}
    return {"file": str(path.relative_to(ROOT.parent) if path.is_relative_to(ROOT.parent) else path),
            "conversation": conversation, "marker": MARKER, "turns": sum(len(r["turns"]) for r in _requests(sample)),
            "questions": len(sample["qa"]), "night": night.strip().splitlines()[1:3], "gate": gate.strip().splitlines()[0],
            "side_files_before": side_files,
            "marked_files_before": len(before), "marked_files_before_by_place": _places(before, work),
            "marked_files_after": len(after), "marked_after": [str(Path(p).relative_to(work)) for p in after],
            "delete_status": deleted, "recall_status_after": recall, "journal_verify": verify, "erase": erase,
            "timings_s": {k: round(v, 1) for k, v in timings.items()},
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}}


def _places(files: list[str], work: Path) -> dict[str, int]:
    """Marked files per place: the first two path parts below the work directory."""
    out: dict[str, int] = {}
    for f in files:
        place = "/".join(Path(f).relative_to(work).parts[:3 if "/cache/" in f or "/content/" in f else 2])
        out[place] = out.get(place, 0) + 1
    return dict(sorted(out.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEV4)
    parser.add_argument("--conversation", default="conv-26")
    parser.add_argument("--user", default="dana")
    parser.add_argument("--out", type=Path, help="write the report (JSON) here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="erasure-reach-") as work:
        report = run(args.file, args.conversation, args.user, Path(work))
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
