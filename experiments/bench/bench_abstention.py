"""Precision and recall of the abstention classifier (:func:`evolve.observe.abstention.abstains`) on the labelled
phrasings in ``tests/fixtures/abstention_labelled.jsonl`` (one JSON object a line: ``text``, ``label`` abstain or
answer, ``kind``, ``split`` dev or heldout).

The ``dev`` phrasings were written alongside the rules and the rules were corrected against them; the ``heldout``
phrasings were written before the rules and not looked at while writing them. Both splits come from the same author,
so the held-out figure measures rules against unseen wording, not against another writer's style.

    python experiments/bench/bench_abstention.py [--file PATH] [--errors]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evolve.observe.abstention import abstains  # noqa: E402

DEFAULT = ROOT / "tests" / "fixtures" / "abstention_labelled.jsonl"
LABELS = ("abstain", "answer")


def load(path: Path) -> list[dict]:
    """The labelled rows; a malformed line is an error naming the file and line."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or row.get("label") not in LABELS or not isinstance(row.get("text"), str):
            raise SystemExit(f"{path}:{number}: expected text and a label in {LABELS}")
        rows.append(row)
    return rows


def scores(rows: list[dict]) -> dict[str, float | int]:
    """Precision and recall of "abstain" over ``rows``, with the confusion counts."""
    c = Counter((row["label"] == "abstain", abstains(row["text"])) for row in rows)
    tp, fp, fn, tn = c[True, True], c[False, True], c[True, False], c[False, False]
    return {"n": len(rows), "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / (tp + fn) if tp + fn else 1.0}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEFAULT)
    parser.add_argument("--errors", action="store_true", help="print each misclassified phrasing")
    args = parser.parse_args(argv)
    rows = load(args.file)
    print(f"{'split':<8} {'n':>4} {'abstain':>8} {'precision':>10} {'recall':>7}  tp fp fn tn")
    for split in ("dev", "heldout", "all"):
        part = [r for r in rows if split == "all" or r.get("split") == split]
        s = scores(part)
        print(f"{split:<8} {s['n']:>4} {s['tp'] + s['fn']:>8} {s['precision']:>10.3f} {s['recall']:>7.3f}  "
              f"{s['tp']} {s['fp']} {s['fn']} {s['tn']}")
    kinds = Counter(r.get("kind", "?") for r in rows)
    print("kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    if args.errors:
        for r in rows:
            if (r["label"] == "abstain") != abstains(r["text"]):
                print(f"  {r.get('split')}: {r['label']} ({r.get('kind')}) classified otherwise: {r['text']!r}")


if __name__ == "__main__":
    main()
