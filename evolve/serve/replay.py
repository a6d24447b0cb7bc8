"""Replay of captured traffic: the serving strategy against a candidate on the recalls the service logged, paired by
request and without labels.

Each logged recall is asked again of both strategies, over the user's memory rebuilt from the capture log as it
stood when the recall was served (the capture events up to the recall's time). Per request the replay measures the
overlap of the two contexts (:func:`evolve.serve.records.context_overlap` of packed item ids, of their source turn
ids and of their content words; two empty contexts score 1.0), the words each packs, staleness (packed items that
are superseded, retracted or expired at the question's time, as one neutral referee judges both contexts:
:mod:`evolve.serve.referee`), answer-in-context when the operator supplied the answer, and latency (both measured
here, back to back). It also reports how often the recomputed serving context equals the one the log recorded, and
the candidate's the shadow recorded, so a replay that does not reproduce the service says so.

Binary outcomes (no stale item packed, answer in context) are compared with the project's paired statistics (exact
McNemar and a BCa bootstrap, :func:`evolve.verify.statistics.paired_comparison`), overall and per slice (the
question's category where the operator's answers give it, else the runtime's intent) under the decision contract's
category floor; graded ones (words, latency) with a Wilcoxon signed-rank test.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import numpy as np
from scipy import stats

from evolve.benchmarks.turns import naive
from evolve.canonical import sha256_hex
from evolve.errors import EvolveError
from evolve.files import StoreError, files_named, iter_jsonl
from evolve.observe.answer import carried, content_words
from evolve.runtime.cache import EmbeddingCache
from evolve.runtime.expander import classify_intent
from evolve.runtime.live import LiveConversation
from evolve.runtime.store import MemoryStore
from evolve.runtime.text import count_words
from evolve.serve.backend import Backend
from evolve.serve.capturelog import apply_events, parse_time
from evolve.serve.records import RecallRecord, RecordError, context_overlap, load_record
from evolve.serve.referee import STATES, Marks, Referee, floor_reasons, slice_lines, slices, stale_counts
from evolve.serve.strategy import Loaded
from evolve.verify.decision import AcceptanceRules
from evolve.verify.statistics import PairedReport, paired_comparison

#: Verdicts: the candidate is significantly better on an outcome (the serving strategy regresses against it), worse,
#: both on different outcomes, neither, or there was nothing to compare.
VERDICTS = ("serving_regresses", "candidate_regresses", "mixed", "no_difference", "no_data")


class ReplayError(EvolveError):
    """Replay input that cannot be used; the message names the file and line or the request."""


def recall_logs(paths: Iterable[str | Path]) -> list[Path]:
    """The recall-log files ``paths`` name: a file as is, a directory as every ``recalls*.jsonl`` below it."""
    return files_named(paths, "recalls*.jsonl", lambda path: ReplayError(f"{path}: no such recall log or directory"))


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
    stale: dict[str, int] | None  # the referee's count, in total and by state; None for an exempt question
    latency_ms: float
    answer_in: bool | None


def _ask(loaded: Loaded, store: MemoryStore, question: str, asked_at: datetime | None, answer: str | None,
         marks: Marks | None) -> _Side:
    started = time.perf_counter()
    result = loaded.runtime.ask(store, question, asked_at, answer=False)
    latency = (time.perf_counter() - started) * 1000
    stale = None if marks is None else stale_counts(marks.judge(result.packed))
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
    referee: dict = field(default_factory=dict)
    rules: AcceptanceRules = field(default_factory=AcceptanceRules)
    clean: PairedReport | None = None
    answer_in_context: PairedReport | None = None
    words: dict = field(default_factory=dict)
    latency: dict = field(default_factory=dict)
    overlap: dict = field(default_factory=dict)
    reproduced: dict = field(default_factory=dict)
    slices: dict = field(default_factory=dict)  # outcome -> slice -> figures (:func:`evolve.serve.referee.slices`)
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
                "users": self.users, "verdict": self.verdict, "reasons": self.reasons, "referee": self.referee,
                "floors": {k: getattr(self.rules, k) for k in ("alpha", "epsilon_default", "epsilon_by_category",
                                                                "category_floor", "floor_exempt")},
                "clean_context": brief(self.clean), "answer_in_context": brief(self.answer_in_context),
                "slices": self.slices,
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


#: The binary outcomes compared, by payload name: what each means in words.
OUTCOMES = {"clean_context": "clean context (no stale item packed)", "answer_in_context": "answer in context"}


def _verdict(report: ReplayReport) -> None:
    better, worse = [], []
    for key, name in OUTCOMES.items():
        paired = report.clean if key == "clean_context" else report.answer_in_context
        if paired is None or not paired.n:
            continue
        up, down = floor_reasons(name, report.slices.get(key, {}))
        better, worse = better + up, worse + down
        if not paired.significant:
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
        report.reasons = [f"no significant difference at alpha {report.rules.alpha} on {report.n} request(s), "
                          "overall or in a slice beyond its floor"]


def replay(records: list[Logged], backend: Backend, serving: Loaded, candidate: Loaded,
           answers: dict[tuple[str, str], str] | None = None, *, categories: dict[tuple[str, str], str] | None = None,
           rules: AcceptanceRules | None = None, seed: int = 0) -> ReplayReport:
    """Ask every logged recall of both strategies over the memory as it stood then; the paired report, staleness
    judged by the :class:`~evolve.serve.referee.Referee`, slices held to the floors of ``rules`` (the contract).
    ``answers`` maps ``(user, question)`` to the operator's answer, ``categories`` to the question's category."""
    answers, categories, referee = answers or {}, categories or {}, Referee()
    report = ReplayReport(serving.strategy_hash, candidate.strategy_hash, 0, 0, referee=referee.describe(),
                          rules=rules or AcceptanceRules())
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
            marks = referee.marks(referee.live_store(live), record.question, asked, naive(until))
            sides = []
            for loaded in (serving, candidate):
                rt = loaded.runtime
                store = live.store(loaded.key, rt.policy, rt.extractor,
                                   lambda texts, rt=rt: cache.encode(rt.embedder, texts), rt.embedder.name, rt.fuser)
                sides.append(_ask(loaded, store, record.question, asked, answer, marks))
            where = categories.get((user, record.question)) or classify_intent(record.question)
            report.requests.append(_row(f"{user}/{len(report.requests)}", user, record, where, *sides,
                                        serving.strategy_hash, candidate.strategy_hash))
    _summarise(report, seed)
    return report


def _row(request: str, user: str, record: RecallRecord, where: str, s: _Side, c: _Side, serving: str,
         candidate: str) -> dict:
    """One request's paired figures; whether the log's serving context and the shadow's candidate context (when
    recorded under these strategies) were reproduced."""
    logged = [p.id for p in record.packed] if record.strategy == serving else None
    shadow = record.shadow
    shadowed = [p.id for p in shadow.packed] if shadow is not None and shadow.strategy == candidate else None
    return {"id": request, "user": user, "slice": where,
            "ids_jaccard": context_overlap(s.ids, c.ids), "sources_jaccard": context_overlap(s.sources, c.sources),
            "words_jaccard": context_overlap(s.text_words, c.text_words),
            "words": (s.words, c.words), "stale": (s.stale, c.stale), "latency_ms": (s.latency_ms, c.latency_ms),
            "answer_in": (s.answer_in, c.answer_in),
            "serving_reproduced": None if logged is None else logged == s.ids,
            "shadow_reproduced": None if shadowed is None else shadowed == c.ids}


def _summarise(report: ReplayReport, seed: int) -> None:
    rows, rules = report.requests, report.rules
    report.n = len(rows)
    if rows:
        def compared(pick) -> PairedReport:
            """The paired comparison of the outcome ``pick`` gives each side (``None``: not judged), by slice."""
            def side(i: int) -> dict:
                return {r["id"]: {"correct": bool(pick(r)[i]), "category": r["slice"]} for r in rows
                        if pick(r)[i] is not None}
            return paired_comparison(side(0), side(1), alpha=rules.alpha, seed=seed,
                                     n_resamples=rules.bootstrap_resamples)

        report.clean = compared(lambda r: tuple(None if s is None else s["total"] == 0 for s in r["stale"]))
        report.slices["clean_context"] = slices(report.clean, rules)
        if any(r["answer_in"][0] is not None for r in rows):
            report.answer_in_context = compared(lambda r: r["answer_in"])
            report.slices["answer_in_context"] = slices(report.answer_in_context, rules)
        report.words = _graded([r["words"][0] for r in rows], [r["words"][1] for r in rows])
        report.latency = _graded([r["latency_ms"][0] for r in rows], [r["latency_ms"][1] for r in rows])
        report.overlap = {k: float(np.mean([r[k] for r in rows]))
                          for k in ("ids_jaccard", "sources_jaccard", "words_jaccard")}
        report.overlap["identical"] = sum(r["ids_jaccard"] == 1.0 for r in rows) / len(rows)
        judged = [r for r in rows if r["stale"][0] is not None]
        report.overlap["exempt"] = len(rows) - len(judged)
        for i, name in enumerate(("serving", "candidate")):
            report.overlap[f"stale_{name}"] = {s: sum(r["stale"][i][s] for r in judged) for s in ("total", *STATES)}
        for key in ("serving_reproduced", "shadow_reproduced"):
            seen = [r[key] for r in rows if r[key] is not None]
            report.reproduced[key] = {"checked": len(seen), "equal": sum(seen)}
    _verdict(report)


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
        s, c = o["stale_serving"], o["stale_candidate"]
        lines.append(f"  stale items packed (referee: {report.referee.get('lifecycle', 'reference')}; {o['exempt']} question(s) about "
                     f"the past exempt): serving {s['total']}, candidate {c['total']} (" + ", ".join(
                         f"{state} {s[state]} vs {c[state]}" for state in STATES) + ")")
        for key, paired in (("clean_context", report.clean), ("answer_in_context", report.answer_in_context)):
            if paired is not None and paired.n:
                lines.append(f"  {key.replace('_', ' ')}: {paired.acc_baseline:.3f} -> {paired.acc_candidate:.3f} on "
                             f"{paired.n} (McNemar p={paired.mcnemar_p:.4g}, CI [{paired.ci_low:+.3f}, "
                             f"{paired.ci_high:+.3f}])")
                lines += slice_lines(key.replace("_", " "), report.slices[key])
        for key, value in report.reproduced.items():
            if value["checked"]:
                lines.append(f"  {key.replace('_', ' ')}: {value['equal']}/{value['checked']} logged contexts")
    lines.append(f"verdict: {report.verdict}" + "".join(f"\n  - {r}" for r in report.reasons))
    return "\n".join(lines)
