"""Evaluate strategies under a run config's harness (its benchmark, questions, judge and ``runtime:`` system) and
write each one's ``traces.jsonl`` and ``summary.json``, for ``memevolve gate --adapter memevolve`` and
``../shared/tools/context_metrics.py``. ``memevolve eval`` runs the embedded runtime only; this runs an external
system too. All strategies are evaluated in one process, so an external system ingests each setting once.

A strategy is a YAML file or the hash (or a unique prefix of it) of a strategy in the config's stores.
Usage: python experiments/bench/eval_strategies.py --config experiments/mem0_answer.yaml --out DIR [--stores DIR]
NAME=STRATEGY ...
Writes DIR/NAME/traces.jsonl and DIR/NAME/summary.json; prints per strategy its objective score, context words,
wall and CPU seconds.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def strategy_of(spec: str, stores: Path) -> dict:
    """The strategy a file path or a stores hash prefix names (``SystemExit`` when it names none or several)."""
    from evolve.state.view import StoreView
    from evolve.strategy.artifact import load_strategy

    if Path(spec).is_file():
        return load_strategy(spec)
    found = sorted(p.stem for p in (stores / "strategies").glob(f"{spec}*"))
    if len(found) != 1:
        raise SystemExit(f"{spec}: {'no' if not found else len(found)} strategies of {stores} match "
                         f"(give a file or a unique hash prefix)")
    return StoreView(stores).get_strategy(found[0])


def main(argv: list[str] | None = None) -> int:
    from evolve.loop.config import load_config
    from evolve.loop.setup import RunSetup

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stores", type=Path, help="stores the harness uses for its caches and identity check "
                        "(default: the config's; strategies given by hash are read from the config's)")
    parser.add_argument("strategies", nargs="+", metavar="NAME=STRATEGY")
    args = parser.parse_args(argv)
    pairs = [s.split("=", 1) for s in args.strategies]
    if any(len(p) != 2 or not p[0] for p in pairs):
        parser.error("each strategy is NAME=FILE or NAME=HASH_PREFIX")
    taken = [str(args.out / name) for name, _ in pairs if (args.out / name / "traces.jsonl").exists()]
    if taken:
        parser.error(f"already written, not replaced: {', '.join(taken)}")
    config = load_config(args.config)
    # activates the runtime's knob schema before any strategy is read
    setup = RunSetup.prepare(config if args.stores is None else config.model_copy(update={"stores": args.stores}))
    strategies = [(name, strategy_of(spec, config.stores)) for name, spec in pairs]
    harness = setup.harness(progress=False)[0]
    for name, strategy in strategies:
        wall, cpu = time.perf_counter(), time.process_time()
        run = harness.evaluate(strategy, setup.question_ids, desc=name)
        out = run.write(args.out / name)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"{name}: {config.objective} {run.score(config.objective):.3f}, "
              f"{run.summary.context_words['mean']:.1f} context words, {len(run.traces)} traces, wall {wall:.0f} s, "
              f"CPU {cpu:.0f} s -> {out / 'traces.jsonl'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
