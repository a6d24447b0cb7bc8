"""The run report: self-contained HTML with plots and the candidate table, a Markdown summary, and a
headless-browser render check."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.cli import main
from evolve.ops.plots import pareto_front, trajectory_plot
from evolve.ops.history import History

RENDER_SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "render_report.py"


def _render_module():
    spec = importlib.util.spec_from_file_location("render_report", RENDER_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report(engine_stores, tmp_path_factory) -> tuple[Path, str, str]:
    out = tmp_path_factory.mktemp("report")
    html, md = out / "report.html", out / "report.md"
    assert main(["report", "--stores", str(engine_stores), "--out", str(html), "--markdown", str(md)]) == 0
    return html, html.read_text(encoding="utf-8"), md.read_text(encoding="utf-8")


def _svgs(text: str) -> list[str]:
    return re.findall(r"<svg.*?</svg>", text, re.S)


def test_html_is_self_contained_and_has_four_plots(report):
    _, text, _ = report
    assert _render_module().check_html(text) == []
    assert not re.search(r'(?:src|href)="https?:', text) and "<script" not in text and "<link" not in text
    trajectory, causes, categories, cost = _svgs(text)
    for label in ("current strategy", "best ever", "accepted", "accepted (monitor)", "feature flag", "round 3"):
        assert f"<!-- {label} -->" in trajectory, label
    for cause in ("ingestion gap", "generation error", "R1", "R3"):
        assert f"<!-- {cause} -->" in causes, cause
    # the current strategy (r002-c00) is recorded 0.05 above the baseline in every category
    assert categories.count("<!-- +0.050 -->") == 4 and "<!-- Accuracy by category vs baseline -->" in categories
    for label in ("Pareto frontier", "accepted path", "context words per question (mean)"):
        assert f"<!-- {label} -->" in cost, label


def test_pareto_front_keeps_only_undominated_points():
    points = [(100, 0.50), (120, 0.48), (140, 0.55), (140, 0.53), (90, 0.40), (200, 0.55), (210, 0.60)]
    assert pareto_front(points) == [(90, 0.40), (100, 0.50), (140, 0.55), (210, 0.60)]


def test_candidate_table_links_every_candidate_to_its_evidence(report, engine_stores):
    _, text, _ = report
    records = History(engine_stores).records
    table = text[text.index("<h2 id='candidates'>"):text.index("Evidence per candidate")]
    assert table.count("<tr>") == len(records) + 1
    for r in records:
        cid = r.candidate_id
        assert f'href="#cand-{cid}"' in table and f'id="cand-{cid}"' in text
    section = text[text.index('id="cand-r002-c00"'):text.index('id="cand-r003-c00"')]
    example = next(r for r in records if r.candidate_id == "r002-c00").examples["improved"][0]
    for expected in ("~ retrieval.top_k: 5 -&gt; 7", "McNemar p=0.012", "schema",
                     example["question"].replace("'", "&#x27;"), "retrieval_gap → correct",
                     "memevolve promote r002-c00 --to strategies/serving.yaml"):
        assert expected in section, expected


def test_markdown_summary_for_a_pull_request(report):
    _, _, md = report
    assert md.startswith("### memevolve: 3 round(s) on synthetic:0 (120 questions, judge token-f1@0.5, "
                         "objective accuracy)")
    assert "| strategy | hash | accuracy (objective) | safe rate |\n" in md  # no second accuracy column
    for name in ("baseline", "current"):
        cells = next(line for line in md.splitlines() if line.startswith(f"| {name} |")).split("|")
        assert len(cells) == 6 and cells[3].strip() != "-" and 0 <= float(cells[4]) <= 1, cells
    assert "**Accepted**" in md and "`r002-c00` retrieval.top_k 5→7: Δ +0.0500" in md and "— applied" in md
    assert "`memevolve promote r003-c00 --to strategies/serving.yaml --accept-monitor`" in md
    assert "| id | change | Δ | p | CI | verdict |" in md and "Full report with plots" in md


def test_trajectory_marks_restored_rounds():
    rounds = [{"round": 1, "observed_score": 0.5, "score": 0.4, "best_score": 0.5, "restored": False},
              {"round": 2, "observed_score": 0.4, "score": 0.5, "best_score": 0.5, "restored": True}]
    svg = trajectory_plot(rounds, [])
    assert "<!-- restored best-ever -->" in svg and "<!-- accepted -->" not in svg
    assert "<!-- restored best-ever -->" not in trajectory_plot([{**r, "restored": False} for r in rounds], [])


def test_report_renders_in_headless_chromium(report, tmp_path):
    if _render_module().find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium); the render check needs a headless browser")
    html, _, _ = report
    png = tmp_path / "report.png"
    proc = subprocess.run([sys.executable, str(RENDER_SCRIPT), str(html), "--png", str(png)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert png.stat().st_size > 20_000
