"""The run report: one self-contained HTML page (inline SVG plots, no external assets) and a Markdown
summary for a pull-request comment, both built from a read-only :class:`~evolve.ops.history.History`."""
from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from evolve.data import REPORT_CSS_PATH
from evolve.state.content import resolved
from evolve.state.record import CandidateRecord
from evolve.ops.history import History
from evolve.ops.antipatterns import AntiPattern, catalog
from evolve.ops.formatting import change_summary, fmt_ci, fmt_num
from evolve.ops.review import answers_text, candidate_row, category_deltas, objective_of, secondary_text
from evolve.observe.objective import LABEL, SCORE_FIELD
from evolve.ops.drift import SERVING_TYPES, approval_text, drift_report
from evolve.ops.escalations import Escalation, escalations
from evolve.ops.flags import Flag, figures, flag_registry
from evolve.ops.monitors import monitor_regressions, monitors_table, regression_text
from evolve.ops.plots import category_plot, cost_plot, root_cause_plot, trajectory_plot
from evolve.files import atomic_write_text
from evolve.state.entries import JournalEntry, PromotePayload
from evolve.verify.confabulation import safe_rate
from evolve.verify.decision import Verdict, changes_strategy

@dataclass
class Overview:
    """Headline numbers of a stores directory."""

    n_rounds: int
    harness: dict
    objective: str
    baseline_hash: str | None
    current_hash: str | None
    baseline: dict | None  # evaluation summaries (accuracy, accuracy_by_category, ...)
    current: dict | None
    baseline_score: float | None  # under the objective
    current_score: float | None
    best: dict | None  # checkpoint manifest: strategy_hash, round, score
    best_summary: dict | None
    decisions: Counter

    @classmethod
    def of(cls, view: History) -> "Overview":
        base, cur = view.state.get("baseline_strategy"), view.state.get("current_strategy")
        rounds, best, harness = view.rounds, view.best, view.harness or {}
        return cls(len(rounds), harness, harness.get("objective", "accuracy"), base, cur,
                   view.summary_of(base) if base else None, view.summary_of(cur) if cur else None,
                   rounds[0]["observed_score"] if rounds else None, rounds[-1]["score"] if rounds else None,
                   best, view.summary_of(best["strategy_hash"]) if best else None,
                   Counter(r.verdict for r in view.records))

    @property
    def label(self) -> str:
        return LABEL[self.objective]


def _category_plot(ov: Overview) -> str:
    """The objective's per-category score of the current (and best-ever) strategy against the baseline."""
    by_cat = f"{SCORE_FIELD[ov.objective]}_by_category"
    best = ov.best_summary.get(by_cat) if (ov.best and ov.best_summary and ov.best["strategy_hash"] not in
                                           (ov.current_hash, ov.baseline_hash)) else None
    return category_plot((ov.baseline or {}).get(by_cat), (ov.current or {}).get(by_cat), best,
                         current_is_baseline=ov.current_hash == ov.baseline_hash, label=ov.label)


# ---------------------------------------------------------------- HTML



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
    items = [(str(ov.n_rounds), "rounds"), (fmt_num(ov.baseline_score, ".3f"), f"baseline {ov.label}"),
             (fmt_num(ov.current_score, ".3f"), f"current {ov.label} ({(ov.current_hash or '-')[:12]})")]
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


def review_name(candidate_id: str) -> str:
    """The file name of a candidate's review page (``memevolve review``) beside the report that links it."""
    return f"review-{candidate_id}.html"


def _review_link(r: CandidateRecord, reviewed: frozenset[str]) -> str:
    """A fully compared candidate's review page: linked when written beside the report, else the command."""
    p = r.paired
    if p is None or not (p.improved or p.regressed):
        return ""
    n = len(p.improved) + len(p.regressed)
    if r.candidate_id in reviewed:
        return f"<p><a class='review' href='{_e(review_name(r.candidate_id))}'>review page</a> ({n} discordances)</p>"
    return (f"<p class='muted'>review page ({n} discordances): <code>memevolve review {_e(r.candidate_id)} --out "
            f"{_e(review_name(r.candidate_id))}</code> beside this report</p>")


def _candidate_section(r: CandidateRecord, view: History, reviewed: frozenset[str] = frozenset()) -> str:
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
        right.append(_table(["gate", "", "reason"], [[_e(g.name), '<span class="ok">pass</span>' if g.passed
                                                      else '<span class="fail">FAIL</span>', _e(g.reason)]
                                                     for g in r.gates.results]))
    if p:
        label = _e(LABEL[objective_of(r)])
        right.append(_table(["category", "n", f"parent {label}", f"candidate {label}", "Δ"],
                            [[_e(c), str(row["n"]), f"{row['acc_baseline']:.3f}", f"{row['acc_candidate']:.3f}",
                              f"{row['delta']:+.3f}"] for c, row in sorted(p.per_category.items())],
                            num={1, 2, 3, 4}))
    parts = [head, f"<div class='cols'><div>{''.join(left)}</div><div>{''.join(right)}</div></div>",
             _review_link(r, reviewed)]
    for side in ("improved", "regressed"):
        examples = (resolved(r.examples, view.content) or {}).get(side, [])
        if examples:
            parts.append(f"<p><b>{side}</b> ({len(examples)} of {len(getattr(p, side))} shown)</p>")
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
        flag = " --accept-monitor" if r.verdict == Verdict.ACCEPT_WITH_MONITOR else ""
        restore += (f"<br>promote: <code>memevolve promote {_e(r.candidate_id)} --to "
                    f"strategies/serving.yaml{flag}</code>")
    parts.append(f"<p class='muted'>{restore}</p></section>")
    return "".join(parts)


def _facts(r: CandidateRecord) -> str:
    """Critic, probe and paired statistics of one candidate as a list."""
    critic, probe, p = r.critic, r.probe, r.paired
    label = _e(LABEL[objective_of(r)])
    facts = []
    if critic:
        facts.append(f"critic: <b>{_e(critic.label)}</b> — {_e('; '.join(critic.reasons))}")
    if probe:
        facts.append(f"probe ({probe.n} q, {label}): {probe.acc_baseline:.3f} → {probe.acc_candidate:.3f} "
                     f"(Δ {probe.delta:+.3f})")
    if p:
        facts.append(f"paired ({p.n} q, {label}): {p.acc_baseline:.3f} → {p.acc_candidate:.3f}, "
                     f"Δ {p.delta:+.4f}, McNemar p={p.mcnemar_p:.3g}, CI {fmt_ci(p)}, "
                     f"improved {len(p.improved)}, regressed {len(p.regressed)}, "
                     f"DCR@{r.dcr_tau} {fmt_num(r.dcr, '.3f')}")
    if r.multiple_testing:
        m = r.multiple_testing
        facts.append(f"{_e(m.method)} over {len(m.family)} compared candidates: p {m.p_raw:.3g} → {m.p_adjusted:.3g}")
    if (secondary := secondary_text(r)) is not None:
        facts.append(_e(secondary))
    if (answers := answers_text(r.summary)) is not None:
        facts.append(_e(answers))
    if r.confabulation:
        c = r.confabulation
        facts.append(f"confabulation Δ {c.delta:+.4f} (p={c.mcnemar_p:.3g}, {c.n} q)")
    return "<ul>" + "".join(f"<li>{f}</li>" for f in facts) + "</ul>" if facts else ""


def _serving_html(view: History) -> str:
    entries = [e for e in view.entries if e.type in SERVING_TYPES]
    if not entries:
        return "<p class='muted'>No promotion recorded yet (<code>memevolve promote</code>).</p>"
    rows = [[str(e.index), _e(e.type), _e(e.ts[:19]), _e(getattr(e.payload, "candidate_id", "")),
             f"<code>{_e(e.payload.strategy_hash[:12])}</code>",
             f"<code>{_e(e.payload.target)}</code>",
             _e(approval_text(e.payload.approval)) if isinstance(e.payload, PromotePayload) else ""]
            for e in entries]
    status = "".join(f"<li class='{'ok' if s.ok else 'fail'}'><code>{_e(s.target)}</code>: {_e(s.describe())}</li>"
                     for s in drift_report(view))
    return (_table(["entry", "type", "time (UTC)", "candidate", "strategy", "target", "approval"], rows)
            + f"<ul>{status}</ul>")


def _flags_html(flags: list[Flag]) -> str:
    if not flags:
        return "<p class='muted'>No FEATURE_FLAG decision recorded.</p>"
    rows = [[f'<a href="#cand-{_e(f.record.candidate_id)}">{_e(f.record.candidate_id)}</a>', str(f.record.round),
             f"<code>{_e(change_summary(f.record))}</code>", _e(f.record.reason), _e(figures(f.record)),
             _e(f.describe_status()),
             _e(f"{len(f.reverified)}× (last Δ {f.reverified[-1].payload.paired['delta']:+.4f}, would be "
                f"{f.reverified[-1].payload.would_decide['verdict']})") if f.reverified else "-"]
            for f in flags]
    return (_table(["id", "round", "change", "reason", "figures", "status", "re-verified"], rows, num={1})
            + "<p class='muted'>Never applied; re-verify one against the current strategy with "
              "<code>memevolve flags --verify ID</code>.</p>")


def _escalations_html(items: list[Escalation]) -> str:
    if not items:
        return "<p class='muted'>No candidate class was blocked.</p>"
    rows = [[f"<code>{_e(e.key)}</code>", str(e.round) if e.round is not None else "-",
             _e(",".join(map(str, e.rounds))), _e(", ".join(r.candidate_id for r in e.blocked) or "-"), _e(e.reason),
             _e(e.status)] for e in items]
    return _table(["direction", "escalated in", "blocked in rounds", "candidates", "reason", "status"], rows)


def _monitors_html(entries: list[JournalEntry]) -> str:
    if not entries:
        return "<p class='muted'>No slice accepted with monitoring regressed again.</p>"
    return f"<pre>{_e(monitors_table(entries))}</pre>"


def _antipatterns_html(items: list[AntiPattern]) -> str:
    """The anti-pattern catalog: each change that never stayed applied, rejected or reverted at least once, with
    example traces it lost."""
    if not items:
        return "<p>none: every change rejected or reverted also stayed applied once</p>"
    rows = [[f"<code>{_e(a.change)}</code>", str(a.tried), str(a.rejected), str(a.reverted), str(a.flagged),
             _e(", ".join(f"{rule} {n}" for rule, n in sorted(a.rules.items()))), fmt_num(a.mean_delta, "+.4f"),
             _e(", ".join(sorted(a.symptoms))), _e(", ".join(a.candidates))] for a in items]
    out = [_table(["change", "tried", "rejected", "reverted", "flagged", "stopped by", "mean Δ", "symptoms",
                   "candidates"], rows, num={1, 2, 3, 4, 6})]
    for a in items:
        if a.examples:
            out.append(f"<details><summary>examples of <code>{_e(a.change)}</code></summary><ul>" + "".join(
                f"<li>[{_e(x['question_id'])}] ({_e(x['candidate_id'])}) {_e(x['question'])} gold <q>{_e(x['gold'])}"
                f"</q>: before <q>{_e(x['baseline_answer'])}</q> ({_e(x['baseline_root_cause'] or 'correct')}), "
                f"after <q>{_e(x['candidate_answer'])}</q> ({_e(x['candidate_root_cause'] or 'correct')})</li>"
                for x in a.examples) + "</ul></details>")
    return "".join(out)


def render_html(view: History, reviewed: frozenset[str] = frozenset()) -> str:
    """The complete report page; ``reviewed``: the candidates whose review page lies beside it."""
    ov = Overview.of(view)
    records = view.records
    h = ov.harness
    harness = (f"{h.get('benchmark', '?')} · {h.get('n_questions', '?')} questions · judge {h.get('judge', '?')} · "
               f"benchmark {str(h.get('benchmark_hash', '?'))[:12]}"
               + (f" · schema {h['schema_hash'][:12]}" if h.get("schema_hash") else ""))  # a gate store has none
    body = [f"<h1>memevolve report</h1><p class='muted'>stores <code>{_e(view.root)}</code> · {_e(harness)}</p>",
            _cards(ov), "<h2>Trajectory and diagnosis</h2><div class='plots'>",
            f"<figure class='wide'>{trajectory_plot(view.rounds, records)}</figure>",
            f"<figure>{root_cause_plot(view.rounds)}</figure><figure>{_category_plot(ov)}</figure>",
            f"<figure>{cost_plot(records, ov.harness.get('objective', 'accuracy'))}</figure></div>",
            "<h2>Serving</h2>", _serving_html(view),
            "<h2 id='flags'>Feature flags</h2>", _flags_html(flag_registry(view)),
            "<h2 id='escalations'>Escalations</h2>", _escalations_html(escalations(view)),
            "<h2 id='monitors'>Monitored slices</h2>", _monitors_html(monitor_regressions(view)),
            "<h2 id='anti-patterns'>Anti-patterns</h2>", _antipatterns_html(catalog(view)),
            f"<h2 id='candidates'>Candidates ({len(records)})</h2>",
            _candidates_html(records) if records else "<p>none</p>",
            "<h2>Evidence per candidate</h2>", *(_candidate_section(r, view, reviewed) for r in records)]
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>memevolve report</title>"
            f"<style>{REPORT_CSS_PATH.read_text(encoding='utf-8')}</style></head><body><main>{''.join(body)}</main></body></html>\n")


# ---------------------------------------------------------------- Markdown


def _md(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _score_header(ov: Overview, safe: bool) -> list[str]:
    """The strategies table's header: the objective's score, then accuracy when the objective is another, then the
    safe rate (correct + abstain) when answers were made."""
    head, rule = f"| strategy | hash | {ov.label} (objective) |", "| --- | --- | ---: |"
    if SCORE_FIELD[ov.objective] != "accuracy":
        head, rule = head + " accuracy |", rule + " ---: |"
    return [head + " safe rate |", rule + " ---: |"] if safe else [head, rule]


def render_markdown(view: History, html_name: str | None = None) -> str:
    """A short summary suitable for a pull-request comment."""
    ov = Overview.of(view)
    records, h = view.records, ov.harness
    lines = [f"### memevolve: {ov.n_rounds} round(s) on {h.get('benchmark', '?')} "
             f"({h.get('n_questions', '?')} questions, judge {h.get('judge', '?')}, objective {ov.objective})", ""]
    rows = [("baseline", ov.baseline_hash, ov.baseline_score, ov.baseline),
            ("current", ov.current_hash, ov.current_score, ov.current)]
    if ov.best:
        rows.append((f"best ever (round {ov.best['round']})", ov.best["strategy_hash"], ov.best["score"],
                     ov.best_summary))
    also = SCORE_FIELD[ov.objective] != "accuracy"  # the accuracy column, when the objective is something else
    safe = any((summary or {}).get("answers") for *_, summary in rows)  # the safe rate, when answers were made
    lines += _score_header(ov, safe)
    lines += [f"| {name} | `{(digest or '-')[:12]}` | {fmt_num(score, '.3f')} |"
              + (f" {fmt_num((summary or {}).get('accuracy'), '.3f')} |" if also else "")
              + (f" {fmt_num(safe_rate((summary or {}).get('answers')), '.3f')} |" if safe else "")
              for name, digest, score, summary in rows]
    lines += ["", "Decisions: " + (", ".join(f"{n} {v}" for v, n in sorted(ov.decisions.items())) or "none")]
    accepted = [r for r in records if changes_strategy(r.verdict)]
    if accepted:
        lines += ["", "**Accepted**", ""]
        for r in accepted:
            p = r.paired
            flag = " --accept-monitor" if r.verdict == Verdict.ACCEPT_WITH_MONITOR else ""
            lines.append(f"- `{r.candidate_id}` {_md(change_summary(r))}: Δ {p.delta:+.4f} "
                         f"(p={p.mcnemar_p:.3g}, CI {fmt_ci(p)}; {category_deltas(p)})"
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
    flags, blocked = flag_registry(view), escalations(view)
    if flags:
        open_ = sum(f.status == "open" for f in flags)
        lines += ["", f"Feature flags: {len(flags)} ({open_} open; `memevolve flags`)"]
    escalated = [e for e in blocked if e.entry is not None]
    if escalated:
        lines += ["", "Escalations: " + ", ".join(f"`{e.key}` ({e.status})" for e in escalated)]
    fell = monitor_regressions(view)
    if fell:
        lines += ["", "**Monitored slices regressed**", ""] + [f"- {_md(regression_text(e))}" for e in fell]
    if html_name:
        lines += ["", f"Full report with plots and per-candidate evidence: `{html_name}`"]
    return "\n".join(lines) + "\n"


def write_report(view: History, out_html: str | Path, out_md: str | Path | None = None) -> None:
    """Write the HTML page (and the Markdown summary) atomically."""
    here = Path(out_html).parent
    reviewed = frozenset(r.candidate_id for r in view.records if (here / review_name(r.candidate_id)).is_file())
    atomic_write_text(out_html, render_html(view, reviewed))
    if out_md is not None:
        atomic_write_text(out_md, render_markdown(view, Path(out_html).name))
