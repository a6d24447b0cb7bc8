"""Image-citing questions of a LoCoMo file, measured with the shared context_metrics.py on subsets of traces.

Subsets (non-adversarial questions with known evidence, as context_metrics.py counts them):
  image         a gold evidence turn shares a photo (``blip_caption``)
  caption_only  of those, an answer content word is in a gold turn's caption and not in that turn's text
  multi_hop     LoCoMo category 1
For each subset, writes every run's traces restricted to it under OUT/<subset>/ and runs
``context_metrics.py LOCOMO NAME=FILE ... --paired BASE`` on them, printing its table.

Usage: python experiments/bench/images_ikb.py LOCOMO.json OUT BASE=traces.jsonl NAME=traces.jsonl ...
       [--metrics PATH/context_metrics.py]
"""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

METRICS = Path(__file__).resolve().parents[3] / "shared" / "tools" / "context_metrics.py"
_SESSION = re.compile(r"session_\d+")


def _tool(path: Path):
    """The shared context_metrics module (its question set and tokenization are the ones every figure uses)."""
    spec = importlib.util.spec_from_file_location("context_metrics", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def subsets(locomo: Path, metrics: Path = METRICS) -> dict[str, list[str]]:
    """Question ids of each subset, among the questions context_metrics.py counts."""
    tool = _tool(metrics)
    raw = {s["sample_id"]: {t["dia_id"]: t for key, turns in s["conversation"].items() if _SESSION.fullmatch(key)
                            for t in turns} for s in json.loads(locomo.read_text())}
    out: dict[str, list[str]] = {"image": [], "caption_only": [], "multi_hop": []}
    for qid, (evidence, answer, category, _) in tool.load_gold(str(locomo)).items():
        turns = raw[qid.split("/")[0]]
        if category == 1:
            out["multi_hop"].append(qid)
        shown = [turns[e] for e in evidence if turns[e].get("blip_caption")]
        if not shown:
            continue
        out["image"].append(qid)
        words = tool.content(answer)
        if any(w in tool.content(t["blip_caption"]) and w not in tool.content(t["text"]) for t in shown for w in words):
            out["caption_only"].append(qid)
    return out


def main(argv: list[str]) -> None:
    metrics = METRICS
    if "--metrics" in argv:
        at = argv.index("--metrics")
        metrics = Path(argv[at + 1])
        del argv[at:at + 2]
    locomo, out, runs = Path(argv[0]), Path(argv[1]), [a.split("=", 1) for a in argv[2:]]
    for subset, ids in subsets(locomo, metrics).items():
        wanted = set(ids)
        folder = out / subset
        folder.mkdir(parents=True, exist_ok=True)
        specs = []
        for name, path in runs:
            lines = [line for line in Path(path).read_text().splitlines() if json.loads(line)["question_id"] in wanted]
            (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
            specs.append(f"{name}={folder / f'{name}.jsonl'}")
        print(f"## {subset} ({len(ids)} questions)")
        shown = subprocess.run([sys.executable, str(metrics), str(locomo), *specs, "--paired", runs[0][0]],
                               capture_output=True, text=True, check=True)
        print(shown.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
