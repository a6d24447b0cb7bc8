"""The run report: one self-contained HTML page (inline SVG plots, no external assets) and a Markdown
summary for a pull-request comment, both built from a read-only :class:`~evolve.ops.history.History`."""
from __future__ import annotations

import html
import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from evolve.loop.record import CandidateRecord
from evolve.ops.history import History
from evolve.ops.review import candidate_row, category_deltas, change_summary, fmt_ci, fmt_num
from evolve.ops.serving import SERVING_TYPES, drift_report
from evolve.observe.diagnosis import ROOT_CAUSES
from evolve.state.files import atomic_write_text
from evolve.verify.decision import changes_strategy

CAUSE_COLORS = {"ingestion_gap": "#8250df", "retrieval_gap": "#0969da", "kf_filtered": "#bf8700",
                "generation_error": "#cf222e", "unresolved": "#8c959f"}
#: (colour, matplotlib marker, label) per verdict.
VERDICT_STYLE = {"ACCEPT": ("#1a7f37", "^", "accepted"), "ACCEPT_WITH_MONITOR": ("#4d9e2f", "v", "accepted (monitor)"),
                 "FEATURE_FLAG": ("#d4a72c", "o", "feature flag"), "REJECT": ("#cf222e", "X", "rejected")}


@dataclass
class Overview:
    """Headline numbers of a stores directory."""

    n_rounds: int
    harness: dict
    baseline_hash: str | None
    current_hash: str | None
    baseline: dict | None  # evaluation summaries (accuracy, accuracy_by_category, ...)
    current: dict | None
    current_accuracy: float | None
    best: dict | None  # checkpoint manifest: strategy_hash, round, score
    best_summary: dict | None
    decisions: Counter

    @classmethod
    def of(cls, view: History) -> "Overview":
        base, cur = view.state.get("baseline_strategy"), view.state.get("current_strategy")
        rounds, best = view.rounds, view.best
        return cls(len(rounds), view.harness or {}, base, cur, view.summary_of(base) if base else None,
                   view.summary_of(cur) if cur else None, rounds[-1]["accuracy"] if rounds else None,
                   best, view.summary_of(best["strategy_hash"]) if best else None,
                   Counter(r.verdict for r in view.records))


# ---------------------------------------------------------------- plots


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
    """Accuracy of the current strategy across rounds, best-ever, and every fully evaluated candidate."""
    fig, ax = _figure(11, 3.8)
    if not rounds:
        ax.text(0.5, 0.5, "no rounds committed", ha="center", transform=ax.transAxes)
        return _svg(fig)
    xs = [0] + [r["round"] for r in rounds]
    ax.plot(xs, [rounds[0]["observed_accuracy"]] + [r["accuracy"] for r in rounds], "-o", color="#24292f",
            markersize=4, linewidth=1.8, label="current strategy", zorder=3)
    ax.step(xs, [rounds[0]["observed_accuracy"]] + [r["best_accuracy"] for r in rounds], where="post",
            linestyle="--", color="#8c959f", linewidth=1.2, label="best ever")
    evaluated = [r for r in records if r.paired]
    for verdict, (color, marker, label) in VERDICT_STYLE.items():
        pts = [(r.round + _offset(r, records), r.paired["acc_candidate"], r.applied)
               for r in evaluated if r.verdict == verdict]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, s=[90 if p[2] else 42 for p in pts],
                       color=color, edgecolors=["#24292f" if p[2] else color for p in pts], linewidths=1.2,
                       label=label, zorder=4)
    restored = [r for r in rounds if r.get("restored")]
    if restored:
        ax.scatter([r["round"] for r in restored], [r["accuracy"] for r in restored], marker="D", s=80,
                   facecolors="none", edgecolors="#8250df", linewidths=2, label="restored best-ever", zorder=5)
    screened = sum(1 for r in records if not r.paired)
    ax.set_xticks(xs, ["start"] + [f"round {x}" for x in xs[1:]])
    ax.set_ylabel("accuracy")
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
    for cause in ROOT_CAUSES:
        values = [r["root_causes"].get(cause, 0) for r in rounds]
        if any(values):
            ax.bar(xs, values, bottom=bottom, color=CAUSE_COLORS[cause], width=0.6, label=cause.replace("_", " "))
            bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(xs, [f"R{x}" for x in xs])
    ax.set_ylabel("wrong answers")
    ax.set_title("Root causes at the start of each round", fontsize=10, loc="left")
    ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4)
    return _svg(fig)


def category_plot(ov: Overview) -> str:
    """Per-category accuracy change of the current (and best-ever, if different) strategy vs the baseline."""
    fig, ax = _figure(5.6, 3.6)
    base = (ov.baseline or {}).get("accuracy_by_category")
    series = [("current", "#0969da", (ov.current or {}).get("accuracy_by_category"))]
    if ov.best and ov.best["strategy_hash"] not in (ov.current_hash, ov.baseline_hash) and ov.best_summary:
        series.append(("best ever", "#8250df", ov.best_summary["accuracy_by_category"]))
    if not base or not series[0][2]:
        ax.text(0.5, 0.5, "per-category accuracy not recorded", ha="center", transform=ax.transAxes)
        return _svg(fig)
    cats = sorted(base)
    height = 0.7 / len(series)
    spans = [0.05]
    for i, (label, color, acc) in enumerate(series):
        deltas = [acc.get(c, 0.0) - base[c] for c in cats]
        spans += [abs(d) for d in deltas]
        ys = [k - 0.35 + height * (i + 0.5) for k in range(len(cats))]
        ax.barh(ys, deltas, height=height * 0.9, color=color, label=label)
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
    same = ov.current_hash == ov.baseline_hash
    ax.set_title("Accuracy by category vs baseline" + (" (current is the baseline)" if same else ""),
                 fontsize=10, loc="left")
    ax.set_xlabel("accuracy difference")
    if len(series) > 1:
        ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return _svg(fig)


# ---------------------------------------------------------------- HTML

CSS = """
body{font:14px/1.45 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;color:#24292f;margin:0;background:#f6f8fa}
main{max-width:1240px;margin:0 auto;padding:24px 28px;background:#fff}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:22px 0 6px} .muted{color:#57606a} code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:8px 10px;overflow-x:auto;white-space:pre-wrap}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.card{border:1px solid #d0d7de;border-radius:8px;padding:10px 14px;flex:1 1 0;min-width:140px}
.card b{display:block;font-size:20px} .card span{color:#57606a;font-size:12px}
.card.small{flex-grow:2} .card.small b{font-size:14px;line-height:28px}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:18px} .cols>div{min-width:0}
.plots{display:grid;grid-template-columns:1fr 1fr;gap:12px} .plots .wide{grid-column:1/3}
svg.plot{width:100%;height:auto} figure{margin:0;border:1px solid #d0d7de;border-radius:8px;padding:8px}
table{border-collapse:collapse;width:100%;font-size:12.5px;margin:6px 0}
th,td{border-bottom:1px solid #eaeef2;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600} tr:nth-child(even) td{background:#fbfcfd}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:11.5px;font-weight:600;color:#fff}
.ACCEPT{background:#1a7f37}.ACCEPT_WITH_MONITOR{background:#4d9e2f}
.FEATURE_FLAG{background:#9a6700}.REJECT{background:#cf222e}
.ok{color:#1a7f37}.fail{color:#cf222e} section.cand{border-top:1px solid #d0d7de;margin-top:18px}
a{color:#0969da;text-decoration:none} a:hover{text-decoration:underline}
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _table(head: list[str], rows: list[list[str]], num: set[int] = frozenset()) -> str:
    """An HTML table; cells are already-escaped HTML."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _badge(verdict: str) -> str:
    return f'<span class="badge {_e(verdict)}">{_e(verdict)}</span>'


def _cards(ov: Overview) -> str:
    base_acc = (ov.baseline or {}).get("accuracy")
    items = [(str(ov.n_rounds), "rounds"), (fmt_num(base_acc, ".3f"), "baseline accuracy"),
             (fmt_num(ov.current_accuracy, ".3f"), f"current accuracy ({(ov.current_hash or '-')[:12]})")]
    if ov.best:
        items.append((f"{ov.best['score']:.3f}",
                      f"best ever (round {ov.best['round']}, {ov.best['strategy_hash'][:12]})"))
    items.append((", ".join(f"{n} {v}" for v, n in sorted(ov.decisions.items())) or "none", "decisions"))
    return '<div class="cards">' + "".join(
        f'<div class="card{" small" if len(v) > 12 else ""}"><b>{_e(v)}</b><span>{_e(k)}</span></div>'
        for v, k in items) + "</div>"


def _candidates_html(records: list[CandidateRecord]) -> str:
    head = ["id", "round", "change", "decided by", "Δ", "p", "CI", "per-category Δ", "verdict", "applied"]
    rows = []
    for r in records:
        c = candidate_row(r)
        rows.append([f'<a href="#cand-{_e(c["id"])}">{_e(c["id"])}</a>', c["round"], f"<code>{_e(c['change'])}</code>",
                     _e(c["decided_by"]), c["Δ"], c["p"], c["CI"], _e(c["per-category Δ"]), _badge(c["verdict"]),
                     c["applied"]])
    return _table(head, rows, num={1, 4, 5, 6})


def _candidate_section(r: CandidateRecord, view: History) -> str:
    p = r.paired
    head = (f'<section class="cand" id="cand-{_e(r.candidate_id)}">'
            f"<h3>{_e(r.candidate_id)} {_badge(r.verdict)} <span class='muted'>round {r.round}, decided by "
            f"{_e(r.decided_by)}, applied: {'yes' if r.applied else 'no'} · "
            "<a href='#candidates'>back to the table</a></span></h3>"
            f"<p>{_e(r.reason)}<br><span class='muted'>direction {_e(r.direction['key'])} for "
            f"{_e(r.symptom)} — {_e(r.direction.get('why', ''))}</span></p>")
    left = [f"<pre>{_e(r.diff_text or '(no candidate was built)')}</pre>", _facts(r)]
    right = []
    if r.gates:
        right.append(_table(["gate", "", "reason"], [[_e(g["name"]), '<span class="ok">pass</span>' if g["passed"]
                                                      else '<span class="fail">FAIL</span>', _e(g["reason"])]
                                                     for g in r.gates["results"]]))
    if p:
        right.append(_table(["category", "n", "parent", "candidate", "Δ"],
                            [[_e(c), str(row["n"]), f"{row['acc_baseline']:.3f}", f"{row['acc_candidate']:.3f}",
                              f"{row['delta']:+.3f}"] for c, row in sorted(p["per_category"].items())],
                            num={1, 2, 3, 4}))
    parts = [head, f"<div class='cols'><div>{''.join(left)}</div><div>{''.join(right)}</div></div>"]
    for side in ("improved", "regressed"):
        examples = (r.examples or {}).get(side, [])
        if examples:
            parts.append(f"<p><b>{side}</b> ({len(examples)} of {len(p[side])} shown)</p>")
            parts.append(_table(["question", "gold", "parent answer", "candidate answer",
                                 "root cause (parent → cand.)"],
                                [[f"{_e(x['question'])}<br><span class='muted'>{_e(x['question_id'])} · "
                                  f"{_e(x['category'])}</span>", _e(x["gold"]), _e(x["baseline_answer"]),
                                  _e(x["candidate_answer"]), f"{_e(x['baseline_root_cause'] or 'correct')} → "
                                  f"{_e(x['candidate_root_cause'] or 'correct')}"] for x in examples]))
    restore = f"parent <code>{_e(view.strategy_path(r.parent_hash))}</code>"
    if r.strategy_hash:
        restore += f"<br>candidate <code>{_e(view.strategy_path(r.strategy_hash))}</code>"
    if changes_strategy(r.verdict):
        flag = " --accept-monitor" if r.verdict == "ACCEPT_WITH_MONITOR" else ""
        restore += (f"<br>promote: <code>memevolve promote {_e(r.candidate_id)} --to "
                    f"strategies/serving.yaml{flag}</code>")
    parts.append(f"<p class='muted'>{restore}</p></section>")
    return "".join(parts)


def _facts(r: CandidateRecord) -> str:
    """Critic, probe and paired statistics of one candidate as a list."""
    critic, probe, p = r.critic, r.probe, r.paired
    facts = []
    if critic:
        facts.append(f"critic: <b>{_e(critic['label'])}</b> — {_e('; '.join(critic['reasons']))}")
    if probe:
        facts.append(f"probe ({probe['n']} q): {probe['acc_baseline']:.3f} → {probe['acc_candidate']:.3f} "
                     f"(Δ {probe['delta']:+.3f})")
    if p:
        facts.append(f"paired ({p['n']} q): {p['acc_baseline']:.3f} → {p['acc_candidate']:.3f}, "
                     f"Δ {p['delta']:+.4f}, McNemar p={p['mcnemar_p']:.3g}, CI {fmt_ci(p)}, "
                     f"improved {len(p['improved'])}, regressed {len(p['regressed'])}, "
                     f"DCR@3 {fmt_num(r.dcr, '.3f')}")
    return "<ul>" + "".join(f"<li>{f}</li>" for f in facts) + "</ul>" if facts else ""


def _serving_html(view: History) -> str:
    entries = [e for e in view.journal.entries() if e["type"] in SERVING_TYPES]
    if not entries:
        return "<p class='muted'>No promotion recorded yet (<code>memevolve promote</code>).</p>"
    rows = [[str(e["index"]), _e(e["type"]), _e(e["ts"][:19]), _e(e["payload"].get("candidate_id", "")),
             f"<code>{_e(str(e['payload']['strategy_hash'])[:12])}</code>",
             f"<code>{_e(e['payload']['target'])}</code>"]
            for e in entries]
    status = "".join(f"<li class='{'ok' if s.ok else 'fail'}'><code>{_e(s.target)}</code>: {_e(s.describe())}</li>"
                     for s in drift_report(view))
    return _table(["entry", "type", "time (UTC)", "candidate", "strategy", "target"], rows) + f"<ul>{status}</ul>"


def render_html(view: History) -> str:
    """The complete report page."""
    ov = Overview.of(view)
    records = view.records
    h = ov.harness
    harness = (f"{h.get('benchmark', '?')} · {h.get('n_questions', '?')} questions · judge {h.get('judge', '?')} · "
               f"benchmark {str(h.get('benchmark_hash', '?'))[:12]} · schema {str(h.get('schema_hash', '?'))[:12]}")
    body = [f"<h1>memevolve report</h1><p class='muted'>stores <code>{_e(view.root)}</code> · {_e(harness)}</p>",
            _cards(ov), "<h2>Trajectory and diagnosis</h2><div class='plots'>",
            f"<figure class='wide'>{trajectory_plot(view.rounds, records)}</figure>",
            f"<figure>{root_cause_plot(view.rounds)}</figure><figure>{category_plot(ov)}</figure></div>",
            "<h2>Serving</h2>", _serving_html(view),
            f"<h2 id='candidates'>Candidates ({len(records)})</h2>",
            _candidates_html(records) if records else "<p>none</p>",
            "<h2>Evidence per candidate</h2>", *(_candidate_section(r, view) for r in records)]
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>memevolve report</title>"
            f"<style>{CSS}</style></head><body><main>{''.join(body)}</main></body></html>\n")


# ---------------------------------------------------------------- Markdown


def _md(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(view: History, html_name: str | None = None) -> str:
    """A short summary suitable for a pull-request comment."""
    ov = Overview.of(view)
    records, h = view.records, ov.harness
    base_acc = (ov.baseline or {}).get("accuracy")
    lines = [f"### memevolve: {ov.n_rounds} round(s) on {h.get('benchmark', '?')} "
             f"({h.get('n_questions', '?')} questions, judge {h.get('judge', '?')})", "",
             "| strategy | hash | accuracy |", "| --- | --- | ---: |",
             f"| baseline | `{(ov.baseline_hash or '-')[:12]}` | {fmt_num(base_acc, '.3f')} |",
             f"| current | `{(ov.current_hash or '-')[:12]}` | {fmt_num(ov.current_accuracy, '.3f')} |"]
    if ov.best:
        lines.append(f"| best ever (round {ov.best['round']}) | `{ov.best['strategy_hash'][:12]}` | "
                     f"{ov.best['score']:.3f} |")
    lines += ["", "Decisions: " + (", ".join(f"{n} {v}" for v, n in sorted(ov.decisions.items())) or "none")]
    accepted = [r for r in records if changes_strategy(r.verdict)]
    if accepted:
        lines += ["", "**Accepted**", ""]
        for r in accepted:
            p = r.paired
            flag = " --accept-monitor" if r.verdict == "ACCEPT_WITH_MONITOR" else ""
            lines.append(f"- `{r.candidate_id}` {_md(change_summary(r))}: Δ {p['delta']:+.4f} "
                         f"(p={p['mcnemar_p']:.3g}, CI {fmt_ci(p)}; {category_deltas(p)})"
                         f"{' — applied' if r.applied else ''}. "
                         f"Promote: `memevolve promote {r.candidate_id} --to strategies/serving.yaml{flag}`")
    evaluated = [r for r in records if r.paired]
    if evaluated:
        lines += ["", "| id | change | Δ | p | CI | verdict |", "| --- | --- | ---: | ---: | --- | --- |"]
        lines += [f"| {c['id']} | {_md(c['change'])} | {c['Δ']} | {c['p']} | {c['CI']} | {c['verdict']} |"
                  for c in map(candidate_row, evaluated)]
    screened = Counter(r.decided_by for r in records if not r.paired)
    if screened:
        lines += ["", "Screened out before full evaluation: " +
                  ", ".join(f"{n} by {k}" for k, n in sorted(screened.items()))]
    if html_name:
        lines += ["", f"Full report with plots and per-candidate evidence: `{html_name}`"]
    return "\n".join(lines) + "\n"


def write_report(view: History, out_html: str | Path, out_md: str | Path | None = None) -> None:
    """Write the HTML page (and the Markdown summary) atomically."""
    atomic_write_text(out_html, render_html(view))
    if out_md is not None:
        atomic_write_text(out_md, render_markdown(view, Path(out_html).name))
