"""Does an evolved strategy generalise inside the dev data? Evolve on some LoCoMo conversations, compare the final
strategy with the baseline on the others (paired by question id), under the run config's objective.

The LoCoMo file is split by sample: the first half of the samples (``--train N`` to choose) is the evolution
benchmark, the rest the held-out one. Evolution uses the run config (rounds, candidates, acceptance, cost) with
its benchmark and stores replaced; nothing is written outside a temporary directory. Run from the repository root:

    python experiments/bench/generalise.py [--config experiments/locomo_evidence.yaml] [--train 2]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from evolve import Engine, Harness, load_benchmark, load_config, load_strategy, paired_comparison
from evolve.runtime import IngestionCache

ROOT = Path(__file__).resolve().parents[2]


def split(path: Path, train: int, out: Path) -> tuple[Path, Path, list[str], list[str]]:
    samples = json.loads(path.read_text(encoding="utf-8"))
    if not 0 < train < len(samples):
        raise SystemExit(f"--train {train}: the file has {len(samples)} samples; keep at least one on each side")
    parts = samples[:train], samples[train:]
    files = out / "train.json", out / "held_out.json"
    for part, file in zip(parts, files):
        file.write_text(json.dumps(part), encoding="utf-8")
    return *files, *([s["sample_id"] for s in part] for part in parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "experiments" / "locomo_evidence.yaml"))
    parser.add_argument("--train", type=int, default=2, help="samples evolved on (the rest are held out)")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    scheme, _, source = config.benchmark.partition(":")
    if scheme != "locomo":
        raise SystemExit(f"{args.config}: benchmark must be a locomo file, got {config.benchmark!r}")
    with tempfile.TemporaryDirectory(prefix="generalise-") as tmp:
        train, held, train_ids, held_ids = split(Path(source), args.train, Path(tmp))
        print(f"evolve on {', '.join(train_ids)}; hold out {', '.join(held_ids)} (objective {config.objective})")
        run_config = config.model_copy(update={"benchmark": f"locomo:{train}", "stores": Path(tmp) / "stores"})
        summary = Engine(run_config, track=False, progress=False).run()
        final = load_strategy(summary["current"]["path"])
        train_delta = summary["current_vs_baseline"]
        print(f"evolution set: {summary['baseline']['score']:.4f} -> {summary['current']['score']:.4f} "
              f"(delta {train_delta['delta']:+.4f}, p={train_delta['mcnemar_p']:.3g}); decisions {summary['decisions']}")
        harness = Harness(load_benchmark(f"locomo:{held}"), cache=IngestionCache(Path(tmp) / "held-cache"),
                          progress=False)
        base_run = harness.evaluate(load_strategy(config.strategy))
        final_run = harness.evaluate(final)
        paired = paired_comparison(base_run.outcomes(config.objective), final_run.outcomes(config.objective),
                                   alpha=config.acceptance.alpha, seed=config.seed)
        print(f"held-out set ({paired.n} questions): baseline {paired.acc_baseline:.4f} -> final "
              f"{paired.acc_candidate:.4f}  delta {paired.delta:+.4f}  McNemar p={paired.mcnemar_p:.3g}  "
              f"95% CI [{paired.ci_low:+.4f}, {paired.ci_high:+.4f}]")
        for category, row in sorted(paired.per_category.items()):
            print(f"  {category:<12} n={row['n']:<4} {row['acc_baseline']:.3f} -> {row['acc_candidate']:.3f} "
                  f"({row['delta']:+.3f})")
        for label, run in (("baseline", base_run), ("final", final_run)):
            m = run.summary
            print(f"  {label:<8} evidence share {m.evidence_share:.3f}, all packed {m.all_evidence_packed:.3f}, "
                  f"answer in evidence {m.answer_in_evidence:.3f} (anywhere {m.answer_anywhere:.3f}), "
                  f"accuracy {m.accuracy:.3f}, context words {m.context_words['mean']:.1f} (p95 "
                  f"{m.context_words['p95']:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
