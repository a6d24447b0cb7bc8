"""memevolve: offline strategy-evolution optimizer for LLM-agent memory systems.

The public API, importable from ``evolve`` directly::

    import evolve

    config = evolve.load_config("experiments/nightly.yaml")
    summary = evolve.Engine(config, track=False).run(rounds=1)

    harness = evolve.Harness(evolve.load_benchmark("synthetic:0:3"))
    run = harness.evaluate(evolve.load_strategy(evolve.BASELINE_PATH))
    print(run.summary.accuracy, run.traces[0].root_cause)

Names load on first use, so ``import evolve`` stays cheap (the engine pulls in MLflow and Optuna).
"""
from __future__ import annotations

from evolve.lazy import lazy_exports

__version__ = "0.1.0"

#: Public name -> module that defines it.
_EXPORTS = {
    # the loop
    "Engine": "evolve.loop.engine", "RunConfig": "evolve.loop.config", "load_config": "evolve.loop.config",
    "ConfigError": "evolve.errors", "CandidateRecord": "evolve.state.record", "History": "evolve.ops.history",
    # errors
    "EvolveError": "evolve.errors", "UserError": "evolve.errors",
    # the strategy artifact
    "BASELINE_PATH": "evolve.data", "StrategyError": "evolve.strategy.artifact",
    "load_strategy": "evolve.strategy.artifact", "parse_strategy": "evolve.strategy.artifact",
    "validate_strategy": "evolve.strategy.artifact", "strategy_hash": "evolve.strategy.artifact",
    "policy_hash": "evolve.strategy.artifact", "derive": "evolve.strategy.artifact",
    "Policy": "evolve.strategy.policy", "diff_strategies": "evolve.strategy.diff",
    # observe
    "Harness": "evolve.observe.harness", "EvalRun": "evolve.observe.harness", "Roles": "evolve.observe.evaluator",
    "Trace": "evolve.observe.trace", "Summary": "evolve.observe.trace",
    # benchmarks
    "load_benchmark": "evolve.benchmarks", "Benchmark": "evolve.benchmarks", "BenchmarkError": "evolve.benchmarks",
    "generate_synthetic": "evolve.benchmarks",
    # decisions
    "AcceptanceRules": "evolve.verify.decision", "CostLimits": "evolve.verify.decision",
    "Decision": "evolve.verify.decision",
    "Verdict": "evolve.verify.decision", "decide": "evolve.verify.decision",
    "paired_comparison": "evolve.verify.statistics",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("evolve", _EXPORTS, globals())
