"""The review page of one recorded comparison: a static, self-contained HTML page (inline style and script, no
external asset) with every discordant question, both strategies' stages side by side, the root cause on each
side and an editable root-cause label per question, filtered and exported by plain JavaScript in the page.

Each side shows what the stages recorded: the packed items (id, source turn ids, words; gold turns and the gold
answer's content words marked), the retrieved items (rank, score, source ids), the filter's and the budget's
decisions, the stored items from the gold turns, the answer; a stage the trace does not record is said to be. The
page opens filtered when its address ends with ``#category=C&cause=R&direction=D`` (any of them).
"""
from __future__ import annotations

import html
import json
import re
from collections import Counter

from evolve.data import REPORT_CSS_PATH
from evolve.observe.labels import COLUMNS, Label
from evolve.observe.ladder import ROOT_CAUSES, Stage, derives_from
from evolve.observe.objective import LABEL
from evolve.observe.trace import Trace
from evolve.ops.audit import Discordance
from evolve.ops.review import objective_of
from evolve.ops.promotable import Promotability
from evolve.ops.review_traces import Side
from evolve.state.record import CandidateRecord
from evolve.words import content_words

_WORD = re.compile(r"([A-Za-z0-9]+(?:[',.:/-][A-Za-z0-9]+)*)")

CSS = """
.filters{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #d0d7de;z-index:1}
.filters label{margin-right:14px} .filters select,.filters input{font:inherit}
section.disc{border:1px solid #d0d7de;border-radius:8px;margin:14px 0;padding:8px 12px}
section.disc[hidden]{display:none}
.disc h3{margin:2px 0 4px;font-size:14px} .side h4{margin:4px 0;font-size:13px}
.side{border-left:3px solid #d0d7de;padding-left:8px} .side.wrong{border-color:#cf222e} .side.right{border-color:#1a7f37}
tr.gold td{background:#fff8c5 !important} mark{background:#ffd33d;padding:0 1px}
.cause{font-weight:600} .notrec{color:#9a6700;font-style:italic}
.labelbox{background:#f6f8fa;border-radius:6px;padding:6px 8px;margin-top:6px}
details summary{cursor:pointer;color:#0969da} td.text{max-width:420px}
"""

SCRIPT = """
(function(){
var rows=[].slice.call(document.querySelectorAll('section.disc'));
var f={category:document.getElementById('f-category'),cause:document.getElementById('f-cause'),
       direction:document.getElementById('f-direction')};
function apply(){
  var shown=0;
  rows.forEach(function(r){
    var ok=(!f.category.value||r.dataset.category===f.category.value)&&
           (!f.direction.value||r.dataset.direction===f.direction.value)&&
           (!f.cause.value||r.dataset.causeParent===f.cause.value||r.dataset.causeCandidate===f.cause.value||
            r.querySelector('select.label').value===f.cause.value);
    if(ok){r.removeAttribute('hidden');shown++;}else{r.setAttribute('hidden','');}
  });
  var c=document.getElementById('shown');c.textContent=shown+' of '+rows.length+' discordances shown';
  c.dataset.shown=shown;
  var h=[];for(var k in f){if(f[k].value){h.push(k+'='+encodeURIComponent(f[k].value));}}
  document.body.dataset.filter=h.join('&');
}
function fromHash(){
  location.hash.replace(/^#/,'').split('&').forEach(function(p){
    var kv=p.split('=');if(f[kv[0]]){f[kv[0]].value=decodeURIComponent(kv[1]||'');}
  });
}
for(var k in f){f[k].addEventListener('change',function(){apply();
  history.replaceState(null,'','#'+document.body.dataset.filter);});}
rows.forEach(function(r){r.querySelector('select.label').addEventListener('change',apply);});
window.addEventListener('hashchange',function(){fromHash();apply();});
var COLUMNS=JSON.parse(document.getElementById('columns').textContent);
function labels(){
  var who=document.getElementById('reviewer').value;
  return rows.map(function(r){
    var d=JSON.parse(r.querySelector('script.label-data').textContent);
    d.label=r.querySelector('select.label').value;
    d.confirmed=r.querySelector('input.confirmed').checked;
    d.reviewer=who;d.note=r.querySelector('input.note').value;return d;});
}
function csvCell(v){v=String(v);return /[",\\n]/.test(v)?'"'+v.replace(/"/g,'""')+'"':v;}
function save(name,text){
  var a=document.createElement('a');a.href=URL.createObjectURL(new Blob([text],{type:'text/plain'}));
  a.download=name;document.body.appendChild(a);a.click();a.remove();
}
var base=document.body.dataset.candidate+'-labels';
document.getElementById('export-csv').addEventListener('click',function(){
  save(base+'.csv',COLUMNS.join(',')+'\\n'+labels().map(function(d){
    return COLUMNS.map(function(c){return csvCell(d[c]);}).join(',');}).join('\\n')+'\\n');});
document.getElementById('export-jsonl').addEventListener('click',function(){
  save(base+'.jsonl',labels().map(function(d){var o={};COLUMNS.forEach(function(c){o[c]=d[c];});
    return JSON.stringify(o);}).join('\\n')+'\\n');});
fromHash();apply();
})();
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def marked(text: str, answer_words: frozenset[str]) -> str:
    """``text`` escaped, with each word that is one of the gold answer's content words in ``<mark>``."""
    parts = _WORD.split(text)
    return "".join(f"<mark>{_e(p)}</mark>" if i % 2 and content_words(p) & answer_words else _e(p)
                   for i, p in enumerate(parts))


def _sources(ids: list[str], gold: set[str]) -> str:
    return ", ".join(f"<b>{_e(s)}</b>" if s in gold else _e(s) for s in ids) or "-"


def _not_recorded(stage: str) -> str:
    return f"<p class='notrec'>{_e(stage)}: not recorded in this trace</p>"


def _packed(t: Trace, gold: set[str], words: frozenset[str]) -> str:
    if Stage.ASSEMBLY not in t.stages:
        return _not_recorded("packed context")
    rows = "".join(
        f"<tr class='{'gold' if derives_from(p, gold) else ''}'><td class='num'>{i}</td><td><code>{_e(p.get('id', ''))}"
        f"</code></td><td>{_sources(list(p.get('source_ids') or []), gold)}</td>"
        f"<td class='num'>{len(str(p.get('text', '')).split())}</td>"
        f"<td class='text'>{marked(str(p.get('text', '')), words)}</td></tr>" for i, p in enumerate(t.packed, 1))
    return (f"<h4>packed context ({len(t.packed)} items, {sum(len(str(p.get('text', '')).split()) for p in t.packed)} "
            "words)</h4><table class='packed'><thead><tr><th>#</th><th>id</th><th>sources</th><th>words</th>"
            f"<th>text</th></tr></thead><tbody>{rows}</tbody></table>" if t.packed else
            "<h4>packed context</h4><p class='muted'>nothing packed</p>")


def _retrieved(t: Trace, gold: set[str]) -> str:
    if Stage.RETRIEVAL not in t.stages:
        return _not_recorded("retrieval")
    rows = "".join(
        f"<tr class='{'gold' if derives_from(h, gold) else ''}'><td class='num'>{_e(h.get('rank', '-'))}</td>"
        f"<td class='num'>{_score(h.get('score'))}</td><td><code>{_e(h.get('id', ''))}</code></td>"
        f"<td>{_sources(list(h.get('source_ids') or []), gold)}</td></tr>" for h in t.retrieved)
    hits = [h.get("rank") for h in t.retrieved if derives_from(h, gold)]
    return (f"<details><summary>retrieved: {len(t.retrieved)} items, best gold rank "
            f"{min(hits) if hits else 'none'}</summary><table class='retrieved'><thead><tr><th>rank</th><th>score</th>"
            f"<th>id</th><th>sources</th></tr></thead><tbody>{rows}</tbody></table></details>")


def _score(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "-"


def _filtering(t: Trace) -> str:
    if Stage.FILTERING not in t.stages:
        return _not_recorded("filter decisions")
    decided = [("hidden", f) for f in t.filtered] + [("dropped", d) for d in t.dropped]
    if not decided:
        return "<p class='muted filtering'>filter decisions: nothing hidden or dropped</p>"
    return ("<p class='filtering'>filter decisions: " + "; ".join(
        f"<code>{_e(item.get('id', ''))}</code> {_e(what)}" + (f" ({_e(item['reason'])})" if item.get("reason") else "")
        for what, item in decided) + "</p>")


def _stored(t: Trace) -> str:
    if Stage.INGESTION not in t.stages:
        return _not_recorded("stored items from the gold turns")
    return (f"<p>stored from the gold turns: {', '.join(f'<code>{_e(s)}</code>' for s in t.stored_ids) or 'nothing'}"
            "</p>")


def _side(name: str, t: Trace, cause: str | None, ok: bool, words: frozenset[str]) -> str:
    gold = set(t.gold_evidence)
    answer = (f"<p>answer: {_e(t.answer)!s}</p>" if Stage.GENERATION in t.stages else
              "<p class='notrec'>answer: not recorded in this trace</p>")
    loss = f" <span class='muted'>(answer lost: {_e(t.answer_loss)})</span>" if t.answer_loss and not ok else ""
    return (f"<div class='side {'right' if ok else 'wrong'} {name}'><h4>{name}: "
            f"<span class='cause'>{'succeeds' if ok else _e(cause)}</span>{loss}</h4>"
            f"{_stored(t)}{_retrieved(t, gold)}{_filtering(t)}{_packed(t, gold, words)}{answer}</div>")


def _label_box(label: Label) -> str:
    options = "".join(f"<option value='{c}'{' selected' if c == label.label else ''}>{c}</option>"
                      for c in ROOT_CAUSES)
    data = json.dumps(label.model_dump(mode="json")).replace("</", "<\\/")
    return (f"<div class='labelbox'><script type='application/json' class='label-data'>{data}</script>"
            f"<label>root cause of the {label.failing}'s failure: <select class='label'>{options}</select></label> "
            f"<span class='muted'>(ladder: {_e(label.ladder)})</span> "
            f"<label><input type='checkbox' class='confirmed'{' checked' if label.confirmed else ''}> confirmed"
            f"</label> <label>note <input class='note' size='40' value='{_e(label.note)}'></label></div>")


def _discordance(d: Discordance, label: Label) -> str:
    t = d.candidate
    words = content_words(t.gold_answer)
    parent_ok = d.direction == "regressed"
    return (f"<section class='disc' id='q-{_e(d.question_id)}' data-qid='{_e(d.question_id)}' "
            f"data-category='{_e(d.category)}' data-direction='{d.direction}' "
            f"data-cause-parent='{_e(d.parent_cause or '')}' data-cause-candidate='{_e(d.candidate_cause or '')}'>"
            f"<h3>{_e(d.question_id)} · {_e(d.category)} · {d.direction} "
            f"<span class='muted'>({'parent wrong, candidate right' if not parent_ok else 'parent right, candidate wrong'})"
            f"</span></h3><p><b>{_e(t.question)}</b><br>gold answer: <mark>{_e(t.gold_answer)}</mark> · gold turns: "
            f"{', '.join(f'<b>{_e(g)}</b>' for g in t.gold_evidence) or 'unknown'}</p>"
            f"<div class='cols'>{_side('parent', d.parent, d.parent_cause, parent_ok, words)}"
            f"{_side('candidate', t, d.candidate_cause, not parent_ok, words)}</div>{_label_box(label)}</section>")


def _promotable(sound: Promotability | None) -> str:
    if sound is None:
        return ""
    return (f"<br><span id='promotable' data-ok='{str(sound.ok).lower()}'>promotable: {'yes' if sound.ok else 'no'}: "
            f"{_e(sound.why)}</span>")


def _hypothesis(record: CandidateRecord) -> str:
    """The failure-category hypothesis the comparison tested, whose it was, and whether it held."""
    check = record.hypothesis
    if check is None:
        return ""
    whose = "engineer's" if check.binding else "planner's"
    held = "held" if check.matches else ("mismatch, flags the change under hypothesis_check: flag" if check.binding
                                         else "mismatch, refutes the mechanism in the planner (does not flag)")
    return (f"<br><span id='hypothesis' data-author='{_e(check.author)}' data-matches='{str(check.matches).lower()}'>"
            f"{whose} hypothesis: {_e(check.describe())}: {held}</span>")


def _select(name: str, values: list[str]) -> str:
    options = "".join(f"<option value='{_e(v)}'>{_e(v)}</option>" for v in values)
    return f"<label>{name} <select id='f-{name}'><option value=''>all</option>{options}</select></label>"


def render_review(record: CandidateRecord, items: list[Discordance], labels: list[Label],
                  sides: tuple[Side, Side], promotable: Promotability | None = None) -> str:
    """The review page of ``record``'s discordances ``items`` with their ``labels`` (same order); ``promotable``:
    whether its strategy may reach users (:mod:`evolve.ops.promotable`)."""
    p, objective = record.paired, objective_of(record)
    causes = Counter(str(d.ladder) for d in items)
    confirmed = sum(label.confirmed for label in labels)
    head = (f"<h1>Review of {_e(record.candidate_id)}</h1><p class='muted'>{_e(record.verdict)} · "
            f"{_e(record.reason)}<br>objective {_e(LABEL[objective])} · {p.n} paired questions · "
            f"{len(p.improved)} improved, {len(p.regressed)} regressed · direction "
            f"<code>{_e(record.direction.get('key', ''))}</code><br>parent traces <code>{_e(sides[0].source)}</code>"
            f"<br>candidate traces <code>{_e(sides[1].source)}</code>{_hypothesis(record)}{_promotable(promotable)}</p>"
            f"<p id='counts'>{len(items)} discordances; labelled (confirmed) {confirmed}; failing side's root cause: "
            + ", ".join(f"{_e(c)} {n}" for c, n in sorted(causes.items())) + "</p>")
    filters = ("<div class='filters'>" + _select("category", sorted({d.category for d in items}))
               + _select("cause", [str(c) for c in ROOT_CAUSES])
               + _select("direction", ["improved", "regressed"])
               + "<label>reviewer <input id='reviewer' size='14'></label>"
               "<button id='export-csv' type='button'>export labels (CSV)</button> "
               "<button id='export-jsonl' type='button'>export labels (JSONL)</button> "
               "<span id='shown' class='muted'></span></div>")
    body = "".join(_discordance(d, label) for d, label in zip(items, labels)) or "<p>No discordant question.</p>"
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>review {_e(record.candidate_id)}</title><style>{REPORT_CSS_PATH.read_text(encoding='utf-8')}"
            f"{CSS}</style></head><body data-candidate='{_e(record.candidate_id)}'><main>{head}{filters}{body}</main>"
            f"<script type='application/json' id='columns'>{json.dumps(list(COLUMNS))}</script>"
            f"<script>{SCRIPT}</script></body></html>\n")
