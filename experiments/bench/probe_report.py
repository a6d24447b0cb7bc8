"""Probe questions against users' questions: count and mix of the probes per conversation, and each strategy's
answer in evidence on the probes next to its answer in evidence on the labelled questions, per LoCoMo category
(a probe counts in the category its kind stands for, :data:`evolve.benchmarks.probe_mix.KIND_CATEGORY`), for the
evolution half (conv-26/30) and the held-out half (conv-41/42) apart. Evaluations stop at the packed context.

``--out DIR`` also writes, per strategy, the packed contexts as ``{question_id, packed}`` JSONL for the shared
``context_metrics.py`` and ``miss_anatomy.py`` (labelled questions, and the probes under ids ``{conv}/q{i}`` of
``probes_locomo.json``, the probes written as a LoCoMo file with the original conversations). Run from the
repository root:

    python experiments/bench/probe_report.py [--strategy PATH ...] [--difficulty drop_trivial|keep]
        [--asked end|latest|drawn] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from evolve import Harness, load_strategy
from evolve.benchmarks import Benchmark, load_locomo
from evolve.benchmarks.locomo import CODE_BY_CATEGORY, read_json_list
from evolve.benchmarks.probe_mix import ProbeSettings, locomo_category
from evolve.benchmarks.probes import probe_questions
from evolve.files import atomic_write_json, atomic_write_text
from evolve.runtime import IngestionCache
from evolve.runtime.reference import ReferenceLifecycle

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
HALVES = {"evolution half (conv-26/30)": ("conv-26", "conv-30"), "held-out half (conv-41/42)": ("conv-41", "conv-42")}
CATEGORIES = ("single_hop", "temporal", "multi_hop", "open_domain")


def write_probe_file(bench: Benchmark, path: Path) -> dict[str, str]:
    """The probes as a LoCoMo file (the original conversations, the probes as ``qa`` with the category codes of
    :func:`~evolve.benchmarks.probe_mix.locomo_category`); returns probe id -> the file's question id."""
    samples = read_json_list(DATA, "samples")
    ids, by_conv = {}, defaultdict(list)
    for q in bench.questions:
        if q.category.startswith("probe_"):
            ids[q.id] = f"{q.conversation_id}/q{len(by_conv[q.conversation_id])}"
            by_conv[q.conversation_id].append({"question": q.question, "answer": q.answer,
                                               "evidence": list(q.evidence),
                                               "category": CODE_BY_CATEGORY[locomo_category(q.category)]})
    atomic_write_json(path, [{**s, "qa": by_conv[s["sample_id"]]} for s in samples])
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategy", nargs="*", default=["strategies/baseline.yaml"])
    parser.add_argument("--difficulty", choices=("drop_trivial", "keep"), default=ProbeSettings().difficulty)
    parser.add_argument("--asked", choices=("end", "latest", "drawn"), default="latest",
                        help="when probes are asked: end: after the last session, as before the reference timeline; "
                             "latest/drawn: at a session where the answer holds (probes: asked)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "memevolve-validity")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    labelled = load_locomo(DATA)
    settings = ProbeSettings(difficulty=args.difficulty, asked="latest" if args.asked == "end" else args.asked)
    probes = probe_questions(labelled, settings, timeline=None if args.asked == "end" else ReferenceLifecycle())
    bench = Benchmark("dev4+probes", labelled.conversations, labelled.questions + probes)
    lines = [f"# Probes against labelled questions (difficulty: {args.difficulty}, asked: {args.asked})", "",
             "| conversation | turns | probes | turns per probe | " + " | ".join(CATEGORIES) + " | kinds |",
             "|---|---|---|---|" + "---|" * len(CATEGORIES) + "---|"]
    for cid, conv in labelled.conversations.items():
        mine = [q for q in probes if q.conversation_id == cid]
        mix = Counter(locomo_category(q.category) for q in mine)
        kinds = ", ".join(f"{k.removeprefix('probe_')} {n}" for k, n in Counter(q.category for q in mine).most_common())
        lines.append(f"| {cid} | {len(conv.turns())} | {len(mine)} | {len(conv.turns()) / max(1, len(mine)):.2f} | "
                     + " | ".join(f"{mix[c] / max(1, len(mine)):.0%}" for c in CATEGORIES) + f" | {kinds} |")
    harness = Harness(bench, cache=IngestionCache(args.cache / "ingestion"), progress=False)
    ids = write_probe_file(bench, args.out / "probes_locomo.json") if args.out else {}
    figures: dict = {}
    for path in args.strategy:
        run = harness.evaluate(load_strategy(ROOT / path), answer=False)
        name = Path(path).stem
        cells: dict = defaultdict(lambda: [0, 0])
        for t in run.traces:
            if t.answer_in_evidence is None or not t.scored:
                continue
            kind = "probes" if t.category.startswith("probe_") else "labelled"
            for half, convs in HALVES.items():
                if t.question_id.split("/")[0] in convs:
                    for cat in (locomo_category(t.category), "all"):
                        cell = cells[(half, kind, cat)]
                        cell[0] += int(t.answer_in_evidence)
                        cell[1] += 1
        figures[name] = {" / ".join(k): v for k, v in cells.items()}
        for half in HALVES:
            lines += ["", f"## {name}, {half}: answer in evidence", "",
                      "| category | labelled | probes | probes − labelled |", "|---|---|---|---|"]
            for cat in (*CATEGORIES, "all"):
                (hl, nl), (hp, np_) = cells[(half, "labelled", cat)], cells[(half, "probes", cat)]
                if nl or np_:
                    gap = f"{(hp / np_ - hl / nl) * 100:+.1f} pp" if nl and np_ else "-"
                    lines.append(f"| {cat} | {hl / max(1, nl):.3f} ({nl}) | {hp / max(1, np_):.3f} ({np_}) | {gap} |")
        if args.out:
            for kind in ("labelled", "probes"):
                rows = [{"question_id": ids.get(t.question_id, t.question_id),
                         "packed": [{"source_ids": p.get("source_ids", []), "text": p.get("text", "")}
                                    for p in t.packed]}
                        for t in run.traces if t.category.startswith("probe_") == (kind == "probes")]
                atomic_write_text(args.out / f"{name}_{kind}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        atomic_write_text(args.out / "probe_report.md", report)
        atomic_write_json(args.out / "probe_report.json", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
