"""Command-line interface: memevolve eval|compare|run|gate|... Exit codes: 0 done, 1 refused or different, 2 usage
errors and bad input, 130 interrupted by Ctrl-C (SIGINT), 143 stopped by SIGTERM (one line says what resumes).

Commands that use stores follow one rule: --config PATH (default $MEMEVOLVE_CONFIG, else
experiments/nightly.yaml if it exists) names the run config, and the stores are --stores when given, else the
config's stores.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from evolve.cli import interrupt
from evolve.cli.argtypes import positive_int, share
from evolve.cli.defaults import CONFIG_HELP, config_path, stores_dir
from evolve.data import BASELINE_PATH
from evolve.errors import UserError

if TYPE_CHECKING:
    from evolve.loop.engine import Engine
    from evolve.observe.trace import Summary

#: Benchmark specs every command taking --bench accepts.
BENCH_HELP = ("locomo:PATH | longmemeval:PATH | probes:PATH | synthetic[:SEED[:PERSONAS]] | lifecycle:SEED[:PERSONAS] "
              "(docs: concepts/benchmarks.md)")
CACHE_HELP = "ingestion and embedding cache shared across evaluations and processes (default: %(default)s; '' for none)"
#: Where ``eval`` writes when --out is not given: a new directory per evaluation.
EVAL_RUNS = Path("runs")


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def print_summary(summary: "Summary") -> None:
    rows = [("category", "n", "accuracy", "F1", "recall@10")]
    for cat, n in summary.n_by_category.items():
        rows.append((cat, str(n), _fmt(summary.accuracy_by_category[cat]), _fmt(summary.f1_by_category[cat]),
                     _fmt(summary.evidence_recall_by_category[cat]["10"])))
    rows.append(("all", str(summary.n_scored), _fmt(summary.accuracy), _fmt(summary.f1),
                 _fmt(summary.evidence_recall["10"])))
    print(_table(rows))
    from evolve.ops.review import answers_text

    if (answers := answers_text(summary.to_dict())) is not None:
        print(answers)
    if summary.abstention:
        print(f"abstention: {summary.abstention['correct']}/{summary.abstention['n']} declined correctly")
    if summary.retrieval_recall:
        print("retrieval recall (any / all @5): " + ", ".join(
            f"{level} {summary.retrieval_recall[level]['recall_any@5']:.3f} / "
            f"{summary.retrieval_recall[level]['recall_all@5']:.3f}" for level in ("turn", "session")))
    causes = ", ".join(f"{k}={v}" for k, v in sorted(summary.root_causes.items())) or "none"
    dcr = " ".join(f"@{tau} {value:.3f}" for tau, value in summary.dcr.items())
    print(f"judge {summary.judge} | root causes: {causes} | DCR {dcr} | "
          f"strategy {summary.strategy_hash[:12]} | {summary.wall_time_s:.1f}s")
    left = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in summary.answer_left_out.items())
    print(f"all evidence packed {_fmt(summary.all_evidence_packed)} ({summary.n_evidence_known} questions) | "
          f"answer in evidence {_fmt(summary.answer_in_evidence)}, anywhere {_fmt(summary.answer_anywhere)} "
          f"({summary.n_answer_known} questions; left out: {left}) | "
          f"context words {summary.context_words['mean']:.1f}")


def _harness(args: argparse.Namespace):
    """The benchmark's harness (deterministic roles, token-F1 judge) with its ingestion cache in ``--cache``, and the
    ids of the questions to evaluate."""
    from evolve.benchmarks import load_benchmark, select_questions
    from evolve.benchmarks.probes import probe_benchmark
    from evolve.observe.evaluator import Roles
    from evolve.observe.harness import Harness
    from evolve.observe.judge import TokenF1Judge
    from evolve.runtime import IngestionCache
    from evolve.runtime.reference import ReferenceGallery, ReferenceLifecycle

    scheme, _, rest = args.bench.partition(":")
    bench = load_benchmark(f"locomo:{rest}" if scheme == "probes" else args.bench)
    if scheme == "probes":  # asked at their sessions, as a run asks them
        bench = probe_benchmark(bench, timeline=ReferenceLifecycle(), gallery=ReferenceGallery())
    for warning in bench.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    ids = [q.id for q in select_questions(bench, args.bench, args.limit, args.include_adversarial)]
    harness = Harness(bench, Roles(judge=TokenF1Judge(args.judge_threshold)), include_adversarial=args.include_adversarial,
                      cache=IngestionCache(args.cache or None))
    return harness, ids


def eval_out(given: str | None, force: bool) -> Path:
    """Where ``eval`` writes: ``given`` when it is new or empty (or ``force``), else a new timestamped directory
    under ``runs/``. Never an existing non-empty directory without ``force``."""
    from evolve.loop.config import ConfigError
    from evolve.ops.outputs import check_output_dir

    def checked(path: Path) -> Path:
        return check_output_dir("--out", path, ("summary.json", "traces.jsonl"))

    if given is None:
        stamp = datetime.now(timezone.utc).strftime("eval-%Y%m%d-%H%M%S")
        out, n = EVAL_RUNS / stamp, 2
        while out.exists():
            out, n = EVAL_RUNS / f"{stamp}-{n}", n + 1
        return checked(out)
    out = checked(Path(given))
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"--out {out}: directory exists and is not empty; give a new directory, omit --out for a "
                          f"new one under {EVAL_RUNS}/, or --force to overwrite its summary and traces")
    return out


def _summary_out(given: str | None) -> Path | None:
    """The checked ``--summary-out`` file (refused before any work when it would replace state)."""
    from evolve.ops.outputs import check_output_file

    return None if given is None else check_output_file("--summary-out", given)


def _stamped(directory: Path, prefix: str) -> Path:
    """A new ``<prefix>-YYYYMMDDTHHMMSSZ.json`` (UTC) in ``directory``, numbered when the second is taken."""
    stamp = datetime.now(timezone.utc).strftime(f"{prefix}-%Y%m%dT%H%M%SZ")
    path, n = directory / f"{stamp}.json", 2
    while path.exists():
        path, n = directory / f"{stamp}-{n}.json", n + 1
    return path


def cmd_eval(args: argparse.Namespace) -> int:
    from evolve.files import atomic_write_json
    from evolve.strategy.artifact import load_strategy

    out = eval_out(args.out, args.force)
    summary_out = _summary_out(args.summary_out)
    strategy = load_strategy(args.strategy)
    harness, ids = _harness(args)
    run = harness.evaluate(strategy, ids)
    run.write(out)
    if summary_out is not None:
        atomic_write_json(summary_out, run.summary.to_dict())
    if args.json:
        print(json.dumps(run.summary.to_dict(), indent=2))
    else:
        print_summary(run.summary)
    print(f"wrote {out / 'summary.json'} and {out / 'traces.jsonl'}"
          + (f" and {summary_out}" if summary_out is not None else ""), file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Paired comparison of strategy B against strategy A on one benchmark, question by question."""
    from evolve.loop.config import ConfigError
    from evolve.observe.objective import LABEL, NEEDS
    from evolve.strategy.artifact import load_strategy
    from evolve.verify.statistics import paired_comparison

    a, b = load_strategy(args.a), load_strategy(args.b)
    harness, ids = _harness(args)
    run_a, run_b = harness.evaluate(a, ids, desc="A"), harness.evaluate(b, ids, desc="B")
    report = paired_comparison(run_a.outcomes(args.objective), run_b.outcomes(args.objective), alpha=args.alpha)
    if report.n == 0:
        raise ConfigError(f"--objective {args.objective}: no question of {args.bench} counts under it"
                          + (f" (it needs {NEEDS[args.objective]})" if args.objective != "accuracy" else ""))
    if args.json:
        print(json.dumps({"a": str(args.a), "b": str(args.b), "objective": args.objective, **report.to_dict()},
                         indent=2))
        return 0
    label = LABEL[args.objective]
    print(f"A {args.a} ({run_a.summary.strategy_hash[:12]})  vs  B {args.b} ({run_b.summary.strategy_hash[:12]})")
    print(f"{args.bench}: {report.n} questions paired by id, objective {args.objective} ({label})")
    print(f"A {report.acc_baseline:.4f} -> B {report.acc_candidate:.4f}  delta {report.delta:+.4f}  "
          f"McNemar p={report.mcnemar_p:.4g}  {report.confidence:.0%} CI [{report.ci_low:+.4f}, {report.ci_high:+.4f}] "
          f"({report.ci_method})  {'significant' if report.significant else 'not significant'} at alpha "
          f"{args.alpha:g}")
    rows = [("category", "n", "A", "B", "delta")]
    rows += [(c, str(v["n"]), f"{v['acc_baseline']:.3f}", f"{v['acc_candidate']:.3f}", f"{v['delta']:+.3f}")
             for c, v in report.per_category.items()]
    print(_table(rows))
    for side, ids_ in (("improved", report.improved), ("regressed", report.regressed)):
        shown = ", ".join(ids_[: args.show]) + (f", ... (+{len(ids_) - args.show})" if len(ids_) > args.show else "")
        print(f"{side} ({len(ids_)}): {shown or '-'}")
    print(f"context words per question: A {run_a.summary.context_words['mean']:.1f}, "
          f"B {run_b.summary.context_words['mean']:.1f}")
    return 0


def _reason(text: str) -> str:
    """An argparse type: a reason that says something (not empty or blank)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; say why the rules change")
    return text


def cmd_run(args: argparse.Namespace) -> int:
    with interrupt.deferred():  # a signal during these imports is raised once they are done
        from evolve.errors import ConfigError
        from evolve.llm.config import EndpointUnreachable
        from evolve.loop.config import load_config

    path = config_path(args.config)
    if path is None:
        raise ConfigError("no run config: give --config PATH or set $MEMEVOLVE_CONFIG")
    summary_out = _summary_out(args.summary_out)
    engine: Engine | None = None
    try:
        config = load_config(path)
        if args.stores:
            try:
                stores = Path(args.stores).resolve()
            except (RuntimeError, OSError) as exc:  # a symlink loop
                raise ConfigError(f"--stores {args.stores}: cannot be resolved ({exc})") from None
            config = config.model_copy(update={"stores": stores})
        try:
            if args.estimate:
                from evolve.loop.estimate import estimate

                print(json.dumps(estimate(config, args.rounds), indent=2))
                return 0
            with interrupt.deferred():  # imports, model loading and the stores' set-up finish before a signal
                from evolve.loop.engine import Engine  # after the config is read: a bad one is refused at once

                built = Engine(config, track=not args.no_tracking, new_rules=args.new_rules)
            engine = built
        except EndpointUnreachable:
            raise
        except ConfigError as exc:  # a setting the benchmark or a role cannot serve: name the file
            raise ConfigError(f"{path}: {str(exc).removeprefix('run config: ')}") from None
        print(engine.power.describe(), file=sys.stderr, flush=True)
        result = engine.run(args.rounds)
    except KeyboardInterrupt as exc:
        phase = "at start-up" if engine is None else f"during round {engine.stores.last_committed_round + 1}"
        raise interrupt.where(exc, f"interrupted {phase}; nothing lost; `memevolve run` resumes") from None
    from evolve.cli.summary import run_table
    from evolve.files import atomic_write_json, ensure_dir
    from evolve.state.layout import StoreLayout

    kept = _stamped(ensure_dir(StoreLayout(config.stores).summaries), "run")
    for target in (kept, summary_out):
        if target is not None:
            atomic_write_json(target, result)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(run_table(result, config=path, stores=config.stores, cost=config.cost, summary_path=summary_out or kept))
    if engine.rounds_run == 0 and result["budget_stop"] is None:
        print(f"0 rounds run; the config's {config.rounds} rounds are done; --rounds N runs more", file=sys.stderr)
    return 0


def cmd_local_llm(args: argparse.Namespace) -> int:
    """Serve a packaged model on 127.0.0.1 until Ctrl-C or SIGTERM; 1 when the server dies on its own."""
    from evolve.llm.local import LocalLLMServer

    server = LocalLLMServer(args.model, port=args.port)
    try:
        with server:
            print(f"base_url: {server.base_url}")
            print(f"# point a role at it with MEMEVOLVE_<ROLE>_* (here the answerer), or run a config's roles with "
                  f"base_url {server.base_url} and model {server.model}:")
            print("\n".join(server.env_lines()))
            print("serving; Ctrl-C or SIGTERM stops the server", flush=True)
            code, tail = server.wait(), server.log_tail()
    except KeyboardInterrupt:
        print("stopped", flush=True)
        return 0
    from evolve.llm.local import REBUILD_HINT

    hint = f" (killed by a signal: if it crashed computing, {REBUILD_HINT})" if code < 0 else ""
    print(f"error: llama.cpp server exited with code {code}{hint}:\n{tail}", file=sys.stderr)
    return 1


class _ModelNames:
    """The packaged local models as argparse choices, imported only when checked or listed (keeps --help fast)."""

    def __iter__(self):
        from evolve.llm.local import MODELS

        return iter(sorted(MODELS))

    def __contains__(self, name: object) -> bool:
        return name in list(self)


def _eval_args(p: argparse.ArgumentParser) -> None:
    """Options ``eval`` and ``compare`` share: which questions, how they are judged, the ingestion cache."""
    p.add_argument("--limit", type=positive_int, metavar="N", help="only the first N questions (N >= 1)")
    p.add_argument("--judge-threshold", type=share, default=0.5,
                   help="token-F1 at or above which an answer is correct, in (0, 1] (default: %(default)s)")
    p.add_argument("--include-adversarial", action="store_true",
                   help="also score adversarial (unanswerable) questions, left out by default")
    p.add_argument("--cache", default=str(Path("stores") / "cache" / "ingestion"), metavar="DIR", help=CACHE_HELP)


def build_parser() -> argparse.ArgumentParser:
    from evolve.observe.objective import OBJECTIVES

    parser = argparse.ArgumentParser(prog="memevolve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("eval", help="score one strategy on a benchmark, with traces and root causes")
    p.add_argument("--strategy", default=str(BASELINE_PATH), help="strategy file (default: the packaged baseline)")
    p.add_argument("--bench", default="synthetic", help=f"{BENCH_HELP} (default: %(default)s)")
    p.add_argument("--out", metavar="DIR",
                   help=f"directory for summary.json and traces.jsonl; must be new or empty unless --force "
                        f"(default: a new {EVAL_RUNS}/eval-YYYYMMDD-HHMMSS, UTC)")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out directory, replacing "
                                                        "its summary.json and traces.jsonl")
    p.add_argument("--json", action="store_true", help="print the full summary as JSON instead of the table")
    p.add_argument("--summary-out", metavar="FILE", help="also write the full summary JSON to FILE")
    _eval_args(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("compare", help="paired comparison of two strategy files on a benchmark")
    p.add_argument("a", type=Path, help="strategy A (the reference)")
    p.add_argument("b", type=Path, help="strategy B (compared with A)")
    p.add_argument("--bench", required=True, help=BENCH_HELP)
    p.add_argument("--objective", choices=OBJECTIVES, default="accuracy",
                   help="the per-question outcome compared (default: %(default)s)")
    _eval_args(p)
    p.add_argument("--alpha", type=share, default=0.05, help="significance level in (0, 1] (default: %(default)s)")
    p.add_argument("--show", type=positive_int, default=20, help="question ids listed per side (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the full paired report as JSON")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("run", help="run Observe-Improve-Verify rounds from a run config")
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--rounds", type=positive_int, metavar="N",
                   help="run N more rounds (default: until the config's round count is reached)")
    p.add_argument("--stores", help="stores directory (default: the config's stores)")
    p.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    p.add_argument("--new-rules", metavar="REASON", type=_reason,
                   help="continue stores made under other decision rules (acceptance:, cost:) under the config's, "
                        "journaling the change with REASON")
    p.add_argument("--json", action="store_true", help="print the full JSON summary instead of the table")
    p.add_argument("--summary-out", metavar="FILE",
                   help="also write the full JSON summary to FILE (it is always kept in the stores' summaries/)")
    p.add_argument("--estimate", action="store_true",
                   help="print the LLM calls, tokens and cost one evaluation, one candidate and the rest of the night "
                        "are expected to spend (no endpoint is called, the stores are not touched) and exit")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("local-llm", help="serve a packaged GGUF model through llama.cpp's OpenAI-compatible server "
                                         "on 127.0.0.1 (needs the local-llm extra)")
    p.add_argument("--model", choices=_ModelNames(), default="smollm2", metavar="MODEL",
                   help="packaged model: %(choices)s (default: %(default)s)")
    p.add_argument("--port", type=positive_int, help="port on 127.0.0.1 (default: a free one)")
    p.set_defaults(func=cmd_local_llm)

    from evolve.cli import audit, canary, gate, governance, keys, replay, review, serve, sweep, workflow

    workflow.register(sub)
    canary.register(sub)
    governance.register(sub)
    serve.register(sub)
    replay.register(sub)
    gate.register(sub)
    review.register(sub)
    sweep.register(sub)
    keys.register(sub)
    audit.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``memevolve`` command; returns the exit code (0 done, 1 refused, 2 bad input, 130/143 interrupted by
    SIGINT/SIGTERM)."""
    with interrupt.handled():
        try:
            return _main(argv)
        except KeyboardInterrupt as exc:
            command = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), "")
            line, code = interrupt.report(exc, command)
            print(line, file=sys.stderr, flush=True)
            return code


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "resolve_stores", False):
            args.stores = str(stores_dir(args.stores, args.config))
            from evolve.loop.setup import use_stores_schema

            use_stores_schema(Path(args.stores))
        return args.func(args)
    except BrokenPipeError:  # output piped into e.g. `head`
        sys.stderr.close()
        return 0
    except (UserError, FileNotFoundError) as exc:  # bad input; any other error is the optimizer's and raises
        print(f"error: {exc}", file=sys.stderr)
        return 2
