"""Diagnosis-guided Engine vs. blind Optuna TPE at an equal budget of candidate evaluations.

Both methods start from the same baseline on the same benchmark harness (same roles, judge and seed) and
search the same evolvable space; each gets ``--budget`` candidate evaluations in full-evaluation units:

* guided: Engine rounds (digest -> planner -> evolver -> gates -> critic -> probe -> paired decision);
  every full evaluation of a candidate costs 1 and every probe ``probe size / n questions``. Gate and
  critic refusals cost nothing; the per-round evaluation of the current strategy (cached) and the
  baseline observation are not candidate evaluations. Rounds run until the budget is spent; events
  of the last round past the budget are reported but left out of the comparison.
* blind: ``Evolver.blind_trial`` samples every evolvable dimension over its full range; each trial is
  evaluated fully (cost 1) and its score told back to TPE.

Scores are the run's objective (``--objective accuracy|evidence|answer``: the share of questions answered right,
whose gold evidence is all packed, or whose gold answer the packed evidence items carry). With ``--max-context-words W`` the guided run decides under that cost limit
and a blind trial above ``W`` mean context words scores 0 for TPE and never counts as best, so both methods are
held to the same context budget. A curve is the best score among fully evaluated strategies (baseline included)
after each evaluation; the guided run's *current* strategy (what its decisions accepted) is shown as well.
Stores and caches live in a temporary directory. Run from the repository root:

    python experiments/bench/bench_planner.py [--bench SPEC] [--budget N] [--objective evidence]
        [--max-context-words W]
"""
from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evolve.benchmarks import load_benchmark  # noqa: E402
from evolve.loop.config import RunConfig  # noqa: E402
from evolve.verify.decision import AcceptanceRules, CostLimits  # noqa: E402
from evolve.loop.engine import Engine  # noqa: E402
from evolve.improve.evolver import Evolver  # noqa: E402
from evolve.observe.harness import EvalRun, Harness  # noqa: E402
from evolve.observe.objective import OBJECTIVES, SCORE_FIELD  # noqa: E402
from evolve.loop.backends import build_backends, roles_config  # noqa: E402
from evolve.runtime import IngestionCache  # noqa: E402
from evolve.verify.statistics import paired_comparison  # noqa: E402
from evolve.files import atomic_write_text  # noqa: E402
from evolve.strategy.artifact import StrategyError, derive, ingestion_key, load_strategy, strategy_hash  # noqa: E402
from evolve.strategy.paths import get_path  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EPS = 1e-9


@dataclass
class Curve:
    """Accuracy as a step function of evaluations used (``start`` at zero cost); best-so-far curves rise only."""

    name: str
    start: float
    points: list[tuple[float, float]] = field(default_factory=list)  # (cost after event, value)

    def at(self, cost: float) -> float:
        """The value after the last event that used at most ``cost`` evaluations."""
        return ([self.start] + [v for c, v in self.points if c <= cost + EPS])[-1]

    def reaching(self, threshold: float, budget: float) -> float | None:
        """Evaluations used when the curve first reaches ``threshold`` within ``budget`` (None if never)."""
        if self.start >= threshold - EPS:
            return 0.0
        return next((c for c, b in self.points if b >= threshold - EPS and c <= budget + EPS), None)


@dataclass
class MethodResult:
    curve: Curve
    best_strategy: dict
    best_score: float
    lines: list[str]
    counts: dict[str, float | int]
    wall_s: float
    extra_curves: list[Curve] = field(default_factory=list)
    current_strategy: dict | None = None  # guided only: the strategy its decisions accepted


def run_config(args: argparse.Namespace, stores: Path) -> RunConfig:
    """The guided run's configuration: the nightly job's acceptance and planner settings."""
    config = RunConfig(benchmark=args.bench, strategy=Path(args.strategy), stores=stores, rounds=args.max_rounds,
                       candidates_per_round=args.candidates_per_round, seed=args.seed, limit=args.limit,
                       probe_size=args.probe_size, objective=args.objective,
                       cost=CostLimits(max_context_words=args.max_context_words),
                       acceptance=AcceptanceRules(epsilon_default=0.03, protected_slices=["temporal"],
                                                  secondary=args.secondary))
    return config.resolve(Path.cwd())


# ---------------------------------------------------------------- guided


def run_guided(config: RunConfig, budget: float) -> tuple[MethodResult, Engine]:
    """Engine rounds until ``budget`` evaluation units are spent; the stores are closed on return."""
    started = time.perf_counter()
    engine = Engine(config, track=False, progress=False)
    n_q = len(engine.question_ids)
    try:
        spent, idle = 0.0, 0
        for n in range(1, config.rounds + 1):
            engine.round(n)
            used = sum(cost for cost, _ in _events(engine.stores.read_jsonl("candidate_outcomes"), n_q))
            idle = idle + 1 if used == spent else 0
            spent = used
            if spent >= budget - EPS or idle >= 3:
                break
        records = engine.stores.read_jsonl("candidate_outcomes")
        scoreboard = engine.stores.read_doc("scoreboard", {"rounds": []})["rounds"]
    finally:
        engine.stores.close()
    wall = time.perf_counter() - started

    baseline_hash = strategy_hash(engine.baseline)
    base_acc = scoreboard[0]["observed_score"]
    key = SCORE_FIELD[config.objective]
    best = Curve("guided: best evaluated", base_acc)
    current = Curve("guided: current (accepted)", base_acc)
    counts = {"probes_total": 0, "full_total": 0, "probes_in_budget": 0, "full_in_budget": 0, "refused_free": 0,
              "cost_in_budget": 0.0, "cost_total": 0.0}
    lines = [f"{'cost':>7} {'round':>5} {'candidate':<11} {'change':<44} {'stage':<9} {'verdict':<19} "
             f"{'acc':>6} {'+/- vs cur':>10} {'best':>6}"]
    cost, best_acc, best_hash = 0.0, base_acc, baseline_hash
    round_end: dict[int, float] = {}
    for r in records:
        steps = _events([r], n_q)
        counts["refused_free"] += not steps
        for step, kind in steps:
            cost += step
            inside = cost <= budget + EPS
            counts[f"{kind}_total"] += 1
            counts[f"{kind}_in_budget"] += inside
            counts["cost_in_budget"] = cost if inside else counts["cost_in_budget"]
            if kind == "full" and inside:
                within = not config.cost.max_context_words or \
                    r["summary"]["context_words"]["mean"] <= config.cost.max_context_words
                if within and r["summary"][key] > best_acc + EPS:
                    best_acc, best_hash = r["summary"][key], r["strategy_hash"]
                best.points.append((cost, best_acc))
        round_end[r["round"]] = cost
        paired = r.get("paired")
        acc = f"{r['summary'][key]:.4f}" if paired else ""
        moved = f"+{len(paired['improved'])}/-{len(paired['regressed'])}" if paired else ""
        lines.append(f"{cost:7.3f} {r['round']:5d} {r['candidate_id']:<11} {r['direction']['key'][:44]:<44} "
                     f"{r['decided_by'][:9]:<9} {r['decision']['verdict']:<19} {acc:>6} {moved:>10} {best_acc:6.4f}"
                     + ("" if cost <= budget + EPS else "  (past budget)"))
    counts["cost_total"] = cost
    current_hash, end = baseline_hash, 0.0
    for entry in scoreboard:  # the current strategy changes at round ends
        end = round_end.get(entry["round"], end)
        if end <= budget + EPS:
            current.points.append((end, entry["score"]))
            current_hash = entry["strategy_hash"]
    counts.update(rounds=len(scoreboard), n_questions=n_q, restores=sum(e["restored"] for e in scoreboard),
                  probe_size=next((r["probe"]["n"] for r in records if r.get("probe")), 0),
                  current_score=current.at(budget))
    result = MethodResult(best, _stored(engine, best_hash), best_acc, lines, counts, wall, [current],
                          _stored(engine, current_hash))
    return result, engine


def _events(records: list[dict], n_q: int) -> list[tuple[float, str]]:
    """``(cost, kind)`` of each evaluation the records used, in order: a probe, then a full evaluation."""
    out: list[tuple[float, str]] = []
    for r in records:
        if r.get("probe"):
            out.append((r["probe"]["n"] / n_q, "probes"))
        if r.get("paired"):
            out.append((1.0, "full"))
    return out


def _stored(engine: Engine, digest: str) -> dict:
    return engine.baseline if digest == strategy_hash(engine.baseline) else engine.stores.get_strategy(digest)


# ---------------------------------------------------------------- blind


def run_blind(config: RunConfig, budget: int, work: Path, question_ids: list[str]) -> tuple[MethodResult, EvalRun,
                                                                                           EvalRun, Harness]:
    """Blind TPE over the full evolvable space; returns the result, the baseline run and the best run."""
    started = time.perf_counter()
    benchmark = load_benchmark(config.benchmark)
    roles = build_backends(roles_config(config), config.judge_threshold, work / "llm").roles
    harness = Harness(benchmark, roles, cache=IngestionCache(work / "ingestion"),
                      include_adversarial=config.include_adversarial, progress=False)
    baseline = load_strategy(config.strategy)
    base_run = harness.evaluate(baseline, question_ids, desc="baseline")
    evolver = Evolver(f"sqlite:///{work / 'optuna.db'}", config.seed)
    curve = Curve("blind TPE: best evaluated", base_run.score(config.objective))
    cap = config.cost.max_context_words
    best_run, best_strategy = base_run, baseline
    lines = [f"{'trial':>5} {'score':>6} {'best':>6} {'changed dims':>12} {'re-ingest':>9} {'words':>7} {'wall s':>7}"]
    invalid = 0
    while len(curve.points) < budget:
        try:
            proposal = evolver.blind_trial(baseline)
        except StrategyError:
            invalid += 1
            if invalid > 10 * budget:
                raise RuntimeError("blind TPE keeps sampling invalid strategies") from None
            continue
        strategy = derive(baseline, proposal.changes)
        run = harness.evaluate(strategy, question_ids, desc=f"blind {proposal.trial_number}")
        acc = run.score(config.objective)
        within = not cap or run.summary.context_words["mean"] <= cap
        evolver.tell(proposal, acc if within else 0.0)
        if within and acc > best_run.score(config.objective) + EPS:
            best_run, best_strategy = run, strategy
        curve.points.append((float(len(curve.points) + 1), best_run.score(config.objective)))
        changed = sum(1 for p, v in proposal.changes.items() if get_path(baseline, p) != v)
        reingest = ingestion_key(strategy) != ingestion_key(baseline)
        lines.append(f"{len(curve.points):5d} {acc:6.4f} {best_run.score(config.objective):6.4f} {changed:12d} "
                     f"{'yes' if reingest else 'no':>9} {run.summary.context_words['mean']:7.1f} "
                     f"{run.summary.wall_time_s:7.1f}")
    counts = {"full_total": budget, "invalid_samples_free": invalid}
    result = MethodResult(curve, best_strategy, best_run.score(config.objective), lines, counts,
                          time.perf_counter() - started)
    return result, base_run, best_run, harness


# ---------------------------------------------------------------- report


def fmt_reach(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.3f}"


def paired_line(label: str, base: EvalRun, cand: EvalRun, config: RunConfig) -> list[str]:
    p = paired_comparison(base.outcomes(config.objective), cand.outcomes(config.objective),
                          alpha=config.acceptance.alpha, seed=config.seed)
    cats = ", ".join(f"{c} {v['delta']:+.3f}" for c, v in p.per_category.items())
    words = f"context words {base.summary.context_words['mean']:.0f} -> {cand.summary.context_words['mean']:.0f}"
    return [f"{label}: n={p.n} {config.objective} {p.acc_baseline:.4f} -> {p.acc_candidate:.4f} "
            f"(delta {p.delta:+.4f}), {words}, "
            f"+{len(p.improved)}/-{len(p.regressed)} questions, McNemar p={p.mcnemar_p:.3g}, "
            f"95% CI [{p.ci_low:+.4f}, {p.ci_high:+.4f}] ({p.ci_method}), significant={p.significant}",
            f"    per category: {cats}"]


def plot(curves: list[Curve], budget: float, baseline: float, target: float, path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.8))
    styles = {0: ("tab:blue", "-"), 1: ("tab:blue", "--"), 2: ("tab:orange", "-")}
    for i, curve in enumerate(curves):
        xs = [0.0] + [c for c, _ in curve.points] + [budget]
        ys = [curve.start] + [b for _, b in curve.points]
        ys.append(ys[-1])
        color, style = styles[i]
        ax.step(xs, ys, where="post", color=color, linestyle=style, label=curve.name)
        ax.plot([c for c, _ in curve.points], [b for _, b in curve.points], "o", color=color, markersize=3)
    ax.axhline(baseline, color="grey", linewidth=0.8, linestyle=":", label=f"baseline {baseline:.4f}")
    ax.axhline(target, color="tab:red", linewidth=0.8, linestyle=":", label=f"target {target:.4f}")
    ax.set_xlim(0, budget)
    ax.set_xlabel("candidate evaluations used (full-evaluation units)")
    ax.set_ylabel("best score so far")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", default="synthetic:0:12", help="benchmark spec (e.g. locomo:PATH)")
    p.add_argument("--budget", type=int, default=16, help="candidate evaluations per method (full-eval units)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strategy", default=str(REPO / "strategies" / "baseline.yaml"))
    p.add_argument("--candidates-per-round", type=int, default=4)
    p.add_argument("--probe-size", type=int, default=80)
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N questions")
    p.add_argument("--target-pp", type=float, default=5.0, help="fixed target: baseline + this many points")
    p.add_argument("--max-rounds", type=int, default=None, help="cap on guided rounds (default 2 x budget)")
    p.add_argument("--objective", choices=OBJECTIVES, default="accuracy")
    p.add_argument("--secondary", choices=OBJECTIVES, default=None,
                   help="the guided decisions' secondary outcome (acceptance.secondary; default none)")
    p.add_argument("--max-context-words", type=float, default=None,
                   help="cost limit: mean context words per question (guided decisions and blind best alike)")
    p.add_argument("--report", default=str(HERE / "planner_report.md"))
    p.add_argument("--plot", default=str(HERE / "planner_curves.png"))
    args = p.parse_args(argv)
    if args.budget < 1:
        p.error("--budget must be >= 1")
    args.max_rounds = args.max_rounds or 2 * args.budget
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memevolve-bench-") as tmp:
        config = run_config(args, Path(tmp) / "guided-stores")
        guided, engine = run_guided(config, args.budget)
        blind, base_run, blind_run, harness = run_blind(config, args.budget, Path(tmp) / "blind", engine.question_ids)
        guided_run = engine.harness.evaluate(guided.best_strategy, engine.question_ids, desc="guided best")
        current_run = engine.harness.evaluate(guided.current_strategy, engine.question_ids, desc="guided current")
    total = time.perf_counter() - started

    baseline = base_run.score(args.objective)
    target = baseline + args.target_pp / 100
    g_final, b_final = guided.curve.at(args.budget), blind.curve.at(args.budget)
    c = guided.counts
    out = [f"command: {command}",
           f"benchmark {args.bench} | {c['n_questions']} questions ({base_run.summary.n_scored} scored) | "
           f"objective {args.objective} (secondary {args.secondary or '-'}) | "
           f"max context words {args.max_context_words or '-'} | "
           f"seed {args.seed} | budget {args.budget} evaluations | probe {c['probe_size']} questions = "
           f"{c['probe_size'] / c['n_questions']:.3f} evaluation",
           f"baseline score {baseline:.4f} (guided harness: {guided.curve.start:.4f}); "
           f"fixed target = baseline + {args.target_pp:g}pp = {target:.4f}", "",
           "## Best score so far after k evaluation units", "",
           f"{'k':>3} {'guided best':>11} {'guided current':>14} {'blind TPE':>9}"]
    for k in range(args.budget + 1):
        out.append(f"{k:3d} {guided.curve.at(k):11.4f} {guided.extra_curves[0].at(k):14.4f} "
                   f"{blind.curve.at(k):9.4f}")
    out += ["", "## Guided engine, per candidate (cost = cumulative evaluation units)", "", *guided.lines,
            "", "## Blind TPE, per trial", "", *blind.lines, "", "## Summary", "",
            f"guided: final best {g_final:.4f}; current (accepted) strategy {c['current_score']:.4f}; "
            f"{c['rounds']} rounds; full evaluations {c['full_in_budget']} in budget ({c['full_total']} total); "
            f"probes {c['probes_in_budget']} in budget ({c['probes_total']} total); units used "
            f"{c['cost_in_budget']:.3f} in budget ({c['cost_total']:.3f} total); gate/critic/planner refusals "
            f"(free) {c['refused_free']}; restores {c['restores']}; wall {guided.wall_s:.0f}s",
            f"blind TPE: final best {b_final:.4f}; full evaluations {blind.counts['full_total']}; invalid samples "
            f"(free) {blind.counts['invalid_samples_free']}; wall {blind.wall_s:.0f}s (incl. baseline evaluation)",
            f"evaluations to reach guided final {g_final:.4f}: guided {fmt_reach(guided.curve.reaching(g_final, args.budget))}"
            f", blind {fmt_reach(blind.curve.reaching(g_final, args.budget))}",
            f"evaluations to reach target {target:.4f}: guided {fmt_reach(guided.curve.reaching(target, args.budget))}"
            f", blind {fmt_reach(blind.curve.reaching(target, args.budget))}", "",
            "## Paired tests vs. baseline (McNemar exact, paired bootstrap CI)", ""]
    for label, run, expected in (("guided best", guided_run, guided.best_score),
                                 ("guided current", current_run, c["current_score"]),
                                 ("blind best", blind_run, blind.best_score)):
        if abs(run.score(args.objective) - expected) > EPS:
            out.append(f"WARNING {label}: re-evaluated score {run.score(args.objective):.4f} != recorded "
                       f"{expected:.4f}")
        out += paired_line(label, base_run, run, config)
    out += ["", f"total wall time {total:.0f}s"]
    text = "\n".join(out)
    print(text)
    plot([guided.curve, guided.extra_curves[0], blind.curve], args.budget, baseline, target, Path(args.plot),
         f"{args.bench}: guided engine vs blind TPE (seed {args.seed})")
    write_report(Path(args.report), command, text, Path(args.plot))
    return 0


def write_report(path: Path, command: str, text: str, plot_path: Path) -> None:
    body = (f"# Guided engine vs. blind TPE at an equal evaluation budget\n\n"
            f"Generated by `experiments/bench/bench_planner.py` (run from the repository root); re-running it "
            "overwrites this file.\n\n"
            f"```\n{command}\n```\n\n"
            f"![best score so far]({plot_path.name})\n\n"
            "Accounting: a full evaluation of a candidate costs 1 unit; a probe costs probe size / n questions. "
            "Gate, critic and planner refusals cost nothing; the per-round evaluation of the current strategy and "
            "the baseline evaluation are not candidate evaluations. *Best* is the highest score among fully "
            "evaluated strategies (baseline included) — the same rule for both methods; *current* is the strategy "
            "the guided engine's decisions accepted, changing at round ends. Paired tests reuse the questions the "
            "selection was made on, so the best-of-N figures are optimistic for both methods.\n\n"
            f"```\n{text}\n```\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, body)


if __name__ == "__main__":
    sys.exit(main())
