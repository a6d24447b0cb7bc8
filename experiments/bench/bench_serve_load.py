"""Load on ``memevolve serve``: capture throughput, recall throughput and p50/p95 latency at 1, 8 and 32 concurrent
clients, for the embedded file store and for PostgreSQL (pgserver's self-contained server), an agent's
capture-then-recall pattern, and a hot reload under load.

Each store gets a fresh ``memevolve serve`` process on 127.0.0.1 serving ``--strategy`` (an untracked serving file).
One LoCoMo conversation (default: the dev4 conversation with the most turns) is captured turn by turn, one request per
turn, and its sessions closed and organised; then it is asked questions by concurrent HTTP clients (asyncio,
httpx), ``--requests`` per level (at least 4 per client), each a text the service has not seen before (the benchmark's
questions, then again after lead-ins such as "Remind me: "), so every recall embeds its question: cold figures.
Under the file store a second 8-client run replaces the serving file with ``--reload-to`` half-way (the service
reloads it, building the user's memory under the new ingestion policy while the old strategy serves), keeps asking
until the new strategy answers and then as many recalls again, and counts failed requests and the strategies that
answered. ``--auth`` serves with a keys file (``memevolve serve --auth``) and every request carries a key: with the
audit every service keeps, the cost of authentication on each request. Run from the repository root:

    python experiments/bench/bench_serve_load.py [--bench PATH] [--conversation ID] [--auth] [--out PATH]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evolve.benchmarks.locomo import load_locomo  # noqa: E402
from evolve.data import BASELINE_PATH  # noqa: E402
from evolve.serve.keys import SCOPES, add_key  # noqa: E402

#: Headers of every request: the API key's when the service runs with --auth.
HEADERS: dict[str, str] = {}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A ``memevolve serve`` child process; :meth:`stop` ends it."""

    def __init__(self, work: Path, serving: Path, store: str | None, auth: Path | None = None):
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "evolve.cli", "serve", "--data", str(work / "data"), "--serving", str(serving),
                "--stores", str(work / "no-stores"), "--allow-untracked", "--port", str(self.port),
                "--reload-interval", "0.5", *(["--store", store] if store else []),
                *(["--auth", str(auth)] if auth else [])]
        self.log = work / f"serve-{self.port}.log"
        self.proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:  # open: liveness
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        raise RuntimeError(f"serve did not start: {self.log.read_text()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def capture(server: Server, conversation, user: str) -> dict:
    """Every turn in its own request, in order; then close the last session and wait for organisation."""
    started = time.perf_counter()
    n = 0
    with httpx.Client(base_url=server.url, timeout=120, headers=HEADERS) as client:
        for session in conversation.sessions:
            for t in session.turns:
                when = t.timestamp or session.timestamp
                reply = client.post(f"/v1/users/{user}/turns", json={"turns": [{
                    "id": t.id, "speaker": t.speaker, "text": t.text, "session": session.id,
                    "time": when.isoformat() if when else None}]})
                reply.raise_for_status()
                n += 1
        seconds = time.perf_counter() - started
        client.post(f"/v1/users/{user}/close").raise_for_status()
        while client.get("/healthz").json()["organisation_pending"]:
            time.sleep(0.5)
    return {"turns": n, "seconds": round(seconds, 2), "turns_per_s": round(n / seconds, 1)}


def chat(server: Server, conversation, user: str, questions: Iterator[str], exchanges: int, think: float) -> dict:
    """An agent's pattern on the loaded user: capture a turn, wait ``think`` seconds (the agent's model at work),
    recall with a new question; ``exchanges`` times, in a new session a day after the conversation's last (its first
    turns' texts said again, under new ids). Every recall reads a memory changed since the one before."""
    recalls, captures = [], []
    last = max(s.timestamp for s in conversation.sessions if s.timestamp)
    turns = [t for s in conversation.sessions for t in s.turns][:exchanges]
    with httpx.Client(base_url=server.url, timeout=120, headers=HEADERS) as client:
        for i, t in enumerate(turns):
            started = time.perf_counter()
            client.post(f"/v1/users/{user}/turns", json={"turns": [{
                "id": f"chat:{i}", "speaker": t.speaker, "text": t.text, "session": "chat",
                "time": (last + timedelta(days=1, minutes=i)).isoformat()}]}).raise_for_status()
            captures.append((time.perf_counter() - started) * 1000)
            time.sleep(think)
            started = time.perf_counter()
            client.post(f"/v1/users/{user}/recall", json={"question": next(questions)}).raise_for_status()
            recalls.append((time.perf_counter() - started) * 1000)
    pct = lambda xs, q: round(float(np.percentile(xs, q)), 1)  # noqa: E731
    return {"exchanges": len(turns), "think_s": think, "recall_p50_ms": pct(recalls, 50),
            "recall_p95_ms": pct(recalls, 95), "capture_p50_ms": pct(captures, 50), "capture_p95_ms": pct(captures, 95)}


#: Lead-ins that make a question text new again once every benchmark question has been asked.
LEAD_INS = ("", "Do you remember: ", "Quick question: ", "Remind me: ", "I forgot: ", "Tell me again: ",
            "One more thing: ", "Can you check: ", "Just wondering: ", "From our chats: ", "Any idea: ",
            "Help me recall: ", "By the way: ", "Out of curiosity: ")


def fresh_questions(questions: list[str]) -> Iterator[str]:
    """Every benchmark question, then each again after a lead-in, ...: no text repeats, so no recall finds its
    question's embedding cached and every figure is a cold one."""
    for lead in LEAD_INS:
        yield from (lead + q for q in questions)
    raise RuntimeError(f"more than {len(LEAD_INS) * len(questions)} recalls requested")


async def _load(url: str, user: str, questions: Iterator[str], clients: int, requests: int,
                during=None) -> dict:
    """``requests`` recalls of new question texts by ``clients`` concurrent clients. ``during`` (a coroutine
    function) runs half-way, the recalls going on meanwhile, and is followed by ``requests / 2`` more: a reload that
    takes longer than the first half is still met by a second half."""
    latencies: list[float] = []
    failures: list[str] = []
    strategies: dict[str, int] = {}
    target = requests if during is None else 10**9  # with ``during``: until it has run, then requests / 2 more
    done = asked = 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal done, asked
        while asked < target:
            asked += 1
            question = next(questions)
            started = time.perf_counter()
            try:
                reply = await client.post(f"/v1/users/{user}/recall", json={"question": question})
                latencies.append((time.perf_counter() - started) * 1000)
                if reply.status_code != 200:
                    failures.append(f"{reply.status_code}: {reply.text[:120]}")
                else:
                    key = reply.json()["strategy"][:12]
                    strategies[key] = strategies.get(key, 0) + 1
            except httpx.HTTPError as exc:
                failures.append(repr(exc))
            done += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits, headers=HEADERS) as client:
        started = time.perf_counter()
        tasks = [asyncio.create_task(worker(client)) for _ in range(clients)]
        if during is not None:
            while done < requests // 2:
                await asyncio.sleep(0.01)
            await during()
            target = asked + requests // 2
        await asyncio.gather(*tasks)
        seconds = time.perf_counter() - started
    lat = np.array(latencies)
    return {"clients": clients, "requests": done, "failed": len(failures), "failures": failures[:5],
            "seconds": round(seconds, 2), "recalls_per_s": round(done / seconds, 1),
            **{f"p{q}_ms": round(float(np.percentile(lat, q)), 1) for q in (50, 90, 95, 99)},
            "max_ms": round(float(lat.max()), 1), "strategies": strategies}


def admission_cost(work: Path, n: int = 2000) -> dict:
    """In process, the two steps ``--auth`` and the audit add to a recall: admitting its key (the keys file's stat,
    the hash compared) and appending its audit line (fsynced), ``n`` times each; p50 and p95 in ms."""
    from evolve.serve.access import Access
    from evolve.serve.audit import FileAudit
    from evolve.serve.keys import KeyStore

    _, secret = add_key(work / "micro-keys.json", ["u1"], list(SCOPES))
    access = Access(KeyStore(work / "micro-keys.json"), FileAudit(work / "micro-data"))
    admit, line = [], []
    for _ in range(n):
        started = time.perf_counter()
        caller = access.admit("recall", secret, "u1")
        admit.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        access.record("RECALL", caller.key, "u1", ids=[f"D1:{i}" for i in range(12)], counts={"packed": 12})
        line.append((time.perf_counter() - started) * 1000)
    pct = lambda xs, q: round(float(np.percentile(xs, q)), 3)  # noqa: E731
    return {"n": n, "admit_p50_ms": pct(admit, 50), "admit_p95_ms": pct(admit, 95),
            "audit_line_p50_ms": pct(line, 50), "audit_line_p95_ms": pct(line, 95)}


def _machine() -> dict:
    load = os.getloadavg()
    return {"cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(), "load_average_1_5_15": [round(x, 2) for x in load],
            "note": "load average when the run started; every recall asks a question text new to the service"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", default=str(ROOT.parent / "shared/data/locomo/locomo_dev4.json"))
    p.add_argument("--conversation", help="sample id (default: the one with the most turns)")
    p.add_argument("--strategy", default=str(ROOT / "experiments/strategies/locomo_answer_evolved4.yaml"))
    p.add_argument("--reload-to", default=str(BASELINE_PATH), help="strategy the hot-reload run switches to")
    p.add_argument("--requests", type=int, default=1000, help="recalls per concurrency level (default: "
                   "%(default)s; a p95 of 200 recalls moves by several ms from run to run)")
    p.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--stores", nargs="+", default=["file", "postgres"], choices=["file", "postgres"])
    p.add_argument("--exchanges", type=int, default=60, help="capture-then-recall exchanges of the chat run "
                                                                "(default: %(default)s)")
    p.add_argument("--think", type=float, default=0.5, help="seconds between a capture and the next recall in the "
                                                            "chat run (default: %(default)s)")
    p.add_argument("--auth", action="store_true", help="serve with a keys file and send a key with every request")
    p.add_argument("--out", default=str(ROOT / "experiments/bench/serve_load.json"))
    args = p.parse_args()

    bench = load_locomo(args.bench)
    conv_id = args.conversation or max(bench.conversations, key=lambda c: len(bench.conversations[c].turns()))
    conversation = bench.conversations[conv_id]
    questions = [q.question for q in bench.questions if q.conversation_id == conv_id]
    asked = fresh_questions(list(dict.fromkeys(q.question for q in bench.questions)))
    report = {"machine": _machine(), "auth": args.auth, "conversation": conv_id, "turns": len(conversation.turns()),
              "questions": len(questions), "strategy": Path(args.strategy).name, "stores": {}}
    work = Path(tempfile.mkdtemp(prefix="memevolve-load-"))
    pg = None
    try:
        if args.auth:
            report["admission_in_process"] = admission_cost(work)
            print("admission", json.dumps(report["admission_in_process"]), flush=True)
        for kind in args.stores:
            folder = work / kind
            folder.mkdir()
            serving = folder / "serving.yaml"
            shutil.copyfile(args.strategy, serving)
            url = None
            if kind == "postgres":
                import pgserver

                pg_dir = Path(tempfile.mkdtemp(prefix="memevolve-load-pg-"))  # reachable by pgserver's own user
                pg = pgserver.get_server(pg_dir, cleanup_mode="stop")
                url = pg.get_uri()
            keys = None
            if args.auth:
                keys = folder / "keys.json"
                HEADERS["Authorization"] = f"Bearer {add_key(keys, ['u1'], list(SCOPES))[1]}"
            server = Server(folder, serving, url, keys)
            try:
                result: dict = {"capture": capture(server, conversation, "u1")}
                started = time.perf_counter()
                httpx.post(f"{server.url}/v1/users/u1/recall", json={"question": next(asked)}, timeout=600,
                           headers=HEADERS)
                result["first_recall_s"] = round(time.perf_counter() - started, 2)  # builds the user's store
                result["recall"] = []
                for clients in args.levels:
                    row = asyncio.run(_load(server.url, "u1", asked, clients, max(args.requests, 4 * clients)))
                    result["recall"].append(row)
                    print(kind, json.dumps(row), flush=True)
                result["chat"] = chat(server, conversation, "u1", asked, args.exchanges, args.think)
                print(kind, "chat", json.dumps(result["chat"]), flush=True)
                if kind == "file":
                    async def swap() -> None:  # the new file, then wait until the service serves it
                        staged = serving.with_suffix(".new")
                        shutil.copyfile(args.reload_to, staged)
                        os.replace(staged, serving)
                        async with httpx.AsyncClient(base_url=server.url, timeout=30, headers=HEADERS) as client:
                            while (await client.get("/v1/strategy")).json()["serving"]["hash"][:12] == before:
                                await asyncio.sleep(0.05)

                    before = httpx.get(f"{server.url}/v1/strategy", headers=HEADERS).json()["serving"]["hash"][:12]
                    row = asyncio.run(_load(server.url, "u1", asked, 8, max(args.requests, 400), swap))
                    time.sleep(2)
                    after = httpx.get(f"{server.url}/v1/strategy", headers=HEADERS).json()
                    row.update(before=before, after=after["serving"]["hash"][:12], reloads=after["reloads"])
                    result["hot_reload"] = row
                    print(kind, "hot reload", json.dumps(row), flush=True)
                report["stores"][kind] = result
            finally:
                server.stop()
    finally:
        if pg is not None:
            pg.cleanup()
            shutil.rmtree(pg_dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
