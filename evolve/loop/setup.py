"""Everything a run validates and builds before its stores are opened: inputs, question sets, backends, harness."""
from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path

from evolve.benchmarks import load_benchmark, select_questions
from evolve.canonical import canonical_hash
from evolve.benchmarks.probe_mix import mix_of
from evolve.benchmarks.probes import Questioner, augment, probe_benchmark
from evolve.benchmarks.types import PROBE_CATEGORIES, Benchmark, Question
from evolve.llm import ResponseCache, RolesConfig, check_reachable
from evolve.llm.roles import build_llm_role
from evolve.loop.backends import Backends, build_backends, roles_config
from evolve.loop.budget import Budget, BudgetedHarness
from evolve.loop.commit import check_harness
from evolve.loop.config import ConfigError, RunConfig
from evolve.loop.rules import RulesChange, check_rules, rules_of
from evolve.observe.answer import content_words
from evolve.observe.harness import Harness
from evolve.observe.objective import NEEDS, OBJECTIVES
from evolve.files import atomic_write_json, read_json
from evolve.runtime.reference import ReferenceGallery, ReferenceLifecycle
from evolve.runtime import IngestionCache
from evolve.runtime.external import ExternalSystem, load_knob_schema
from evolve.runtime.usage import UsageStats
from evolve.state.layout import StoreLayout
from evolve.strategy.artifact import load_strategy
from evolve.strategy import schema as strategy_schema
from evolve.strategy.schema import live_dimensions, restrict_dimensions, schema_hash
from evolve.verify.power import PowerCheck
from evolve.verify.probe import stratified_probe

log = logging.getLogger(__name__)


def _split(benchmark: Benchmark, questions: list, fraction: float, seed: int) -> set[str]:
    """The held-out conversation ids: ``fraction`` of the questions' conversations (at least one, and at least one
    left), drawn by ``seed`` from their sorted ids."""
    conversations = sorted({q.conversation_id for q in questions})
    if len(conversations) < 2:
        raise ConfigError(f"holdout.split: {benchmark.name} has {len(conversations)} conversation(s) among the "
                          "questions; a split by conversation needs at least 2")
    random.Random(seed).shuffle(conversations)
    k = min(len(conversations) - 1, max(1, round(fraction * len(conversations))))
    return set(conversations[:k])


def confirmation_split(scored: dict[str, str], share: float, seed: int) -> list[str]:
    """The night's confirmation questions: ``share`` of each category's scored questions (rounded, at least one where
    a category has two), drawn by ``seed`` through a hash of each id, so the split of a question does not depend on
    which other questions the benchmark holds."""
    by_category: dict[str, list[str]] = {}
    for qid, category in scored.items():
        by_category.setdefault(category, []).append(qid)
    held: list[str] = []
    for ids in by_category.values():
        k = min(len(ids) - 1, max(1, round(share * len(ids)))) if len(ids) > 1 else 0
        held += sorted(ids, key=lambda q: canonical_hash({"seed": seed, "id": q}))[:k]
    return sorted(held)


def counts(benchmark: Benchmark, question: Question, objective: str) -> bool:
    """Whether ``question`` can count under the evidence or answer ``objective`` (it has what the check needs)."""
    if objective == "answer" and not content_words(question.answer):
        return False
    return bool(benchmark.known_evidence(question))


def external_system(config: RunConfig) -> ExternalSystem | None:
    """The external system ``config.runtime`` names, its knob schema activated (or the framework's schema restored
    without one); refuses a knob schema with no evolvable path and an adapter that cannot be imported."""
    spec = config.runtime
    if spec is None:
        strategy_schema.activate(None)
        return None
    schema = load_knob_schema(spec.knob_schema)
    system = ExternalSystem(spec.adapter, schema, spec.call_timeout_s)
    strategy_schema.activate(schema, spec.bundles)
    return system


def use_stores_schema(stores: Path) -> None:
    """Read the strategies of ``stores`` under the schema they were made with: the knob schema a run on an external
    system recorded there (:attr:`StoreLayout.knob_schema`), else the framework's."""
    path = StoreLayout(stores).knob_schema
    strategy_schema.activate(read_json(path)["schema"] if path.is_file() else None)


#: What the validity study (experiments/bench/validity.py) measured of the probes alone, said in a label-free run's
#: summary.
PROBE_VALIDITY = ("Spearman 0.63 with labelled deltas over 50 moves within LoCoMo conv-26/30, 0.71 on held-out "
                  "conv-41/42; labelled alone 0.67 and 0.80")


@dataclass(frozen=True)
class QuestionSources:
    """How many scored questions are labelled and how many are probes, and the probes' LoCoMo category mix."""

    labelled: int
    probes: int
    mix: dict[str, int]

    @classmethod
    def of(cls, questions: list[Question]) -> "QuestionSources":
        kinds = [q.category.removeprefix("probe_") for q in questions if q.category in PROBE_CATEGORIES]
        return cls(len(questions) - len(kinds), len(kinds), mix_of(kinds))

    @property
    def label_free(self) -> bool:
        return self.labelled == 0 and self.probes > 0

    def to_dict(self) -> dict:
        return {"labelled": self.labelled, "probes": self.probes, "probe_mix": self.mix,
                "label_free": self.label_free, "probe_validity": PROBE_VALIDITY}


@dataclass
class RunSetup:
    """A run config's validated inputs: baseline, benchmark, the questions evaluated and scored, the probe, roles."""

    config: RunConfig
    baseline: dict
    benchmark: Benchmark
    question_ids: list[str]
    scored: dict[str, str]  # question id -> category, of the questions the objective counts
    probe_ids: list[str]
    roles: RolesConfig
    layout: StoreLayout
    #: Held-out questions (never searched, probed or decided on) and the benchmark they come from.
    holdout_ids: list[str]
    holdout_benchmark: Benchmark | None
    #: The night's confirmation questions (config ``night.confirmation``): scored, never searched, probed or decided
    #: on by a candidate; only the night's final is compared on them.
    confirmation_ids: list[str]
    #: The change of decision rules :meth:`harness` was told to make (``None``: the stores' rules hold).
    rules_change: RulesChange | None = None
    #: The external memory system evolved instead of the embedded runtime (run config ``runtime:``).
    system: ExternalSystem | None = None
    #: Where the scored questions come from: labelled, probes, or both.
    sources: "QuestionSources | None" = None

    @classmethod
    def prepare(cls, config: RunConfig, questioner: Questioner | None = None) -> "RunSetup":
        """Validate every input of ``config`` (raising :class:`ConfigError` naming the field) without touching
        the stores or any endpoint (but ``questioner``'s, whose probes ``augment: probes`` then adds). A ``runtime:``
        block makes its knob schema the process's strategy schema."""
        system = external_system(config)
        baseline = load_strategy(config.strategy)
        scheme, _, rest = config.benchmark.partition(":")
        benchmark = load_benchmark(f"locomo:{rest}" if scheme == "probes" else config.benchmark)
        if scheme == "probes":  # the probes of the file's conversations, chosen under the config's probes: settings
            benchmark = probe_benchmark(benchmark, config.probes, questioner, ReferenceLifecycle(),
                                        ReferenceGallery())
        elif not benchmark.questions and benchmark.conversations:  # unlabelled (no qa, capture-export): label-free
            log.info("benchmark: %s holds no labelled question; evolving on probe questions generated from its "
                     "conversations", config.benchmark)
            benchmark = probe_benchmark(benchmark, config.probes, questioner, ReferenceLifecycle(),
                                        ReferenceGallery())
        elif config.augment == "probes":
            benchmark = augment(benchmark, questioner, config.probes, ReferenceLifecycle(), ReferenceGallery())
        for warning in benchmark.warnings:
            log.warning("benchmark: %s", warning)
        questions = select_questions(benchmark, config.benchmark, config.limit, config.include_adversarial)
        holdout_bench, holdout_ids = None, []
        if config.holdout is not None and config.holdout.split is not None:
            held = _split(benchmark, questions, config.holdout.split.holdout_fraction, config.holdout.split.seed)
            holdout_bench, holdout_ids = benchmark, [q.id for q in questions if q.conversation_id in held
                                                     and q.category not in PROBE_CATEGORIES]
            questions = [q for q in questions if q.conversation_id not in held]
        elif config.holdout is not None:
            holdout_bench = load_benchmark(config.holdout.benchmark)
            shared = {c.content_hash() for c in benchmark.conversations.values()} & {
                c.content_hash() for c in holdout_bench.conversations.values()}
            if shared:
                ids = sorted(cid for cid, c in holdout_bench.conversations.items() if c.content_hash() in shared)
                raise ConfigError(f"holdout.benchmark: shares {len(ids)} conversation(s) with the benchmark "
                                  f"({', '.join(ids[:5])}); held-out data must be unseen by the search")
            holdout_ids = [q.id for q in select_questions(holdout_bench, config.holdout.benchmark, None,
                                                          config.include_adversarial)]
        scored = {q.id: q.category for q in questions if config.include_adversarial or q.category != "adversarial"}
        if config.objective != "accuracy":
            scored = {q.id: q.category for q in questions if q.id in scored and counts(benchmark, q, config.objective)}
            if not scored:
                raise ConfigError(f"objective: {config.objective!r} needs {NEEDS[config.objective]}, but no scored "
                                  f"question of {config.benchmark} has them; use objective: accuracy")
        secondary = config.acceptance.secondary
        if secondary == config.objective:
            raise ConfigError(f"acceptance.secondary: {secondary!r} is the objective itself; name another outcome "
                              f"({', '.join(o for o in OBJECTIVES if o != secondary)}) or leave it out")
        if secondary not in (None, "accuracy") and not any(counts(benchmark, q, secondary) for q in questions
                                                            if q.id in scored):
            raise ConfigError(f"acceptance.secondary: {secondary!r} needs {NEEDS[secondary]}, but no scored question "
                              f"of {config.benchmark} has them")
        roles = roles_config(config)
        try:
            restrict_dimensions(live_dimensions({r for r in ("extractor", "expander", "answerer")
                                                 if roles.role(r).backend == "llm"}), config.planner.paths)
        except ValueError as exc:
            raise ConfigError(f"planner.paths: {exc}") from None
        try:
            config.budget.check_models(roles)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        confirmation = config.night.confirmation
        confirmation_ids = (confirmation_split(scored, confirmation.share, confirmation.seed)
                            if confirmation is not None else [])
        if confirmation is not None and not confirmation_ids:
            raise ConfigError(f"night.confirmation: {config.benchmark} has {len(scored)} scored question(s), too few "
                              "to set any aside; leave the confirmation out")
        held = set(confirmation_ids)
        scored = {q: c for q, c in scored.items() if q not in held}
        probe_ids = stratified_probe(scored, min(config.probe_size, len(scored)), config.seed)
        return cls(config, baseline, benchmark, [q.id for q in questions if q.id not in held], scored, probe_ids,
                   roles, StoreLayout(config.stores), holdout_ids, holdout_bench, confirmation_ids, system=system,
                   sources=QuestionSources.of([q for q in benchmark.questions if q.id in scored or q.id in held]))

    @classmethod
    def for_run(cls, config: RunConfig, *, dry: bool = False) -> "RunSetup":
        """:meth:`prepare`, with the probes an LLM ``questioner`` role writes when one is configured (they join the
        deterministic ones wherever probes are generated: ``augment: probes``, or a benchmark with no labelled
        question; replies cached in the run's response cache). ``dry``: the role calls no endpoint and answers from
        that cache, so an estimate sees the questions the run saw."""
        roles = roles_config(config)
        if roles.role("questioner").backend != "llm":
            return cls.prepare(config)
        if not dry:
            check_reachable(roles)
        usage = UsageStats()
        questioner = build_llm_role("questioner", roles, ResponseCache(StoreLayout(config.stores).cache / "llm"),
                                    usage, dry=dry)
        setup = cls.prepare(config, questioner)
        log.info("questioner: %d probe questions written by %s (%d requests)",
                 sum(q.category == "probe_llm" for q in setup.benchmark.questions), questioner.client.model,
                 usage.get("questioner", "requests"))
        return setup

    @property
    def power(self) -> PowerCheck:
        """What the scored questions, the probe and the acceptance rules allow the run to conclude."""
        rules = self.config.acceptance
        return PowerCheck.of(len(self.scored), rules.alpha, len(self.probe_ids), self.config.probe_size,
                             rules.probe_delta, rules.require_significance)

    def dry_harness(self, observing: UsageStats | None = None, *, cache_dir: Path | None = None,
                    persist: bool = True, benchmark: Benchmark | None = None) -> Harness:
        """A harness whose LLM roles call no endpoint (see :class:`~evolve.llm.client.DryRun`), answering from the
        response cache in ``cache_dir`` (default: the run's). Its ingestion cache is the run's when ingestion is
        deterministic and ``persist`` is set, else its own in memory (dry extraction yields no facts)."""
        roles = build_backends(self.roles, self.config.judge_threshold, cache_dir or self.layout.cache / "llm",
                               self.config.on_role_error, dry=True, dry_observing=observing).roles
        roles.runtime = self.system
        shared = persist and roles.extractor is None
        cache = IngestionCache(self.layout.cache / "ingestion") if shared else IngestionCache()
        return Harness(benchmark or self.benchmark, roles, cache=cache,
                       include_adversarial=self.config.include_adversarial, progress=False)

    def _executor(self, benchmark: Benchmark, backends: Backends, cache: IngestionCache):
        """Ray actors for ``executor: {kind: ray}`` (connecting now, so a bad address fails before the stores)."""
        ex = self.config.executor
        if ex.kind != "ray":
            return None
        from evolve.observe.ray_pool import ExecutorError, RayPool

        try:
            return RayPool(benchmark, backends.roles, cache, self.config.include_adversarial,
                           num_workers=ex.num_workers, address=ex.address, max_retries=ex.max_retries)
        except ExecutorError as exc:
            raise ConfigError(str(exc)) from None

    def harness(self, progress: bool | None = None, new_rules: str | None = None) -> tuple[
            Harness | BudgetedHarness, Harness | BudgetedHarness | None, Backends, dict]:
        """The run's harness and its holdout's (``None`` without a holdout; each behind the budget when one is set
        and a role calls an LLM), the backends and the harness identity recorded in the stores, decision rules
        included; refuses stores built on another harness, stores made under other rules unless ``new_rules`` says
        why they change (the change is then :attr:`rules_change`), and unreachable endpoints."""
        check_reachable(self.roles)
        backends = build_backends(self.roles, self.config.judge_threshold, self.layout.cache / "llm",
                                  self.config.on_role_error)
        backends.roles.runtime = self.system
        harness_id = {"benchmark": self.config.benchmark, "benchmark_hash": self.benchmark.content_hash(),
                      "judge": backends.roles.judge.name, "n_questions": len(self.question_ids),
                      "schema_hash": schema_hash(), "objective": self.config.objective,
                      "holdout": self.config.holdout.describe() if self.config.holdout else None,
                      **({"confirmation": self.config.night.confirmation.model_dump()}
                         if self.config.night.confirmation else {}),
                      "rules": rules_of(self.config.acceptance, self.config.cost)}
        check_harness(self.layout, harness_id)
        if self.system is not None:  # show, report, promote and rollback read the stores' strategies under it
            self.layout.root.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.layout.knob_schema, {"adapter": self.system.adapter, "schema": self.system.schema})
        self.rules_change = check_rules(self.layout, harness_id["rules"], new_rules)
        cache = IngestionCache(self.layout.cache / "ingestion")
        budget = (Budget(self.config.budget, self.roles, backends.usage)
                  if self.config.budget.limited and backends.usage is not None else None)

        def build(benchmark: Benchmark) -> Harness | BudgetedHarness:
            harness = Harness(benchmark, backends.roles, cache=cache, include_adversarial=self.config.include_adversarial,
                              progress=progress, workers=self.config.workers,
                              executor=self._executor(benchmark, backends, cache))
            if budget is None:
                return harness
            return BudgetedHarness(harness, self.dry_harness(backends.usage, benchmark=benchmark), budget)

        main = build(self.benchmark)
        if self.holdout_benchmark is None:
            return main, None, backends, harness_id
        return main, main if self.holdout_benchmark is self.benchmark else build(self.holdout_benchmark), \
            backends, harness_id
