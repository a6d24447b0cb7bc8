"""The Observe–Improve–Verify engine: the order of a round, and nothing else.

One round evaluates the current strategy (observe), turns its traces into a digest and directions (improve),
verifies candidates one by one (:mod:`evolve.loop.candidate`), applies the best accepted one, learns from every
screened one (:mod:`evolve.loop.learning`), checks the best-ever checkpoint (:mod:`evolve.loop.bestever`) and
commits everything as one write-ahead round (:mod:`evolve.loop.commit`), then tracks it in MLflow.
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import replace

from evolve.canonical import canonical_hash
from evolve.improve.digest import digest
from evolve.improve.effects import DimensionEffects
from evolve.improve.evolver import Evolver, check_storage
from evolve.improve.hypotheses import HypothesisTree
from evolve.improve.planner import Planner, load_bundles
from evolve.improve.proposer import RoundPlan
from evolve.improve.reviewed import confirmed_labels, relabel
from evolve.llm import CriticAdvisor, PlannerAdvisor
from evolve.loop.bestever import best_ever
from evolve.loop.candidate import CandidateResult, CandidateVerifier, Screen, policies_met
from evolve.loop.budget import BudgetExhausted
from evolve.loop.commit import RoundOutcome, escalations, fill_bundle, round_summary
from evolve.loop.config import ConfigError, RunConfig
from evolve.loop.family import decide_family
from evolve.loop.holdout import Holdout
from evolve.loop.learning import learn, merged, relieved, runners_up
from evolve.loop.monitor import SliceCheck, check_at_acceptance, check_later, monitored_slices
from evolve.loop.night import EndReason, NightRecord, NightState
from evolve.state.record import CandidateRecord
from evolve.loop.tracking import Tracker, track_round
from evolve.loop.setup import RunSetup
from evolve.observe.harness import EvalRun
from evolve.observe.objective import LABEL, SCORE_FIELD, failure_view
from evolve.runtime.usage import RequestLimitReached
from evolve.state.records import load_record
from evolve.state.stores import RoundBundle, StoreSet
from evolve.strategy.artifact import policy_hash, strategy_hash
from evolve.strategy.diff import effective_diff
from evolve.verify.confirmation import confirm
from evolve.strategy.schema import live_dimensions, restrict_dimensions
from evolve.verify.confabulation import safe_rate
from evolve.verify.critic import Critic, DeterministicCritic
from evolve.verify.dossier import paired as compare_outcomes

log = logging.getLogger(__name__)


class Engine:
    """Runs rounds against one harness and one stores directory (locked for the engine's lifetime)."""

    def __init__(self, config: RunConfig, *, track: bool = True, progress: bool | None = None,
                 new_rules: str | None = None):
        self.config = config
        self.rules = config.acceptance
        # All input is validated before the stores are opened, so bad input never touches them.
        setup = RunSetup.for_run(config)
        self.baseline, self.question_ids = setup.baseline, setup.question_ids
        self.power = setup.power
        self.confirmation_ids = setup.confirmation_ids
        #: The end of the night this engine's last run closed (``None``: the night is still open).
        self.night_record: NightRecord | None = None
        self._night_clock = time.perf_counter()
        self.night_minutes = 0.0  # wall time of the night this engine ran, up to its latest round
        self.sources = setup.sources
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.rounds_run = 0  # set by run()
        self.harness, holdout_harness, backends, self.harness_id = setup.harness(progress, new_rules)
        self.holdout = (Holdout(holdout_harness, setup.holdout_ids, config.objective, self.rules, seed=config.seed)
                        if holdout_harness is not None else None)
        self.tracker = Tracker(config.tracking_uri, config.experiment) if track else None
        #: MLflow run id of each round this engine tracked, by round.
        self.tracked_runs: dict[int, str] = {}
        if config.optuna_storage:
            try:
                check_storage(config.optuna_storage)
            except ValueError as exc:
                raise ConfigError(f"optuna_storage: {exc}") from None
        self.stores = StoreSet(config.stores)
        if not self.stores.recovery.clean:
            log.warning("recovered stores: %s", self.stores.recovery.to_payload())
        if setup.rules_change is not None:  # journaled with the stores' new rules before any round runs under them
            entry = self.stores.append_journal("RULES", setup.rules_change.payload(), state={"harness": self.harness_id})
            log.warning("decision rules changed (journal entry %d RULES): %s", entry["index"], setup.rules_change.reason)
        self.llm_stats = backends.usage
        self.effects = DimensionEffects.from_dict(self.stores.read_doc("dimension_effects", {}))
        self.tree = HypothesisTree.from_dict(self.stores.read_doc("hypothesis_tree", None) or
                                             HypothesisTree(c0=config.planner.exploration).to_dict())
        self.planner = Planner(load_bundles(), self.effects, self.tree, use_tree=config.planner.use_tree,
                               cost_violation=config.cost.violation if config.cost.active else None,
                               max_words=config.cost.max_context_words,
                               dims=restrict_dimensions(live_dimensions(backends.roles.model_roles()),
                                                        config.planner.paths))
        self.advisor = (PlannerAdvisor(backends.planner, self.effects, self.planner.dims)
                        if backends.planner else None)
        self.proposer = RoundPlan(self.planner, self.advisor, config.planner.max_directions)
        self.evolver = Evolver(config.optuna_storage or f"sqlite:///{self.stores.optuna_path}", config.seed,
                               namespace=self._study_namespace() if config.optuna_storage else "")
        # Telling after the commit (evolve.improve.evolver): results a crashed process committed but never told.
        self.evolver.apply_pending(self.stores.state.get("optuna_pending", []))
        critic: Critic = CriticAdvisor(backends.critic) if backends.critic else DeterministicCritic()
        self.verifier = CandidateVerifier(self.harness, self.evolver, critic, self.effects, self.tree, self.rules,
                                          question_ids=self.question_ids, probe_ids=setup.probe_ids,
                                          harness_id=self.harness_id, max_reverts=config.max_reverts,
                                          seed=config.seed, objective=config.objective, cost=config.cost,
                                          holdout=self.holdout)
        self._current_run: EvalRun | None = None

    # ------------------------------------------------------------------ public

    def run(self, rounds: int | None = None) -> dict:
        """Run ``rounds`` more rounds (default: until the config's round count is reached) and summarise. A budget
        that the next evaluation would exceed stops the run between rounds: the round in progress is not committed,
        the stop is journaled (BUDGET_STOP) with its figures, and the next run starts that round again. The power
        check's warnings (the benchmark can never yield an accept) are logged before the first round (on a fresh
        run, with the baseline's failing questions from the round-1 observation) and land in the summary under
        ``power``; :attr:`rounds_run` says how many rounds this call committed."""
        try:
            target = max(0, rounds if rounds is not None else self.config.rounds - self.stores.last_committed_round)
            first = self.stores.last_committed_round
            stop: dict | None = None
            try:
                current = self.current_strategy()
                if target and strategy_hash(current) == strategy_hash(self.baseline):  # observed in round 1 anyway
                    self._count_failing(self._evaluate_current(current, desc=f"round {first + 1} observe"))
                for warning in self.power.warnings():
                    log.warning("warning: %s", warning)
                self._night_clock = time.perf_counter()
                for i in range(target):
                    self._say(f"round {self.stores.last_committed_round + 1} ({i + 1} of at most {target} in this "
                              "run): observing the current strategy")
                    self.round(self.stores.last_committed_round + 1, last=i == target - 1)
                    if self.night_record is not None:
                        break
            except (BudgetExhausted, RequestLimitReached) as exc:
                stop = {"round": self.stores.last_committed_round + 1, **exc.figures()}
                entry = self.stores.append_journal("BUDGET_STOP", stop)
                stop["journal_index"] = entry["index"]
                log.warning("%s; stopped before round %d (not committed); the next run starts it again",
                            exc, stop["round"])
            self.rounds_run = self.stores.last_committed_round - first
            return {**self.summary(), "budget_stop": stop}
        finally:
            self.harness.close()
            if self.holdout is not None and self.holdout.harness is not self.harness:
                self.holdout.harness.close()
            self.stores.close()

    def summary(self) -> dict:
        """Current vs. baseline on a paired test, plus the best-ever checkpoint. When the budget cannot pay for the
        two evaluations, the comparison is left out and says why."""
        current = self.current_strategy()
        objective = self.config.objective
        best = self.stores.checkpoint.load()
        out = {
            "rounds": self.stores.last_committed_round,
            "objective": objective,
            "baseline": {"hash": strategy_hash(self.baseline)},
            "current": {"hash": strategy_hash(current), "path": str(self.stores.strategy_path(strategy_hash(current)))},
            "best": {"hash": best.strategy_hash, "score": best.score, "round": best.round} if best else None,
            "current_vs_baseline": None,
            "decisions": self._decision_counts(),
            "night": self._last_night(),
        }
        try:
            base_run = self.harness.evaluate(self.baseline, self.question_ids, desc="baseline")
            cur_run = self._evaluate_current(current)
        except (BudgetExhausted, RequestLimitReached) as exc:
            out["current_vs_baseline"] = {"skipped": str(exc)}
        else:
            paired = compare_outcomes(base_run.outcomes(objective), cur_run.outcomes(objective), self.rules,
                                      self.config.seed)
            self._count_failing(base_run)
            out["baseline"].update(_headline(base_run, objective))
            out["current"].update(_headline(cur_run, objective))
            out["current_vs_baseline"] = {**paired.brief().to_dict(), "improved": len(paired.improved),
                                          "regressed": len(paired.regressed),
                                          "per_category": _per_category(paired.per_category, objective)}
            if self.holdout is not None:
                out["holdout"] = {"questions": len(self.holdout.question_ids),
                                  **self.holdout.compare(self.baseline, current).to_dict()}
        out["llm"] = self.llm_stats.by_role() if self.llm_stats else {}
        out["power"] = self.power.to_dict()
        out["questions"] = self.sources.to_dict() if self.sources else None
        out["tracking"] = ({"uri": self.tracker.uri, "experiment": self.config.experiment,
                            "runs": {str(n): run_id for n, run_id in sorted(self.tracked_runs.items())}}
                           if self.tracker else None)
        return out

    def current_strategy(self) -> dict:
        digest_ = self.stores.current_strategy
        return self.stores.get_strategy(digest_) if digest_ else self.baseline

    # ------------------------------------------------------------------ one round

    def round(self, n: int, *, last: bool = False) -> dict:
        """Run and commit round ``n``; ``last``: the run has no round after it, so the night ends with it."""
        started = time.perf_counter()
        self.evolver.begin_round(n, self.stores.state.get("optuna_pending", []))
        current = self.current_strategy()
        cur_run = self._evaluate_current(current, desc=f"round {n} observe")
        view, reviewed = relabel(failure_view(cur_run.traces, self.config.objective),
                                 confirmed_labels(self.stores.journal.typed_entries()))
        dg = digest(view)
        if reviewed.applied:
            self._say(f"round {n}: {len(reviewed.applied)} failure root cause(s) from reviewers' labels "
                      f"({reviewed.corrected} corrected the ladder)")
        budget = self.config.candidates_per_round
        history = [load_record(r) for r in self.stores.read_jsonl("candidate_outcomes")]
        directions = self.proposer.plan(dg, current, budget, words=cur_run.summary.context_words["mean"],
                                        carried=runners_up(history, n - 1, current))
        score = cur_run.score(self.config.objective)
        self._say(f"round {n}: current {LABEL[self.config.objective]} "
                  f"{'-' if score is None else f'{score:.3f}'}; verifying up to {budget} candidate(s)")
        results = self._verify(n, current, cur_run, history)

        winner = max((r for r in results if r.accepted), key=lambda r: r.record.delta, default=None)
        for r in results:
            r.record.applied = r is winner
        new_current, new_run = (winner.strategy, winner.run) if winner else (current, cur_run)
        pending = learn(results, self.effects, self.tree)

        bundle = RoundBundle()
        prior = self.stores.checkpoint.load()
        best = best_ever(prior, n, new_current, new_run.score(self.config.objective),
                         self.rules.restore_threshold, self.harness_id)
        best.apply(bundle)
        if best.restore is not None:
            new_current = best.restore.strategy
            new_run = self.harness.evaluate(new_current, self.question_ids, desc=f"round {n} restore")
        outcome = RoundOutcome(n, current, cur_run, new_current, new_run, dg, directions,
                               self.advisor.notes if self.advisor else [], results, winner, best.restore,
                               *self._holdout_scores(new_current, best.checkpoint["strategy"] if best.checkpoint
                                                     else prior.strategy if prior else new_current),
                               monitor=self._monitor(n, history, current, cur_run, winner), reviewed=reviewed)
        night = self._night(n, current).after_round(winner is not None,
                                                    sum(r.record.paired is not None for r in results))
        ended = night.ends(self.config.night, minutes=(time.perf_counter() - self._night_clock) / 60, last=last)
        record = None
        if ended is not None:
            record, restored = self._end_night(night, ended, n, current, cur_run, new_current, new_run)
            if restored is not None:
                new_current, new_run = restored
                outcome = replace(outcome, new=new_current, new_run=new_run,
                                  holdout_score=self.holdout.score(new_current) if self.holdout else None)
                bundle.checkpoint = {"strategy": new_current, "score": new_run.score(self.config.objective),
                                     "meta": {"round": n, **self.harness_id, "policy_hash": policy_hash(new_current),
                                              "night_refused": record.final}}
        fill_bundle(bundle, outcome, self.stores, baseline=self.baseline, harness_id=self.harness_id,
                    docs={"dimension_effects": self.effects.to_dict(), "hypothesis_tree": self.tree.to_dict()},
                    escalations=escalations(self.stores.read_doc("escalations", {"blocked": {}, "escalated": []}),
                                            n, current, results, self.tree, self.config.escalation_threshold),
                    restore_threshold=self.rules.restore_threshold)
        bundle.state["night"] = None if record is not None else night.model_dump()
        if record is not None:
            bundle.journal.append(("NIGHT", record.model_dump()))
        bundle.state["optuna_pending"] = pending  # telling after the commit (evolve.improve.evolver)
        self.stores.commit_round(n, bundle)
        self.evolver.apply_pending(pending)
        self._current_run = new_run
        self.night_record = record
        self.night_minutes = (time.perf_counter() - self._night_clock) / 60
        summary = round_summary(outcome, time.perf_counter() - started)
        if record is not None:
            summary["night"] = record.model_dump()
        if self.tracker:
            self._track(summary, outcome)
        self._say(f"round {n} committed in {time.perf_counter() - started:.1f}s: "
                  + (f"applied {winner.record.candidate_id}" if winner else "no candidate applied")
                  + (" (best-ever restored)" if best.restore is not None else ""))
        return summary

    def _track(self, summary: dict, outcome: RoundOutcome) -> None:
        """Track the committed round; if the tracking store fails now, the round stays committed and a FLAG entry
        records that it is untracked (and why), so the summary is not lost."""
        try:
            self.tracked_runs[outcome.round] = track_round(self.tracker, self.stores, self.config, summary, outcome,
                                                           self.llm_stats)
        except Exception as exc:  # MLflow, SQLAlchemy and OS errors alike
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            entry = self.stores.append_journal("FLAG", {"what": "untracked_round", "round": outcome.round,
                                                        "tracking_uri": self.tracker.uri, "error": reason[:500]})
            summary["untracked"] = {"reason": reason[:500], "journal_index": entry["index"]}
            log.warning("round %d is committed but not tracked at %s: %s (journal entry %d FLAG)", outcome.round,
                        self.tracker.uri, reason, entry["index"])

    def _verify(self, n: int, current: dict, cur_run: EvalRun, history: list[CandidateRecord]) -> list[CandidateResult]:
        """Verify the round plan's directions in its order until the round's evaluation budget is spent. Gates are
        cheap screens: candidates they refuse are recorded but do not use an evaluation slot; a candidate that reached
        the probe used one, whether the probe, the critic (which reads the probe) or the comparison decided. After each
        candidate the plan is offered its follow-ups: the merge of the accepts so far
        (:func:`~evolve.loop.learning.merged`) and, for a gain the cost rule blocked, the move joined with a
        context-shrinking one (:func:`~evolve.loop.learning.relieved`). Last, the fully compared candidates are
        decided again with their p adjusted over the round (:mod:`evolve.loop.family`)."""
        screen = Screen(current, cur_run, policies_met(history),
                        [r.change_keys for r in history if r.screened and r.step_outcome is None][-10:])
        results: list[CandidateResult] = []
        while (sum(r.record.screened for r in results) < self.config.candidates_per_round
               and (direction := self.proposer.next()) is not None):
            res = self.verifier.verify(f"r{n:03d}-c{len(results):02d}", n, direction, screen)
            self._say(_candidate_line(res))
            # a policy met before comes back only as the novelty gate's refusal: the first meeting stays
            screen.seen.setdefault(res.record.policy_hash, res.record.met)
            relief = relieved(res, self.planner.table.relief, self.effects, current, self.config.cost)
            # accepted / inert moves may grow; a gain the cost rule blocked may come back smaller (its relief)
            if res.record.screened and res.record.step_outcome is None and relief is None:
                screen.recent.append(res.record.change_keys)
            results.append(res)
            self.proposer.follow_up(relief=relief,
                                    merge=merged(results, current))
        for res in decide_family(results, self.rules, self.config.cost):
            self._say(f"{_candidate_line(res)} after the round's multiple-testing adjustment")
        return results

    # ------------------------------------------------------------------ the night

    def _last_night(self) -> dict | None:
        """The stores' latest ended night (journal entry ``NIGHT``), with its wall time when this engine ran it."""
        entry = next((e for e in reversed(self.stores.journal.typed_entries()) if e.type == "NIGHT"), None)
        if entry is None:
            return None
        ran = self.night_record is not None and self.night_record == entry.payload
        return {**entry.payload.model_dump(), **({"minutes": round(self.night_minutes, 2)} if ran else {})}

    def _night(self, n: int, current: dict) -> NightState:
        """The open night (kept in the stores since its last round), or a new one starting with round ``n``."""
        kept = self.stores.state.get("night")
        return NightState.model_validate(kept) if kept else NightState(start=strategy_hash(current), first_round=n)

    def _end_night(self, night: NightState, ended: EndReason, n: int, current: dict, current_run: EvalRun,
                   final: dict, final_run: EvalRun) -> tuple[NightRecord, tuple[dict, EvalRun] | None]:
        """The record of a night ending with round ``n`` (which started from ``current``) on ``final`` (each with its
        run on the search questions), and, when its confirmation refuses the final, the night's start with its
        evaluation on the search questions (to restore: the round's when the night started on ``current``)."""
        if strategy_hash(current) == night.start:
            start, start_run = current, current_run
        else:
            start, start_run = self.stores.get_strategy(night.start), None
        spec, verdict = self.config.night.confirmation, None
        if spec is not None and strategy_hash(final) != night.start:
            self._say(f"night: confirming the final against the night's start on {len(self.confirmation_ids)} "
                      "held-back questions")
            runs = [self.harness.evaluate(s, self.confirmation_ids, desc=f"round {n} confirmation")
                    for s in (start, final)]
            # the word cap is read where every candidate of the night was held to it, on the search's questions: the
            # confirmation's share is a second sample of the same benchmark, a word or two away, and its questions
            # decide the gain, not the cost. The start's words need its packed contexts only, not its answers.
            packed = start_run or self.harness.evaluate(start, self.question_ids, desc=f"round {n} night start",
                                                        answer=False)
            words = tuple(r.summary.context_words["mean"] for r in (packed, final_run))
            verdict = confirm(*(r.outcomes(self.config.objective) for r in runs), alpha=spec.alpha,
                              start_hash=night.start, final_hash=strategy_hash(final), words=words,
                              max_words=self.config.cost.max_context_words, floors=self.rules)
            self._say(f"night: {verdict.verdict}: {verdict.reason}")
        refused = verdict is not None and verdict.verdict == "REFUSED"
        record = NightRecord(ended=ended, first_round=night.first_round, last_round=n, rounds=night.rounds,
                             evaluations=night.evaluations, start=night.start,
                             final=strategy_hash(final), diff=effective_diff(start, final), confirmation=verdict,
                             restored=night.start if refused else None)
        if not refused:
            return record, None
        return record, (start, start_run or self.harness.evaluate(start, self.question_ids,
                                                                   desc=f"round {n} restore start"))

    # ------------------------------------------------------------------ helpers

    def _count_failing(self, baseline_run: EvalRun) -> None:
        """Complete the power check with the baseline's failing questions under the objective."""
        outcomes = baseline_run.outcomes(self.config.objective)
        self.power = replace(self.power, failing=sum(not o["correct"] for o in outcomes.values()),
                             observed=len(outcomes))

    def _say(self, line: str) -> None:
        """A progress line on stderr, when progress is shown (by default: stderr is a terminal)."""
        if self.progress:
            print(line, file=sys.stderr, flush=True)

    def _study_namespace(self) -> str:
        """Names this stores directory's Optuna studies on a shared database: the stores path and the harness."""
        return canonical_hash({"stores": str(self.stores.root.resolve()), "harness": self.harness_id})[:16]

    def _holdout_scores(self, current: dict, best: dict) -> tuple[float | None, float | None]:
        """The current and the best-ever strategy on the holdout (``None`` without one)."""
        if self.holdout is None:
            return None, None
        return self.holdout.score(current), self.holdout.score(best)

    def _monitor(self, n: int, history: list[CandidateRecord], current: dict, cur_run: EvalRun,
                 winner: CandidateResult | None) -> tuple[SliceCheck, ...]:
        """Round ``n``'s checks of the slices earlier accepts are monitored on (the current strategy on the dev and
        held-out questions), and of the winner's own monitored slices on the holdout."""
        objective = self.config.objective
        watched = any(monitored_slices(r, self.rules) for r in history)
        held = self.holdout.run(current).outcomes(objective) if watched and self.holdout is not None else None
        checks = check_later(history, n, self.rules, cur_run.outcomes(objective), held) if watched else []
        if winner is not None:
            checks += check_at_acceptance(winner.record, self.rules)
        for c in checks:
            if c.regressed:
                log.warning("monitored slice %s of %s regressed on %s: %.3f -> %.3f (epsilon %.3f)", c.category,
                            c.candidate_id, c.where, c.accepted_score, c.score, c.epsilon)
        return tuple(checks)

    def _evaluate_current(self, current: dict, desc: str = "current") -> EvalRun:
        if self._current_run is None or self._current_run.summary.strategy_hash != strategy_hash(current):
            self._current_run = self.harness.evaluate(current, self.question_ids, desc=desc)
        return self._current_run

    def _decision_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in map(load_record, self.stores.read_jsonl("candidate_outcomes")):
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        return counts


def _candidate_line(res: CandidateResult) -> str:
    """One candidate's progress line: its verdict, the stage that decided it and its gain."""
    r = res.record
    delta = f", delta {r.delta:+.4f}" if r.paired else ""
    return f"  candidate {r.candidate_id} {r.direction['key']}: {r.verdict} (decided by {r.decided_by}{delta})"


def _per_category(rows: dict[str, dict], objective: str) -> dict[str, dict]:
    """A paired report's per-category rows with the objective's score names (``accuracy_baseline``,
    ``all_evidence_packed_candidate``, ...) instead of the report's generic ``acc_*``."""
    field = SCORE_FIELD[objective]
    return {c: {"n": r["n"], f"{field}_baseline": r["acc_baseline"], f"{field}_candidate": r["acc_candidate"],
                "delta": r["delta"]} for c, r in rows.items()}


def _headline(run: EvalRun, objective: str) -> dict:
    """A run's objective score and the figures every summary reports whatever the objective."""
    m = run.summary
    return {"score": run.score(objective), "accuracy": m.accuracy, "evidence_share": m.evidence_share,
            "all_evidence_packed": m.all_evidence_packed, "answer_in_evidence": m.answer_in_evidence,
            "answer_anywhere": m.answer_anywhere, "context_words": m.context_words,
            "answers": m.answers, "safe_rate": safe_rate(m.answers), "confabulation": m.confabulation}
