"""``memevolve gate`` on two trace files of our own runtime reproduces the decision the loop recorded, for every fully
compared candidate of a run: verdict, rule, p and CI.

For each such candidate of the stores, the parent strategy (what was current) and the candidate strategy are
evaluated again on the run's questions (``memevolve eval``'s harness; deterministic roles reproduce the traces), the
two ``traces.jsonl`` files are written, and ``memevolve gate --adapter memevolve`` decides on them, given the other
members of the candidate's round families (``--family-p``) and its hypothesis (``--predict``); the verdict it
journals in the gate store ``OUT/gate`` is compared with the loop's record. A candidate with a
holdout comparison is listed, not reproduced: the gate sees no held-out questions.

Usage: python experiments/bench/gate_reproduces.py [--config experiments/locomo_answer.yaml] [--rounds N]
[--out DIR]. Without stores from an earlier ``memevolve run`` of the config, it runs N rounds first (default 1).
Exit 1 when some decision is not reproduced.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def reproduce(config_path: Path, out: Path, rounds: int = 1) -> list[dict]:
    """One row per fully compared candidate: recorded and gated verdict, rule, p, CI and DCR, and whether they
    agree."""
    from evolve.loop.config import load_config
    from evolve.loop.engine import Engine
    from evolve.loop.setup import RunSetup
    from evolve.cli.main import main as memevolve
    from evolve.ops.gate import replay_args
    from evolve.ops.history import History
    from evolve.state.view import StoreView

    config = load_config(config_path)
    if not (config.stores / "candidate_outcomes.jsonl").is_file():
        Engine(config, track=False, progress=False).run(rounds)
    setup = RunSetup.prepare(config)
    harness = setup.harness()[0]
    view, strategies = History(config.stores), StoreView(config.stores)
    records = {r.candidate_id: r for r in view.records}
    rows, written = [], {}
    for r in records.values():
        if r.paired is None or r.decided_by != "decision":
            continue
        if r.holdout is not None:
            rows.append({"candidate": r.candidate_id, "same": None, "note": "holdout comparison: not reproduced"})
            continue
        files = []
        for digest in (r.parent_hash, r.strategy_hash):
            if digest not in written:  # a round's candidates share their parent: evaluated once
                run = harness.evaluate(strategies.get_strategy(digest), setup.question_ids, desc=digest[:12])
                written[digest] = run.write(out / "traces" / digest[:16]) / "traces.jsonl"
            files.append(written[digest])
        argv = ["gate", *map(str, files), "--rules", str(config_path), "--stores", str(out / "gate"),
                *replay_args(r, records)]
        if memevolve(argv) != 0:
            raise SystemExit(f"memevolve {' '.join(argv)} failed")
        gated = History(out / "gate").records[-1]
        p, q = r.paired, gated.paired
        recorded = (str(r.verdict), str(r.decision.rule), p.mcnemar_p, p.ci_low, p.ci_high, r.dcr)
        again = (str(gated.verdict), str(gated.decision.rule), q.mcnemar_p, q.ci_low, q.ci_high, gated.dcr)
        rows.append({"candidate": r.candidate_id, "gate": gated.candidate_id, "same": recorded == again,
                     "recorded": recorded, "gated": again, "argv": argv})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "experiments" / "locomo_answer.yaml")
    parser.add_argument("--rounds", type=int, default=1, help="rounds to run when the stores hold none")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "gate_reproduces")
    args = parser.parse_args()
    rows = reproduce(args.config, args.out, args.rounds)
    for row in rows:
        print(row)
    checked = [row for row in rows if row["same"] is not None]
    same = sum(row["same"] for row in checked)
    print(f"{same}/{len(checked)} recorded decisions reproduced by memevolve gate (verdict, rule, p, CI, DCR); "
          f"{len(rows) - len(checked)} not reproducible (holdout)")
    return 0 if checked and same == len(checked) else 1


if __name__ == "__main__":
    sys.exit(main())
