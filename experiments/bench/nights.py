"""The shipped nights, run again and scored on labelled questions: the benchmark every change of a decision rule,
gate, critic, planner, probe or of the night itself is measured on (its note gives this table before and after).

Nights (each run from the shipped config, on a fresh stores directory, no tracking):

* ``dev4``: ``experiments/locomo_answer.yaml`` (labelled LoCoMo dev4), its final scored on all of dev4;
* ``generalise``: ``experiments/locomo_answer_generalise.yaml`` (labelled conv-26/30 with their probes), its final
  scored on conv-41/42, which the night never saw;
* ``label-free``: ``experiments/locomo_label_free.yaml`` (dev4's probes, no label), its final scored on dev4's
  labelled questions.

For each: the final's answer in evidence and mean packed words on the scoring questions (the runtime's answer check,
:mod:`evolve.observe.answer`, the questions it counts) beside the hand-set ``locomo_answer_turns.yaml`` on the same
questions, the rounds, fully compared candidates, accepts, flags (those by ``hypothesis_mismatch`` apart) and what
ended the night. ``--out`` writes the table as markdown and, beside it, JSON; ``--finals DIR`` copies each final
strategy file there. Run from the repository root:

    python experiments/bench/nights.py [--nights dev4 generalise label-free] [--out experiments/bench/nights.md]
        [--finals DIR]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from evolve import Engine, Harness, load_benchmark, load_config, load_strategy
from evolve.ops.history import History
from evolve.runtime import IngestionCache

ROOT = Path(__file__).resolve().parents[2]
DEV4 = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
HAND_SET = ROOT / "experiments" / "strategies" / "locomo_answer_turns.yaml"


@dataclass(frozen=True)
class Night:
    name: str
    config: str
    scored_on: str  # the benchmark spec the final is scored on


NIGHTS = {n.name: n for n in (
    Night("dev4", "experiments/locomo_answer.yaml", f"locomo:{DEV4}"),
    Night("generalise", "experiments/locomo_answer_generalise.yaml", f"locomo:{DEV4}#conv-41,conv-42"),
    Night("label-free", "experiments/locomo_label_free.yaml", f"locomo:{DEV4}"),
)}


@dataclass
class Row:
    night: str
    scored_on: str
    questions: int
    final: float
    final_words: float
    hand_set: float
    hand_set_words: float
    rounds: int
    evaluations: int
    accepts: int
    flags: int
    hypothesis_flags: int
    ended: str
    confirmation: str
    minutes: float
    final_hash: str


def _scored(spec: str, strategy_path: Path, cache: Path) -> tuple[int, float, float]:
    """Questions the answer check counts, answer in evidence and mean packed words of a strategy on ``spec``."""
    harness = Harness(load_benchmark(spec), cache=IngestionCache(cache), progress=False)
    run = harness.evaluate(load_strategy(strategy_path))
    outcomes = run.outcomes("answer")
    counted = [o["correct"] for o in outcomes.values()]
    return len(counted), sum(counted) / len(counted), run.summary.context_words["mean"]


def run_night(night: Night, work: Path) -> tuple[Row, Path]:
    config = load_config(ROOT / night.config)
    stores = work / night.name
    started = time.monotonic()
    summary = Engine(config.model_copy(update={"stores": stores}), track=False, progress=sys.stderr.isatty()).run()
    minutes = (time.monotonic() - started) / 60
    final = Path(summary["current"]["path"])
    records = History(stores).records
    record = summary.get("night") or {}
    confirmation = record.get("confirmation") or {}
    n, final_score, final_words = _scored(night.scored_on, final, work / "cache")
    _, hand, hand_words = _scored(night.scored_on, HAND_SET, work / "cache")
    return Row(
        night=night.name, scored_on=night.scored_on.replace(str(DEV4), "dev4"), questions=n, final=final_score,
        final_words=final_words, hand_set=hand, hand_set_words=hand_words, rounds=record.get("rounds", 0),
        evaluations=record.get("evaluations", 0),
        accepts=sum(r.applied for r in records), flags=sum(r.verdict == "FEATURE_FLAG" for r in records),
        hypothesis_flags=sum(r.decision is not None and r.decision.rule == "hypothesis_mismatch" for r in records),
        ended=record.get("ended", "-"), confirmation=str(confirmation.get("verdict", "-")), minutes=minutes,
        final_hash=summary["current"]["hash"]), final


def table(rows: list[Row], commit: str) -> str:
    lines = [f"Nights at commit `{commit}` (`python experiments/bench/nights.py`):", "",
             "| night | scored on | questions | final: answer in evidence | words | hand-set | words | rounds | "
             "compared | applied | flags (hypothesis) | ended | confirmation | minutes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.night} | {r.scored_on} | {r.questions} | **{r.final:.3f}** | {r.final_words:.1f} | "
              f"{r.hand_set:.3f} | {r.hand_set_words:.1f} | {r.rounds} | {r.evaluations} | {r.accepts} | "
              f"{r.flags} ({r.hypothesis_flags}) | {r.ended} | {r.confirmation} | {r.minutes:.1f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", nargs="+", choices=sorted(NIGHTS), default=list(NIGHTS))
    parser.add_argument("--out", type=Path, help="markdown table (and .json beside it)")
    parser.add_argument("--finals", type=Path, help="copy each night's final strategy here as <night>_final.yaml")
    args = parser.parse_args(argv)
    if not DEV4.is_file():
        raise SystemExit(f"{DEV4}: the LoCoMo dev file is not on this machine")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    rows = []
    with tempfile.TemporaryDirectory(prefix="nights-") as tmp:
        for name in args.nights:
            row, final = run_night(NIGHTS[name], Path(tmp))
            rows.append(row)
            print(json.dumps(asdict(row)), flush=True)
            if args.finals:
                args.finals.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(final, args.finals / f"{name.replace('-', '_')}_final.yaml")
    text = table(rows, commit)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps({"commit": commit, "nights": [asdict(r) for r in rows]},
                                                            indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
