"""Replay of captured traffic: the serving strategy against a candidate on the recalls the service logged, paired by
request and without labels.

Each logged recall is asked again of both strategies, over the user's memory rebuilt from the capture log as it
stood when the recall was served (the capture events up to the recall's time). Per request the replay measures the
overlap of the two contexts (:func:`evolve.serve.records.context_overlap` of packed item ids, of their source turn
ids and of their content words; two empty contexts score 1.0), the words each packs, staleness (packed items that
are superseded, retracted or expired at the question's time), answer-in-context when the operator supplied the
answer, and latency (both measured here, back to back). It also reports how often the recomputed serving context
equals the one the log recorded, and the candidate's the shadow recorded, so a replay that does not reproduce the
service says so.

Binary outcomes (no stale item packed, answer in context) are compared with the project's paired statistics (exact
McNemar and a BCa bootstrap, :func:`evolve.verify.statistics.paired_comparison`); graded ones (words, latency) with a
Wilcoxon signed-rank test.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import numpy as np
from scipy import stats

from evolve.canonical import sha256_hex
from evolve.errors import EvolveError
from evolve.files import StoreError, iter_jsonl
from evolve.observe.answer import carried, content_words
from evolve.runtime.cache import EmbeddingCache
from evolve.runtime.facts import expired
from evolve.runtime.live import LiveConversation
from evolve.runtime.store import MemoryStore
from evolve.runtime.text import count_words
from evolve.serve.backend import Backend
from evolve.serve.memory import apply_events, parse_time
from evolve.serve.records import RecallRecord, RecordError, context_overlap, load_record
from evolve.serve.strategy import Loaded
from evolve.verify.statistics import PairedReport, paired_comparison

#: Verdicts: the candidate is significantly better on an outcome (the serving strategy regresses against it), worse,
#: both on different outcomes, neither, or there was nothing to compare.
VERDICTS = ("serving_regresses", "candidate_regresses", "mixed", "no_difference", "no_data")


class ReplayError(EvolveError):
    """Replay input that cannot be used; the message names the file and line or the request."""


def recall_logs(paths: Iterable[str | Path]) -> list[Path]:
    """The recall-log files ``paths`` name: a file as is, a directory as every ``recalls*.jsonl`` below it."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out += sorted(path.rglob("recalls*.jsonl"))
        elif path.is_file():
            out.append(path)
        else:
            raise ReplayError(f"{path}: no such recall log or directory")
    return out


def _owner(log: Path) -> str | None:
    """The user whose folder a recall log lies in (``<data>/users/<user>/recalls*.jsonl``), if it lies in one."""
    return log.parent.name if len(log.parents) > 1 and log.parent.parent.name == "users" else None


@dataclass(frozen=True)
class Logged:
    """A logged recall and where it was read (file and line, or user and position)."""

    record: RecallRecord
    where: str


def _checked(record: RecallRecord, where: str, owner: str | None) -> Logged:
    """:class:`ReplayError` when ``record`` names another user than the log's."""
    if owner is not None and record.user != owner:
        raise ReplayError(f"{where}: recall record of user {record.user!r} in the recall log of user {owner!r}; "
                          "a user's log holds only that user's recalls")
    return Logged(record, where)


def _oldest_first(records: list[Logged]) -> list[Logged]:
    return sorted(records, key=lambda r: _moment(r.record.time, r.where))


def read_recalls(logs: list[Path]) -> list[Logged]:
    """Every logged recall of ``logs``, oldest first."""
    records = []
    for log in logs:
        try:
            records += [_checked(load_record(RecallRecord, raw, f"{log}:{line}"), f"{log}:{line}", _owner(log))
                        for line, raw in iter_jsonl(log)]
        except (StoreError, RecordError) as exc:
            raise ReplayError(str(exc)) from None
    return _oldest_first(records)


def stored_recalls(backend: Backend) -> list[Logged]:
    """Every recall the store still holds, oldest first."""
    try:
        return _oldest_first([_checked(record, f"user {user} recall {i}", user) for user in backend.users()
                              for i, record in enumerate(backend.recalls(user))])
    except RecordError as exc:
        raise ReplayError(str(exc)) from None


def _moment(text: str, where: str) -> datetime:
    """The moment ``text`` names; one without a time zone is UTC (the service logs UTC)."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ReplayError(f"{where}: unparseable time {text!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


@dataclass
class _Side:
    ids: list[str]
    sources: set[str]
    words: int
    text_words: frozenset[str]
    stale: int
    latency_ms: float
    answer_in: bool | None


def _ask(loaded: Loaded, store: MemoryStore, question: str, asked_at: datetime | None, answer: str | None) -> _Side:
    started = time.perf_counter()
    result = loaded.runtime.ask(store, question, asked_at, answer=False)
    latency = (time.perf_counter() - started) * 1000
    items = {item.id: item for item in store.items}
    buffer = loaded.runtime.policy.lifecycle.expiry.buffer_days
    stale = 0
    for c in result.packed:
        item = items.get(c.id)
        if item is not None and (item.superseded_by or item.retracted or expired(item.meta, asked_at, buffer)):
            stale += 1
    texts = [c.text for c in result.packed]
    return _Side([c.id for c in result.packed], {s for c in result.packed for s in c.source_ids},
                 sum(count_words(t) for t in texts), frozenset().union(*map(content_words, texts)), stale, latency,
                 carried(answer, texts) if answer else None)


@dataclass
class ReplayReport:
    """The paired comparison of one replay; :meth:`payload` is what the journal records (no user content)."""

    serving: str
    candidate: str
    n: int
    users: int
    requests: list[dict] = field(default_factory=list)
    clean: PairedReport | None = None
    answer_in_context: PairedReport | None = None
    words: dict = field(default_factory=dict)
    latency: dict = field(default_factory=dict)
    overlap: dict = field(default_factory=dict)
    reproduced: dict = field(default_factory=dict)
    verdict: str = "no_data"
    reasons: list[str] = field(default_factory=list)

    def payload(self, logs: list[Path], candidate_ref: str) -> dict:
        def brief(report: PairedReport | None) -> dict | None:
            if report is None:
                return None
            return {"n": report.n, "serving": report.acc_baseline, "candidate": report.acc_candidate,
                    "delta": report.delta, "mcnemar_p": report.mcnemar_p, "ci": [report.ci_low, report.ci_high],
                    "improved": len(report.improved), "regressed": len(report.regressed)}

        return {"serving_hash": self.serving, "candidate_hash": self.candidate, "candidate": candidate_ref,
                "logs": [{"path": str(p), "sha256": sha256_hex(p.read_bytes())} for p in logs], "n": self.n,
                "users": self.users, "verdict": self.verdict, "reasons": self.reasons,
                "clean_context": brief(self.clean), "answer_in_context": brief(self.answer_in_context),
                "words": self.words, "latency_ms": self.latency, "overlap": self.overlap,
                "reproduced": self.reproduced}


def _graded(serving: list[float], candidate: list[float]) -> dict:
    """Medians and a paired Wilcoxon signed-rank p (1.0 when every difference is zero)."""
    a, b = np.asarray(serving, dtype=float), np.asarray(candidate, dtype=float)
    if not len(a):
        return {"n": 0}
    diff = b - a
    p = 1.0 if not np.any(diff) else float(stats.wilcoxon(b, a).pvalue)
    return {"n": len(a), "serving_median": float(np.median(a)), "candidate_median": float(np.median(b)),
            "serving_p95": float(np.percentile(a, 95)), "candidate_p95": float(np.percentile(b, 95)),
            "median_difference": float(np.median(diff)), "wilcoxon_p": p}


def _verdict(report: ReplayReport, alpha: float) -> None:
    better, worse = [], []
    for name, paired in (("clean context (no stale item packed)", report.clean),
                         ("answer in context", report.answer_in_context)):
        if paired is None or not paired.n or not paired.significant:
            continue
        line = (f"{name}: serving {paired.acc_baseline:.3f} vs candidate {paired.acc_candidate:.3f} "
                f"(McNemar p={paired.mcnemar_p:.4g}, {paired.confidence:.0%} CI [{paired.ci_low:+.3f}, "
                f"{paired.ci_high:+.3f}], n={paired.n})")
        (better if paired.delta > 0 else worse).append(line)
    report.reasons = [f"candidate better on {r}" for r in better] + [f"candidate worse on {r}" for r in worse]
    if not report.n:
        report.verdict = "no_data"
    elif better and worse:
        report.verdict = "mixed"
    elif better:
        report.verdict = "serving_regresses"
    elif worse:
        report.verdict = "candidate_regresses"
    else:
        report.verdict = "no_difference"
        report.reasons = [f"no significant difference at alpha {alpha} on {report.n} request(s)"]


def replay(records: list[Logged], backend: Backend, serving: Loaded, candidate: Loaded,
           answers: dict[tuple[str, str], str] | None = None, *, alpha: float = 0.05, seed: int = 0) -> ReplayReport:
    """Ask every logged recall of both strategies over the memory as it stood then; the paired report.
    ``answers`` maps ``(user, question)`` to the operator's answer."""
    answers = answers or {}
    report = ReplayReport(serving.strategy_hash, candidate.strategy_hash, 0, 0)
    by_user: dict[str, list[Logged]] = {}
    for logged in records:
        by_user.setdefault(logged.record.user, []).append(logged)
    for user, recalls in sorted(by_user.items()):
        try:
            events = backend.events(user)
        except ValueError as exc:
            raise ReplayError(f"{recalls[0].where}: {exc}") from None
        if not events:
            continue  # erased (or never captured here): nothing to rebuild
        report.users += 1
        live, cache = LiveConversation(user), EmbeddingCache(backend.embeddings_dir(user))
        position = 0
        for logged in recalls:
            record = logged.record
            until = _moment(record.time, logged.where)
            reached = position
            while reached < len(events) and _moment(events[reached].at or "", f"{user} capture log event "
                                                    f"{reached + 1}") <= until:
                reached += 1
            apply_events(live, events[position:reached], position + 1)
            position = reached
            if not len(live):
                continue
            asked = None
            if record.asked_at:
                try:
                    asked = parse_time(record.asked_at, f"{logged.where}: asked_at")
                except ValueError as exc:
                    raise ReplayError(str(exc)) from None
            answer = answers.get((user, record.question))
            sides = []
            for loaded in (serving, candidate):
                rt = loaded.runtime
                store = live.store(loaded.key, rt.policy, rt.extractor,
                                   lambda texts, rt=rt: cache.encode(rt.embedder, texts), rt.embedder.name)
                sides.append(_ask(loaded, store, record.question, asked, answer))
            report.requests.append(_row(f"{user}/{len(report.requests)}", user, record, *sides, serving.strategy_hash,
                                        candidate.strategy_hash))
    _summarise(report, alpha, seed)
    return report


def _row(request: str, user: str, record: RecallRecord, s: _Side, c: _Side, serving: str, candidate: str) -> dict:
    """One request's paired figures; whether the log's serving context and the shadow's candidate context (when
    recorded under these strategies) were reproduced."""
    logged = [p.id for p in record.packed] if record.strategy == serving else None
    shadow = record.shadow
    shadowed = [p.id for p in shadow.packed] if shadow is not None and shadow.strategy == candidate else None
    return {"id": request, "user": user,
            "ids_jaccard": context_overlap(s.ids, c.ids), "sources_jaccard": context_overlap(s.sources, c.sources),
            "words_jaccard": context_overlap(s.text_words, c.text_words),
            "words": (s.words, c.words), "stale": (s.stale, c.stale), "latency_ms": (s.latency_ms, c.latency_ms),
            "answer_in": (s.answer_in, c.answer_in),
            "serving_reproduced": None if logged is None else logged == s.ids,
            "shadow_reproduced": None if shadowed is None else shadowed == c.ids}


def _summarise(report: ReplayReport, alpha: float, seed: int) -> None:
    rows = report.requests
    report.n = len(rows)
    if rows:
        def outcomes(pick, side: int) -> dict:
            return {r["id"]: {"correct": bool(pick(r)[side]), "category": r["user"]} for r in rows
                    if pick(r)[side] is not None}

        clean = lambda r: (r["stale"][0] == 0, r["stale"][1] == 0)  # noqa: E731
        report.clean = paired_comparison(outcomes(clean, 0), outcomes(clean, 1), alpha=alpha, seed=seed)
        known = [r for r in rows if r["answer_in"][0] is not None]
        if known:
            pick = lambda r: r["answer_in"]  # noqa: E731
            report.answer_in_context = paired_comparison(outcomes(pick, 0), outcomes(pick, 1), alpha=alpha, seed=seed)
        report.words = _graded([r["words"][0] for r in rows], [r["words"][1] for r in rows])
        report.latency = _graded([r["latency_ms"][0] for r in rows], [r["latency_ms"][1] for r in rows])
        report.overlap = {k: float(np.mean([r[k] for r in rows]))
                          for k in ("ids_jaccard", "sources_jaccard", "words_jaccard")}
        report.overlap["identical"] = sum(r["ids_jaccard"] == 1.0 for r in rows) / len(rows)
        report.overlap["stale_serving"] = sum(r["stale"][0] for r in rows)
        report.overlap["stale_candidate"] = sum(r["stale"][1] for r in rows)
        for key in ("serving_reproduced", "shadow_reproduced"):
            seen = [r[key] for r in rows if r[key] is not None]
            report.reproduced[key] = {"checked": len(seen), "equal": sum(seen)}
    _verdict(report, alpha)


def text(report: ReplayReport) -> str:
    """The report in words, for the terminal."""
    lines = [f"replay: serving {report.serving[:12]} vs candidate {report.candidate[:12]} on {report.n} recall(s) of "
             f"{report.users} user(s)"]
    if report.n:
        o = report.overlap
        lines.append(f"  context overlap (mean Jaccard): items {o['ids_jaccard']:.3f}, source turns "
                     f"{o['sources_jaccard']:.3f}, words {o['words_jaccard']:.3f}; identical {o['identical']:.1%}")
        for name, graded in (("words", report.words), ("latency ms", report.latency)):
            lines.append(f"  {name}: median {graded['serving_median']:.1f} -> {graded['candidate_median']:.1f} "
                         f"(p95 {graded['serving_p95']:.1f} -> {graded['candidate_p95']:.1f}; Wilcoxon "
                         f"p={graded['wilcoxon_p']:.4g})")
        lines.append(f"  stale items packed: serving {o['stale_serving']}, candidate {o['stale_candidate']}")
        for name, paired in (("clean context", report.clean), ("answer in context", report.answer_in_context)):
            if paired is not None and paired.n:
                lines.append(f"  {name}: {paired.acc_baseline:.3f} -> {paired.acc_candidate:.3f} on {paired.n} "
                             f"(McNemar p={paired.mcnemar_p:.4g}, CI [{paired.ci_low:+.3f}, {paired.ci_high:+.3f}])")
        for key, value in report.reproduced.items():
            if value["checked"]:
                lines.append(f"  {key.replace('_', ' ')}: {value['equal']}/{value['checked']} logged contexts")
    lines.append(f"verdict: {report.verdict}" + "".join(f"\n  - {r}" for r in report.reasons))
    return "\n".join(lines)
