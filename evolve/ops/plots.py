"""The report's plots, drawn with matplotlib and returned as inline SVG (no external assets): the score trajectory
with every candidate's verdict, the root-cause composition per round and per-category accuracy vs the baseline."""
from __future__ import annotations

import io
import re

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from evolve.state.record import CandidateRecord
from evolve.observe.ladder import RootCause
from evolve.observe.objective import LABEL

CAUSE_COLORS = {RootCause.INGESTION_GAP: "#8250df", RootCause.RETRIEVAL_GAP: "#0969da",
                RootCause.KF_FILTERED: "#bf8700", RootCause.GENERATION_ERROR: "#cf222e", RootCause.UNRESOLVED: "#8c959f"}
#: (colour, matplotlib marker, label) per verdict.
VERDICT_STYLE = {"ACCEPT": ("#1a7f37", "^", "accepted"), "ACCEPT_WITH_MONITOR": ("#4d9e2f", "v", "accepted (monitor)"),
                 "FEATURE_FLAG": ("#d4a72c", "o", "feature flag"), "REJECT": ("#cf222e", "X", "rejected")}


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE (an external DTD reference)
    return re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r'<svg\1 class="plot"', text, count=1)


def _figure(width: float, height: float) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(width, height), dpi=100)
    ax = fig.add_subplot()
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#d0d7de", linewidth=0.6)
    ax.set_axisbelow(True)
    return fig, ax


def trajectory_plot(rounds: list[dict], records: list[CandidateRecord]) -> str:
    """The objective score of the current strategy across rounds (and on the holdout, when there is one), best-ever,
    and every fully evaluated candidate."""
    fig, ax = _figure(11, 3.8)
    if not rounds:
        ax.text(0.5, 0.5, "no rounds committed", ha="center", transform=ax.transAxes)
        return _svg(fig)
    xs = [0] + [r["round"] for r in rounds]
    ax.plot(xs, [rounds[0]["observed_score"]] + [r["score"] for r in rounds], "-o", color="#24292f",
            markersize=4, linewidth=1.8, label="current strategy", zorder=3)
    ax.step(xs, [rounds[0]["observed_score"]] + [r["best_score"] for r in rounds], where="post",
            linestyle="--", color="#8c959f", linewidth=1.2, label="best ever")
    held = [r for r in rounds if r.get("holdout_score") is not None]
    if held:
        ax.plot([r["round"] for r in held], [r["holdout_score"] for r in held], "-s", color="#0969da", markersize=4,
                linewidth=1.4, label="current, on the holdout", zorder=3)
    evaluated = [r for r in records if r.paired]
    for verdict, (color, marker, label) in VERDICT_STYLE.items():
        pts = [(r.round + _offset(r, records), r.paired.acc_candidate, r.applied)
               for r in evaluated if r.verdict == verdict]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, s=[90 if p[2] else 42 for p in pts],
                       color=color, edgecolors=["#24292f" if p[2] else color for p in pts], linewidths=1.2,
                       label=label, zorder=4)
    restored = [r for r in rounds if r.get("restored")]
    if restored:
        ax.scatter([r["round"] for r in restored], [r["score"] for r in restored], marker="D", s=80,
                   facecolors="none", edgecolors="#8250df", linewidths=2, label="restored best-ever", zorder=5)
    screened = sum(1 for r in records if not r.paired)
    ax.set_xticks(xs, ["start"] + [f"round {x}" for x in xs[1:]])
    ax.set_ylabel(LABEL[rounds[-1].get("objective", "accuracy")])
    ax.set_title(f"Score trajectory ({len(evaluated)} candidates fully evaluated, {screened} screened out earlier; "
                 "outlined = applied)", fontsize=10, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=9)
    return _svg(fig)


def _offset(record: CandidateRecord, records: list[CandidateRecord]) -> float:
    """Spread a round's candidates horizontally so their markers do not overlap."""
    same = [r.candidate_id for r in records if r.round == record.round and r.paired]
    return 0.0 if len(same) < 2 else -0.25 + 0.5 * same.index(record.candidate_id) / (len(same) - 1)


def root_cause_plot(rounds: list[dict]) -> str:
    """Failures by root cause of the strategy each round started from (stacked bars)."""
    fig, ax = _figure(5.6, 3.6)
    xs = [r["round"] for r in rounds]
    bottom = [0] * len(rounds)
    for cause in RootCause:
        values = [r["root_causes"].get(cause, 0) for r in rounds]
        if any(values):
            ax.bar(xs, values, bottom=bottom, color=CAUSE_COLORS[cause], width=0.6, label=cause.replace("_", " "))
            bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(xs, [f"R{x}" for x in xs])
    ax.set_ylabel("wrong answers")
    ax.set_title("Root causes at the start of each round", fontsize=10, loc="left")
    ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4)
    return _svg(fig)


def category_plot(base: dict[str, float] | None, current: dict[str, float] | None,
                  best: dict[str, float] | None = None, *, current_is_baseline: bool = False,
                  label: str = LABEL["accuracy"]) -> str:
    """Per-category change of the current (and best-ever, when given) strategy vs the baseline, in the objective's
    score named ``label``."""
    fig, ax = _figure(5.6, 3.6)
    series = [("current", "#0969da", current)] + ([("best ever", "#8250df", best)] if best else [])
    if not base or not current:
        ax.text(0.5, 0.5, f"per-category {label} not recorded", ha="center", transform=ax.transAxes)
        return _svg(fig)
    cats = sorted(base)
    height = 0.7 / len(series)
    spans = [0.05]
    for i, (name, color, acc) in enumerate(series):
        deltas = [acc.get(c, 0.0) - base[c] for c in cats]
        spans += [abs(d) for d in deltas]
        ys = [k - 0.35 + height * (i + 0.5) for k in range(len(cats))]
        ax.barh(ys, deltas, height=height * 0.9, color=color, label=name)
        for y, d in zip(ys, deltas):
            ax.annotate(f"{d:+.3f}", (d, y), xytext=(4 if d >= 0 else -4, 0), textcoords="offset points",
                        ha="left" if d >= 0 else "right", va="center", fontsize=8)
    ax.set_yticks(range(len(cats)), [c.replace("_", " ") for c in cats])
    ax.invert_yaxis()
    ax.axvline(0, color="#24292f", linewidth=0.8)
    ax.grid(axis="x", color="#d0d7de", linewidth=0.6)
    ax.grid(axis="y", visible=False)
    span = max(spans) * 1.45
    ax.set_xlim(-span, span)
    ax.set_title(f"{label[:1].upper()}{label[1:]} by category vs baseline"
                 + (" (current is the baseline)" if current_is_baseline else ""), fontsize=10, loc="left")
    ax.set_xlabel(f"{label} difference")
    if len(series) > 1:
        ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return _svg(fig)


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The ``(words, score)`` points no other point beats on both (fewer or equal words, higher or equal score),
    cheapest first."""
    front: list[tuple[float, float]] = []
    for words, score in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or score > front[-1][1]:
            front.append((words, score))
    return front


def cost_plot(records: list[CandidateRecord], objective: str = "accuracy") -> str:
    """Objective vs. mean context words of every fully evaluated candidate, with the Pareto frontier and the
    accepted path (parent of the first accept, then each applied candidate)."""
    fig, ax = _figure(5.6, 3.6)
    costed = [r for r in records if r.paired and r.cost]
    if not costed:
        ax.text(0.5, 0.5, "no fully evaluated candidate with a recorded cost", ha="center", transform=ax.transAxes)
        return _svg(fig)
    points = [(r.cost.words_candidate, r.paired.acc_candidate) for r in costed]
    for verdict, (color, marker, label) in VERDICT_STYLE.items():
        mine = [(r.cost.words_candidate, r.paired.acc_candidate) for r in costed if r.verdict == verdict]
        if mine:
            ax.scatter([p[0] for p in mine], [p[1] for p in mine], marker=marker, color=color, s=40, label=label,
                       zorder=4)
    front = pareto_front(points)
    ax.step([p[0] for p in front], [p[1] for p in front], where="post", color="#8250df", linewidth=1.2,
            linestyle="--", label="Pareto frontier")
    applied = [r for r in costed if r.applied]
    if applied:
        path = [(applied[0].cost.words_parent, applied[0].paired.acc_baseline)]
        path += [(r.cost.words_candidate, r.paired.acc_candidate) for r in applied]
        ax.plot([p[0] for p in path], [p[1] for p in path], "-o", color="#24292f", markersize=4, linewidth=1.6,
                label="accepted path", zorder=3)
    ax.set_xlabel("context words per question (mean)")
    ax.set_ylabel(LABEL[objective])
    ax.set_title("Objective vs. context cost", fontsize=10, loc="left")
    ax.legend(fontsize=8, frameon=False, loc="lower right")
    return _svg(fig)
