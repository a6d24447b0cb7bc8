"""The human summary ``memevolve run`` prints: baseline -> final on the objective with the paired test, the decision
counts, the best-ever checkpoint, where the strategy, report, MLflow runs and full JSON are, and one warning line per
power or cost problem. The full summary is JSON (``--json``, ``--summary-out``, the stores' ``summaries/``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from evolve.observe.objective import LABEL
from evolve.verify.decision import CostLimits, Verdict


def shown(path: str | Path) -> str:
    """``path`` relative to the working directory when it lies below it (a shorter line for the log)."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd())) if path.is_absolute() else str(path)
    except ValueError:
        return str(path)


def _uri(uri: str) -> str:
    """A tracking URI with a SQLite file below the working directory shown relative to it."""
    prefix = "sqlite:///"
    return prefix + shown(uri[len(prefix):]) if uri.startswith(prefix) else uri


def _num(value: Any, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _rows(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _paired(label: str, p: dict) -> str:
    counts = f"; improved {p['improved']}, regressed {p['regressed']}" if "improved" in p else ""
    ci = (f"95% CI [{p['ci_low']:+.3f}, {p['ci_high']:+.3f}]" if p.get("ci_low") is not None else "CI -")
    return (f"{label} ({p['n']} questions): delta {_num(p['delta'], '+.3f')}  McNemar p={p['mcnemar_p']:.3g}  "
            f"{ci}{counts}")


def _decisions(counts: dict[str, int]) -> str:
    accepted = counts.get(Verdict.ACCEPT.value, 0) + counts.get(Verdict.ACCEPT_WITH_MONITOR.value, 0)
    monitored = counts.get(Verdict.ACCEPT_WITH_MONITOR.value, 0)
    return (f"decisions: {accepted} accepted" + (f" ({monitored} with monitor)" if monitored else "")
            + f", {counts.get(Verdict.FEATURE_FLAG.value, 0)} flagged, {counts.get(Verdict.REJECT.value, 0)} rejected")


def warnings(result: dict, cost: CostLimits) -> list[str]:
    """One line per power or cost problem of a run: the power check's warnings, a budget stop, a comparison the
    budget could not pay for, and a final context over ``cost.max_context_words``."""
    out = [f"warning: {w}" for w in (result.get("power") or {}).get("warnings", [])]
    stop = result.get("budget_stop")
    if stop:
        out.append(f"warning: budget stop before round {stop['round']} ({', '.join(stop.get('exceeded', []))} would "
                   f"be exceeded; journal entry {stop.get('journal_index')}); the next run starts that round again")
    paired = result.get("current_vs_baseline") or {}
    if "skipped" in paired:
        out.append(f"warning: baseline vs. final not compared: {paired['skipped']}")
    words = ((result.get("current") or {}).get("context_words") or {}).get("mean")
    if cost.max_context_words is not None and words is not None and words > cost.max_context_words:
        out.append(f"warning: final context {words:.1f} words per question exceeds max_context_words "
                   f"{cost.max_context_words:g}")
    return out


def night_line(night: dict) -> str:
    """How the night ended and what its confirmation decided (a :class:`~evolve.loop.night.NightRecord` dump)."""
    took = f" in {night['minutes']:.1f} min" if "minutes" in night else ""
    head = (f"night: rounds {night['first_round']}-{night['last_round']}, {night['evaluations']} candidates compared"
            f"{took}, ended by {night['ended']}; ")
    confirmation = night.get("confirmation")
    if confirmation is None:
        return head + ("no change to confirm" if not night["diff"] else "no confirmation set")
    return head + (f"confirmation {confirmation['verdict']}: {confirmation['reason']}"
                   + (f"; the night's start {night['restored'][:12]} restored" if night.get("restored") else ""))


def questions_line(sources: dict | None) -> str | None:
    """Where the scored questions came from, when probes are among them: label-free (probes only) or augmented,
    with the probes' LoCoMo category mix."""
    if not sources or not sources.get("probes"):
        return None
    total = sources["probes"]
    mix = ", ".join(f"{c.replace('_', '-')} {n / total:.0%}" for c, n in
                    sorted(sources["probe_mix"].items(), key=lambda kv: -kv[1]))
    if sources["label_free"]:
        return (f"label-free: no labelled question, evolved on {total} probe questions generated from the "
                f"conversations (mix {mix}; validity of probes alone: {sources['probe_validity']})")
    return f"questions: {sources['labelled']} labelled and {total} probe questions (probe mix {mix})"


def run_table(result: dict, *, config: Path, stores: Path, cost: CostLimits, summary_path: Path | None) -> str:
    """The human summary of a ``memevolve run`` result (:meth:`evolve.loop.engine.Engine.run`)."""
    objective = result["objective"]
    label = LABEL[objective]
    base, cur = result["baseline"], result["current"]
    lines = [f"memevolve run {config}: {result['rounds']} round(s) committed in {shown(stores)}, objective {objective}"]
    if "score" in base:
        columns = [(label, "score")] + ([("accuracy", "accuracy")] if objective != "accuracy" else [])
        columns.append(("safe rate", "safe_rate"))
        rows = [("", *(name for name, _ in columns), "context words")]
        rows += [(name, *(_num(side.get(key)) for _, key in columns), _num(side["context_words"]["mean"], ".1f"))
                 for name, side in (("baseline", base), ("final", cur))]
        lines += _rows(rows)
    paired = result.get("current_vs_baseline")
    if paired and "skipped" not in paired:
        lines.append(_paired("final vs. baseline", paired))
    if result.get("holdout"):
        lines.append(_paired("holdout", result["holdout"]))
    if (line := questions_line(result.get("questions"))) is not None:
        lines.append(line)
    lines.append(_decisions(result.get("decisions") or {}))
    if result.get("night"):
        lines.append(night_line(result["night"]))
    best = result.get("best")
    lines.append(f"best-ever: {best['hash'][:12]} {label} {_num(best['score'])} (round {best['round']})" if best
                 else "best-ever: none yet")
    lines.append(f"final strategy: {shown(cur['path'])}")
    llm = {role: c for role, c in (result.get("llm") or {}).items() if c.get("requests") or c.get("cache_hits")}
    if llm:
        lines.append("LLM: " + ", ".join(f"{role} {c.get('requests', 0)} requests, {c.get('cache_hits', 0)} cached"
                                         for role, c in sorted(llm.items())))
    lines += warnings(result, cost)
    lines.append(f"report: memevolve report --config {config} --out runs/report.html")
    tracking = result.get("tracking")
    if tracking:
        runs = ", ".join(f"round {n} {run_id}" for n, run_id in tracking["runs"].items()) or "no round tracked"
        lines.append(f"MLflow: {_uri(tracking['uri'])}, experiment {tracking['experiment']} ({runs})")
    else:
        lines.append("MLflow: not tracked (--no-tracking)")
    if summary_path is not None:
        lines.append(f"full summary: {shown(summary_path)} (--json prints it)")
    return "\n".join(lines)
