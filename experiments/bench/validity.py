"""Which decision outcome predicts what carries to unseen conversations? For a pool of single and coupled moves
(from the baseline and from evolved strategies), each move's delta under every candidate outcome on one set of
LoCoMo conversations is set against its answer-in-evidence delta on another set.

Candidate outcomes, per question, mean over the questions that count for both strategies of a move:

* ``answer`` — answer in evidence (binary), labelled questions;
* ``coverage`` — graded answer coverage: share of the gold answer's content words in the packed evidence items;
* ``evidence`` — every known gold turn packed (binary), labelled questions;
* ``probes`` — answer in evidence on the probe questions (:mod:`evolve.benchmarks.probes`, default settings: the
  LoCoMo-like mix, no difficulty filter), no label used;
* ``probes (drop trivial)`` — the same with the difficulty filter on (``difficulty: drop_trivial``), no label used;
* ``probes (drawn session)`` — each probe asked at a session drawn between its evidence and the last one at which its
  answer holds (``asked: drawn``), where ``probes`` asks at that last one;
* ``probes (images capped at 0.05)``, ``... 0.15``, ``probes (images 0.05, aggregations 0.19)`` — at most that share of a
  conversation's probes of the kind (``kind_caps``), where the default draws image probes without a cap;
* ``probes (photo counts and names)`` — the default selection with the gallery's photo probes among the candidates
  (``gallery``: how many photos of a kind a speaker shared, the names given to their subjects);
* ``probes (after the last session)`` — every probe asked after the last session, no lifecycle timeline (the rule
  before the reference timeline);
* ``probes+labelled`` — answer in evidence on labelled and (default) probe questions together.

The probe rows choose the probe rule (difficulty filter, when probes are asked) the same way, within the evolution
half.

The outcome is chosen inside the evolution half only: two folds, conv-26 → conv-30 and conv-30 → conv-26, by mean
Spearman rank correlation (sign agreement breaks ties). conv-26/30 → conv-41/42 is reported once, after the choice,
as confirmation. Evaluations stop at the packed context (no answerer or judge) and are cached per
(strategy hash, conversation) in ``--cache``; ingested stores are cached there too. Run from the repository root:

    python experiments/bench/validity.py [--cache DIR] [--limit N]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from evolve import Harness, load_benchmark, load_strategy
from evolve.benchmarks import Benchmark, Question
from evolve.benchmarks.probes import ProbeSettings, probe_questions
from evolve.files import atomic_write_json, atomic_write_text
from evolve.observe.ladder import derives_from
from evolve.runtime import IngestionCache
from evolve.runtime.reference import ReferenceGallery, ReferenceLifecycle
from evolve.strategy.artifact import derive, strategy_hash, validate_strategy
from evolve.words import content_words

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
#: The probe selections compared, by outcome name.
#: ``(settings, timeline)``: with the timeline a probe is asked at a session where its answer holds (the shipped
#: rule), without it after the last session (the rule before the reference timeline).
PROBE_SETS = {"probes": (ProbeSettings(), True),
              "probes (drop trivial)": (ProbeSettings(difficulty="drop_trivial"), True),
              "probes (drawn session)": (ProbeSettings(asked="drawn"), True),
              "probes (after the last session)": (ProbeSettings(), False),
              "probes (photo counts and names)": (ProbeSettings(gallery=True), True),
              "probes (images capped at 0.05)": (ProbeSettings(kind_caps={"image": 0.05}), True),
              "probes (images capped at 0.15)": (ProbeSettings(kind_caps={"image": 0.15}), True),
              "probes (images 0.05, aggregations 0.19)": (ProbeSettings(kind_caps={"image": 0.05, "aggregation": 0.19}),
                                                         True)}
OUTCOMES = ("answer", "coverage", "evidence", *PROBE_SETS, "probes+labelled")
FOLDS = ((("conv-26",), ("conv-30",)), (("conv-30",), ("conv-26",)))
CONFIRMATION = (("conv-26", "conv-30"), ("conv-41", "conv-42"))
PARENTS = {"baseline": "strategies/baseline.yaml", "evolved": "experiments/strategies/locomo_answer_evolved.yaml",
           "turns": "experiments/strategies/locomo_answer_turns.yaml"}
R, A, X = "retrieval.", "assembly.", "extraction."
#: ``(parent, changes)``: single moves change one field, coupled moves several.
MOVES: list[tuple[str, dict]] = [
    ("baseline", {R + "top_k": 7}), ("baseline", {R + "top_k": 3, R + "rerank.top_n": 3}),
    ("baseline", {R + "top_k": 10}), ("baseline", {R + "weights.vector": 1.0}), ("baseline", {R + "weights.vector": 0.0}),
    ("baseline", {R + "weights.bm25": 2.0}), ("baseline", {R + "weights.subquery": 0.0}),
    ("baseline", {R + "rerank.enabled": True}), ("baseline", {A + "replies": 1}), ("baseline", {A + "unit": "turn"}),
    ("baseline", {A + "unit": "sentences"}), ("baseline", {A + "format": "dialogue"}),
    ("baseline", {A + "source_window": 1}), ("baseline", {"expansion.keywords": True}),
    ("baseline", {"expansion.max_subqueries": 0}), ("baseline", {R + "rrf_kappa": 20}),
    ("baseline", {R + "intent_top_k_multiplier.multi_hop": 2.0}),
    ("baseline", {R + "intent_top_k_multiplier.temporal": 2.0}), ("baseline", {A + "reserved.profile": 0.0}),
    ("baseline", {"features.raw_dialogue_backfill": True}), ("baseline", {R + "candidate_pool": 20}),
    ("baseline", {X + "resolve_relative_dates": True}), ("baseline", {"features.turn_layer": True}),
    ("baseline", {"features.session_rollups": False}), ("baseline", {"features.profile_layer": False}),
    ("baseline", {"lifecycle.supersession": False}),
    ("baseline", {A + "unit": "turn", A + "replies": 1}),
    ("baseline", {A + "unit": "turn", R + "top_k": 12, R + "rerank.enabled": True, R + "rerank.top_n": 12}),
    ("baseline", {X + "resolve_relative_dates": True, "features.turn_layer": True}),
    ("baseline", {R + "top_k": 7, R + "weights.vector": 1.0}), ("baseline", {A + "replies": 1, A + "source_window": 1}),
    ("baseline", {R + "rerank.enabled": True, R + "top_k": 10}),
    ("evolved", {R + "top_k": 8}), ("evolved", {A + "replies": 0}), ("evolved", {A + "unit": "turn"}),
    ("evolved", {R + "rerank.enabled": True}), ("evolved", {A + "format": "dialogue"}),
    ("evolved", {R + "weights.vector": 1.0}), ("evolved", {X + "resolve_relative_dates": False}),
    ("evolved", {R + "top_k": 4, R + "rerank.top_n": 4, A + "replies": 0}),
    ("turns", {R + "top_k": 8, R + "rerank.top_n": 8}), ("turns", {R + "top_k": 16, R + "rerank.top_n": 16}),
    ("turns", {A + "replies": 0}), ("turns", {R + "rerank.enabled": False}), ("turns", {A + "unit": "memory"}),
    ("turns", {R + "weights.vector": 1.0}), ("turns", {X + "resolve_relative_dates": False}),
    ("baseline", {"images.route.enabled": True}), ("evolved", {"images.route.enabled": True}),
    ("turns", {"images.route.enabled": True}),
]


def coverage(trace) -> float | None:
    """Share of the gold answer's content words in the packed items deriving from the gold turns (``None``: the
    question does not count for answer in evidence)."""
    if trace.answer_in_evidence is None:
        return None
    words = content_words(trace.gold_answer)
    held: set[str] = set()
    for item in trace.packed:
        if derives_from(item, trace.gold_evidence):
            held |= content_words(item.get("text", ""))
    return len(words & held) / len(words)


def record(trace, sets: list[str]) -> dict:
    """The per-question values every outcome is computed from (``None`` where the question does not count: the
    loop's objectives leave unscored questions, LoCoMo's adversarial ones, out); ``sets``: the probe selections
    the question belongs to."""
    probe = trace.category.startswith("probe_")
    if not trace.scored:
        return {"probe": probe, "sets": sets, "answer": None, "coverage": None, "evidence": None}
    return {"probe": probe, "sets": sets, "answer": trace.answer_in_evidence, "coverage": coverage(trace),
            "evidence": trace.all_evidence_packed if trace.evidence_known else None}


def probe_bench() -> tuple[Benchmark, dict[str, list[str]]]:
    """dev4's labelled questions and the probes of every selection of :data:`PROBE_SETS` (a probe two selections
    share asked once), with each probe's selections."""
    labelled = load_benchmark(f"locomo:{DATA}")
    questions, sets, ids = list(labelled.questions), {}, {}
    timeline, gallery = ReferenceLifecycle(), ReferenceGallery()
    for name, (settings, timed) in PROBE_SETS.items():
        for q in probe_questions(labelled, settings, timeline=timeline if timed else None, gallery=gallery):
            key = (q.conversation_id, q.question, q.answer, q.asked_at)
            if key not in ids:
                ids[key] = f"{q.conversation_id}/p{len(ids)}"
                questions.append(Question(ids[key], q.conversation_id, q.question, q.answer, q.category, q.evidence,
                                          asked_at=q.asked_at, outdated=q.outdated))
            sets.setdefault(ids[key], []).append(name)
    return Benchmark("dev4+probe sets", labelled.conversations, questions), sets


class Evaluations:
    """Per-question records of a strategy on a conversation, cached on disk per (benchmark hash, strategy hash,
    conversation)."""

    def __init__(self, cache: Path):
        bench, self.sets = probe_bench()
        self.dir = cache / "records" / f"{bench.content_hash()[:16]}-scored"  # new probe questions: new records
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ids = {c: [q.id for q in bench.questions if q.conversation_id == c] for c in bench.conversations}
        self.harness = Harness(bench, cache=IngestionCache(cache / "ingestion"), progress=False)

    def get(self, strategy: dict, conversation: str) -> dict[str, dict]:
        path = self.dir / f"{strategy_hash(strategy)[:24]}-{conversation}.json"
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8"))
        run = self.harness.evaluate(strategy, self.ids[conversation], answer=False)
        records = {t.question_id: record(t, self.sets.get(t.question_id, [])) for t in run.traces}
        atomic_write_json(path, records)
        return records


def value(rec: dict, outcome: str) -> float | None:
    if outcome in PROBE_SETS:
        return rec["answer"] if outcome in rec["sets"] else None
    if outcome == "probes+labelled":
        return rec["answer"] if not rec["probe"] or "probes" in rec["sets"] else None
    return None if rec["probe"] else rec[outcome]


def delta(parent: dict[str, dict], child: dict[str, dict], outcome: str) -> float:
    """Mean paired child - parent difference under ``outcome`` over the questions that count for both."""
    pairs = [(value(parent[q], outcome), value(child[q], outcome)) for q in parent]
    pairs = [(float(a), float(b)) for a, b in pairs if a is not None and b is not None]
    return float(np.mean([b - a for a, b in pairs])) if pairs else 0.0


def agreement(source: np.ndarray, target: np.ndarray) -> tuple[float, float, int]:
    """Spearman rank correlation, and the share of moves whose deltas have the same sign among those where both
    move (with their number)."""
    rho = float(spearmanr(source, target).statistic)
    both = (source != 0) & (target != 0)
    signs = float(np.mean(np.sign(source[both]) == np.sign(target[both]))) if both.any() else float("nan")
    return rho, signs, int(both.sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "memevolve-validity")
    parser.add_argument("--limit", type=int, default=None, help="first N moves only")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "bench")
    args = parser.parse_args(argv)
    evals = Evaluations(args.cache)
    parents = {name: load_strategy(ROOT / path) for name, path in PARENTS.items()}
    moves = MOVES[:args.limit] if args.limit else MOVES
    for parent_name, changes in moves:  # every move is a legal strategy before any evaluation starts
        validate_strategy(derive(parents[parent_name], changes), f"move {parent_name} {changes}")
    convs = ("conv-26", "conv-30", "conv-41", "conv-42")
    deltas = {o: {c: [] for c in convs} for o in OUTCOMES}  # outcome -> conversation -> per-move delta
    pooled = {o: {k: [] for k in ("dev", "held")} for o in OUTCOMES}
    started = time.perf_counter()
    for i, (parent_name, changes) in enumerate(moves, 1):
        parent, child = parents[parent_name], derive(parents[parent_name], changes)
        records = {c: (evals.get(parent, c), evals.get(child, c)) for c in convs}
        for o in OUTCOMES:
            for c in convs:
                deltas[o][c].append(delta(*records[c], o))
            for key, group in (("dev", CONFIRMATION[0]), ("held", CONFIRMATION[1])):
                merged = ({q: r for c in group for q, r in records[c][0].items()},
                          {q: r for c in group for q, r in records[c][1].items()})
                pooled[o][key].append(delta(*merged, o))
        print(f"[{i}/{len(moves)}] {time.perf_counter() - started:6.0f}s {parent_name} {changes}: answer dev "
              f"{pooled['answer']['dev'][-1]:+.3f} held {pooled['answer']['held'][-1]:+.3f}, probes dev "
              f"{pooled['probes']['dev'][-1]:+.3f}", flush=True)
    rows = {}
    for o in OUTCOMES:
        folds = [agreement(np.array(deltas[o][src[0]]), np.array(deltas["answer"][dst[0]])) for src, dst in FOLDS]
        rows[o] = {"folds": [{"rho": r, "sign": s, "n_sign": n} for r, s, n in folds],
                   "mean_rho": float(np.mean([f[0] for f in folds])),
                   "mean_sign": float(np.nanmean([f[1] for f in folds]))}
    chosen = max(OUTCOMES, key=lambda o: (rows[o]["mean_rho"], rows[o]["mean_sign"]))
    label_free = max(PROBE_SETS, key=lambda o: (rows[o]["mean_rho"], rows[o]["mean_sign"]))  # the probe rule
    for o in OUTCOMES:  # confirmation, computed once the choice above is fixed
        rho, sign, n = agreement(np.array(pooled[o]["dev"]), np.array(pooled["answer"]["held"]))
        rows[o]["confirmation"] = {"rho": rho, "sign": sign, "n_sign": n}
    result = {"moves": [{"parent": p, "changes": c} for p, c in moves], "deltas": deltas, "pooled": pooled,
              "outcomes": rows, "chosen": chosen, "label_free": label_free}
    text = report(rows, chosen, label_free, moves, pooled)
    atomic_write_json(args.out / "validity.json", result)
    atomic_write_text(args.out / "validity_report.md", text)
    plot(pooled, chosen, args.out / "validity.png")
    print(text)
    return 0


def report(rows: dict, chosen: str, label_free: str, moves: list, pooled: dict) -> str:
    lines = [f"# Outcome validity ({len(moves)} moves)", "",
             "Chosen within the evolution half (folds conv-26 → conv-30 and conv-30 → conv-26, target: answer in "
             "evidence); conv-26/30 → conv-41/42 computed after the choice, as confirmation.", "",
             "| outcome | fold 26→30 ρ | sign | fold 30→26 ρ | sign | mean ρ | confirmation 26/30→41/42 ρ | sign |",
             "|---|---|---|---|---|---|---|---|"]
    for o, row in rows.items():
        f1, f2, conf = row["folds"][0], row["folds"][1], row["confirmation"]
        lines.append(f"| {o}{' (chosen)' if o == chosen else ''} | {f1['rho']:+.3f} | {f1['sign']:.2f} "
                     f"({f1['n_sign']}) | {f2['rho']:+.3f} | {f2['sign']:.2f} ({f2['n_sign']}) | "
                     f"**{row['mean_rho']:+.3f}** | {conf['rho']:+.3f} | {conf['sign']:.2f} ({conf['n_sign']}) |")
    lines += ["", "ρ: Spearman rank correlation of the moves' deltas; sign: share of moves with the same sign of delta "
                  "among those that move both (their number in brackets).", "",
              f"Probe rule chosen the same way among the label-free rows: **{label_free}**.", "",
              "## Deltas in pp (evolution half conv-26/30 pooled; held-out labelled conv-41/42)", "",
              "| outcome | mean abs. Δ dev (pp) | moves with Δ ≠ 0 |", "|---|---|---|"]
    for o in rows:
        dev = np.array(pooled[o]["dev"]) * 100
        lines.append(f"| {o} | {np.mean(np.abs(dev)):.2f} | {int(np.sum(dev != 0))} |")
    lines += ["", "| move | labelled Δ dev | probes Δ dev | probes (drop trivial) Δ dev | labelled Δ held out |",
              "|---|---|---|---|---|"]
    for i, (parent, changes) in enumerate(moves):
        cells = [pooled[o][k][i] * 100 for o, k in (("answer", "dev"), ("probes", "dev"),
                                                     ("probes (drop trivial)", "dev"), ("answer", "held"))]
        lines.append(f"| {parent} {changes} | " + " | ".join(f"{c:+.1f}" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def plot(pooled: dict, chosen: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(OUTCOMES), figsize=(4 * len(OUTCOMES), 4), sharey=True)
    held = np.array(pooled["answer"]["held"])
    for ax, o in zip(axes, OUTCOMES):
        dev = np.array(pooled[o]["dev"])
        ax.scatter(dev, held, s=14)
        ax.axhline(0, color="grey", lw=0.5)
        ax.axvline(0, color="grey", lw=0.5)
        ax.set_title(f"{o}{' (chosen)' if o == chosen else ''}\nρ = {spearmanr(dev, held).statistic:+.2f}")
        ax.set_xlabel("delta on conv-26/30")
    axes[0].set_ylabel("answer-in-evidence delta on conv-41/42")
    fig.suptitle(f"{len(held)} moves: delta on the evolution half against the held-out answer-in-evidence delta "
                 f"(confirmation, after the choice made within conv-26/30)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
