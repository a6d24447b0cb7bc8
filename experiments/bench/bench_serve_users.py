"""Many users on one ``memevolve serve``: resident memory against ``--max-users``, hot and cold recall latency, and
start-up time, for the embedded file store and PostgreSQL.

Users are re-keyed copies of the LoCoMo dev conversations (user ``u00000`` holds the first conversation, ``u00001``
the second, and so on round robin), written straight into the store as the service writes them: one capture-log
event per session, every session closed and marked organised (the Git records are not written: nothing here reads
them). For the file store, each copy's embedding shards are hard links to one built copy's, as if each user had been
recalled once before. The service is then started (start-up time: spawn to the first ``/healthz``) and ``--clients``
concurrent HTTP clients send ``--recalls`` recalls, each to a user drawn with Zipf-like popularity (weight
``1 / rank ** --zipf``), each a question of that user's conversation. A recall is counted **cold** when its user was
not among the ``--max-users`` users most recently asked before it (an LRU kept on the client side, as the service
keeps its own; with concurrent clients this is an estimate), else **hot**. The service's resident set size is
sampled every 0.2 s. Run from the repository root:

    python experiments/bench/bench_serve_users.py [--users N] [--max-users N ...] [--stores file postgres]
        [--sweep Q]

``--sweep Q`` first recalls every user in turn (Q questions each, one client) and records the resident set size after
each user: with ``--max-users`` it must stay flat once the bound is reached (the issue's target: at most 30 MB of
growth over 35 users beyond a bound of 5).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evolve.benchmarks.locomo import load_locomo  # noqa: E402
from evolve.data import BASELINE_PATH  # noqa: E402
from evolve.serve.capturelog import turn_record  # noqa: E402
from evolve.serve.records import CaptureEvent, CloseEvent, TurnsEvent  # noqa: E402
from bench_serve_load import _machine, _port  # noqa: E402


def _events(conversation) -> list[CaptureEvent]:
    """The capture-log events of ``conversation`` captured session by session, the last one closed."""
    events = []
    for session in conversation.sessions:
        turns = [{"id": t.id, "speaker": t.speaker, "text": t.text, "session": session.id,
                  "time": (t.timestamp or session.timestamp).isoformat() if (t.timestamp or session.timestamp)
                  else None} for t in session.turns]
        events.append(TurnsEvent(turns=[turn_record(t, "seed") for t in turns]))
    return events + [CloseEvent(close=conversation.sessions[-1].id)]


def seed_files(data: Path, conversations: list, users: int, serving: Path) -> None:
    """``users`` users in the file store under ``data``; one built copy per conversation lends its embedding
    shards (hard links) to the others."""
    from evolve.runtime import default_embedder
    from evolve.serve.filestore import FileBackend
    from evolve.serve.memory import MemoryService
    from evolve.serve.strategy import RuntimeParts, StrategySlot

    backend = FileBackend(data)
    slot = StrategySlot(None, serving, RuntimeParts(default_embedder()), allow_untracked=True)
    memory = MemoryService(backend, lambda: slot.current)
    for k, conversation in enumerate(conversations):
        template = f"t{k}"
        for event in _events(conversation):
            backend.append(template, event)
        memory.store(template, slot.current)  # writes the embedding shards
        (data / "users" / template / "organised.json").write_text(json.dumps([s.id for s in conversation.sessions]))
    for i in range(users):
        source, folder = data / "users" / f"t{i % len(conversations)}", data / "users" / f"u{i:05d}"
        (folder / "derived" / "embeddings").mkdir(parents=True)
        for name in ("capture.jsonl", "organised.json"):
            shutil.copyfile(source / name, folder / name)
        for shard in (source / "derived" / "embeddings").iterdir():
            os.link(shard, folder / "derived" / "embeddings" / shard.name)
    for k in range(len(conversations)):
        shutil.rmtree(data / "users" / f"t{k}")


def seed_postgres(url: str, conversations: list, users: int) -> None:
    from evolve.serve.pgstore import PostgresBackend

    backend = PostgresBackend(url)
    try:
        for i in range(users):
            conversation = conversations[i % len(conversations)]
            for event in _events(conversation):
                backend.append(f"u{i:05d}", event)
            with backend.pool.connection() as conn:
                conn.execute("INSERT INTO mem_organised SELECT %s, s, 0 FROM unnest(%s::text[]) s",
                             (f"u{i:05d}", [s.id for s in conversation.sessions]))
    finally:
        backend.close()


class Resident:
    """Samples a process's resident set size (MB) every 0.2 s until :meth:`stop`."""

    def __init__(self, pid: int):
        self.pid, self.samples, self._stop = pid, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> float:
        for line in open(f"/proc/{self.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.samples.append(self.now())
            except OSError:
                return

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return {"peak_mb": round(max(self.samples), 1), "final_mb": round(self.samples[-1], 1)}


async def _recalls(url: str, asks: list[tuple[str, str, bool]], clients: int) -> list[tuple[bool, float, int]]:
    todo = iter(asks)
    out: list[tuple[bool, float, int]] = []

    async def worker(client: httpx.AsyncClient) -> None:
        for user, question, cold in todo:
            started = time.perf_counter()
            reply = await client.post(f"/v1/users/{user}/recall", json={"question": question})
            out.append((cold, time.perf_counter() - started, reply.status_code))

    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await asyncio.gather(*(worker(client) for _ in range(clients)))
    return out


def workload(users: int, questions: list[list[str]], recalls: int, bound: int | None, zipf: float,
             seed: int) -> list[tuple[str, str, bool]]:
    """``(user, question, cold)`` for each recall: Zipf-like popularity over a shuffled ranking of the users."""
    rng = np.random.default_rng(seed)
    ranking = rng.permutation(users)
    weights = 1.0 / np.arange(1, users + 1) ** zipf
    picks = ranking[rng.choice(users, size=recalls, p=weights / weights.sum())]
    recent: OrderedDict[int, None] = OrderedDict()
    asks = []
    for i in picks:
        cold = i not in recent
        recent[i] = None
        recent.move_to_end(i)
        while bound is not None and len(recent) > bound:
            recent.popitem(last=False)
        pool = questions[i % len(questions)]
        asks.append((f"u{i:05d}", pool[int(rng.integers(len(pool)))], cold))
    return asks


#: Seconds between a user's last recall and the sweep's reading of the resident set.
SETTLE_S = 1.5


def sweep(url: str, users: int, questions: list[list[str]], per_user: int, rss: "Resident",
          settle: float = SETTLE_S) -> list[list[float]]:
    """Recall each user in turn, ``per_user`` questions each, one client: ``[users recalled, RSS MB]`` after each
    user, read ``settle`` seconds after its last recall (the service's watcher hands unloaded users' memory back
    once a second): what a bound on users must hold flat once it is reached."""
    curve = []
    with httpx.Client(timeout=120) as client:
        for i in range(users):
            pool = questions[i % len(questions)]
            for question in pool[:per_user]:
                client.post(f"{url}/v1/users/u{i:05d}/recall", json={"question": question}).raise_for_status()
            time.sleep(settle)
            curve.append([i + 1, round(rss.now(), 1)])
    return curve


def _ms(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50_ms": round(float(np.percentile(values, 50)) * 1000, 1),
            "p95_ms": round(float(np.percentile(values, 95)) * 1000, 1)}


def run(kind: str, work: Path, serving: Path, store: str | None, bound: int | None, asks: list,
        clients: int, sweep_of: tuple[int, list[list[str]], int] | None = None) -> dict:
    port = _port()
    args = [sys.executable, "-m", "evolve.cli", "serve", "--data", str(work / "data"), "--serving", str(serving),
            "--stores", str(work / "no-stores"), "--allow-untracked", "--port", str(port), "--idle", "86400",
            *(["--store", store] if store else []), *(["--max-users", str(bound)] if bound else [])]
    log = work / f"serve-{kind}-{bound}.log"
    started = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited: {log.read_text()}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        start_s = time.perf_counter() - started
        rss = Resident(proc.pid)
        at_start = rss.now()
        curve = sweep(f"http://127.0.0.1:{port}", *sweep_of, rss) if sweep_of else None
        done = asyncio.run(_recalls(f"http://127.0.0.1:{port}", asks, clients))
        memory = rss.stop()
        health = httpx.get(f"http://127.0.0.1:{port}/healthz").json()
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        evicted = next((float(line.split()[1]) for line in metrics.splitlines()
                        if line.startswith("memevolve_users_evicted ")), 0.0)
    finally:
        proc.terminate()
        proc.wait(60)
    return {"store": kind, "max_users": bound, "start_s": round(start_s, 2), "rss_at_start_mb": round(at_start, 1),
            **({"rss_by_users_recalled": curve} if curve else {}), **memory, "users_loaded_at_end": health["users"], "evictions": int(evicted),
            "failed": sum(1 for _, _, code in done if code != 200),
            "hot": _ms([s for cold, s, _ in done if not cold]), "cold": _ms([s for cold, s, _ in done if cold])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", default=str(ROOT.parent / "shared/data/locomo/locomo_dev4.json"))
    p.add_argument("--strategy", default=str(BASELINE_PATH))
    p.add_argument("--users", type=int, default=2000, help="file-store users (default: %(default)s)")
    p.add_argument("--pg-users", type=int, default=300, help="PostgreSQL users (default: %(default)s; a cold "
                   "recall there embeds every turn again: no embedding is persisted in the database)")
    p.add_argument("--max-users", type=int, nargs="+", default=[0, 50],
                   help="bounds to run (0: none) (default: %(default)s)")
    p.add_argument("--recalls", type=int, default=3000)
    p.add_argument("--pg-recalls", type=int, default=400)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--zipf", type=float, default=1.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stores", nargs="+", default=["file", "postgres"], choices=["file", "postgres"])
    p.add_argument("--sweep", type=int, default=0, metavar="Q",
                   help="first recall every user in turn, Q questions each, and report RSS after each user "
                        "(rss_by_users_recalled); the Zipf workload follows")
    p.add_argument("--out", default=str(ROOT / "experiments/bench/serve_users.json"))
    args = p.parse_args()

    bench = load_locomo(args.bench)
    conversations = list(bench.conversations.values())
    questions = [[q.question for q in bench.questions if q.conversation_id == c.id] for c in conversations]
    report = {"machine": {**_machine(), "note": "load average when the run started (a shared machine)"},
              "conversations": [c.id for c in conversations],
              "turns": [len(c.turns()) for c in conversations], "clients": args.clients, "zipf": args.zipf,
              "runs": []}
    work = Path(tempfile.mkdtemp(prefix="memevolve-users-"))
    pg = None
    try:
        for kind in args.stores:
            folder = work / kind
            folder.mkdir()
            serving = folder / "serving.yaml"
            shutil.copyfile(args.strategy, serving)
            users, recalls, url = (args.users, args.recalls, None) if kind == "file" else \
                (args.pg_users, args.pg_recalls, None)
            if kind == "postgres":
                import pgserver

                pg = pgserver.get_server(Path(tempfile.mkdtemp(prefix="memevolve-users-pg-")), cleanup_mode="stop")
                url = pg.get_uri()
                seed_postgres(url, conversations, users)
            else:
                seed_files(folder / "data", conversations, users, serving)
            for bound in args.max_users:
                asks = workload(users, questions, recalls, bound or None, args.zipf, args.seed)
                row = {"users": users, "recalls": recalls, **run(kind, folder, serving, url, bound or None, asks,
                                                                  args.clients,
                                                                  (users, questions, args.sweep) if args.sweep
                                                                  else None)}
                report["runs"].append(row)
                print(json.dumps(row), flush=True)
    finally:
        if pg is not None:
            pg.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
