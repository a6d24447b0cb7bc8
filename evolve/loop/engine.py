"""The Observe–Improve–Verify engine: one round evaluates the current strategy, plans and screens
candidates, compares them paired by question id, decides, and commits everything in one write-ahead round.

Data flows one way: harness → traces → digest → planner → evolver → gates → critic → probe → paired
statistics → decision → stores (+ MLflow). The framework (schema, harness, judge, rules) is fixed for a run.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from evolve.benchmarks import load_benchmark, select_questions
from evolve.state.checkpoint import CheckpointRecord
from evolve.loop.config import RunConfig
from evolve.verify.critic import CriticPacket, CriticReview, DeterministicCritic, fixing_groups
from evolve.verify.decision import Decision, Verdict, decide, probe_screen
from evolve.strategy.diff import diff_strategies
from evolve.improve.digest import Digest, digest
from evolve.improve.effects import DimensionEffects
from evolve.improve.evolver import Evolver, EvolverError, Proposal
from evolve.verify.gates import GateContext, change_keys, run_gates, strategy_diff
from evolve.observe.harness import EvalRun, Harness
from evolve.improve.hypotheses import HypothesisTree, reward_of
from evolve.improve.planner import Direction, Planner, load_bundles
from evolve.verify.probe import stratified_probe
from evolve.loop.backends import build_roles, roles_config
from evolve.llm import check_reachable
from evolve.runtime import IngestionCache
from evolve.verify.statistics import paired_comparison
from evolve.state.files import canonical_hash
from evolve.state.stores import RoundBundle, StoreSet
from evolve.strategy.artifact import (derive, evolvable_dimensions, get_path, load_strategy, policy_hash, schema_hash,
                             strategy_hash)
from evolve.loop.tracking import Tracker

log = logging.getLogger(__name__)
#: Improved / regressed questions kept per candidate record for review.
EXAMPLES_PER_SIDE = 25


@dataclass
class CandidateResult:
    """Everything recorded about one candidate; ``record`` is what lands in ``candidate_outcomes``."""

    record: dict
    strategy: dict
    proposal: Proposal | None
    run: EvalRun | None = None
    decision: Decision | None = None

    @property
    def delta(self) -> float:
        return (self.record.get("paired") or {}).get("delta") or 0.0


class Engine:
    """Runs rounds against one harness and one stores directory (locked for the engine's lifetime)."""

    def __init__(self, config: RunConfig, *, track: bool = True, progress: bool | None = None):
        self.config = config
        self.rules = config.acceptance
        # All input is validated before the stores are opened, so bad input never touches them.
        self.baseline = load_strategy(config.strategy)
        benchmark = load_benchmark(config.benchmark)
        for warning in benchmark.warnings:
            log.warning("benchmark: %s", warning)
        questions = select_questions(benchmark, config.benchmark, config.limit, config.include_adversarial)
        roles_cfg = roles_config(config)
        check_reachable(roles_cfg)
        self.stores = StoreSet(config.stores)
        if not self.stores.recovery.clean:
            log.warning("recovered stores: %s", self.stores.recovery.to_payload())
        self.roles, self.llm_stats, self.llm_advisors = build_roles(roles_cfg, config.judge_threshold,
                                                                    self.stores.cache_dir / "llm", config.on_role_error)
        self.harness = Harness(benchmark, self.roles, cache=IngestionCache(self.stores.cache_dir / "ingestion"),
                               include_adversarial=config.include_adversarial, progress=progress,
                               workers=config.workers)
        self.question_ids = [q.id for q in questions]
        scored = {q.id: q.category for q in questions if config.include_adversarial or q.category != "adversarial"}
        self.probe_ids = stratified_probe(scored, min(config.probe_size, len(scored)), config.seed)
        self.harness_id = {"benchmark": config.benchmark, "benchmark_hash": benchmark.content_hash(),
                           "judge": self.roles.judge.name, "n_questions": len(self.question_ids),
                           "schema_hash": schema_hash()}
        self.effects = DimensionEffects.from_dict(self.stores.read_doc("dimension_effects", {}))
        self.tree = HypothesisTree.from_dict(self.stores.read_doc("hypothesis_tree", None) or
                                             HypothesisTree(c0=config.planner.exploration).to_dict())
        self.planner = Planner(load_bundles(), self.effects, self.tree, use_tree=config.planner.use_tree)
        self.evolver = Evolver(f"sqlite:///{self.stores.optuna_path}", config.seed)
        # Results committed by a round whose process died before telling Optuna are in state.json: tell them now.
        self.evolver.apply_pending(self.stores.state.get("optuna_pending", []))
        self.critic = DeterministicCritic()
        self.tracker = Tracker(config.tracking_uri, config.experiment) if track else None
        self._current_run: EvalRun | None = None

    # ------------------------------------------------------------------ public

    def run(self, rounds: int | None = None) -> dict:
        """Run ``rounds`` more rounds (default: until the config's round count is reached) and summarise."""
        try:
            target = rounds if rounds is not None else self.config.rounds - self.stores.last_committed_round
            for _ in range(max(0, target)):
                self.round(self.stores.last_committed_round + 1)
            return self.summary()
        finally:
            self.harness.close()
            self.stores.close()

    def summary(self) -> dict:
        """Current vs. baseline on a paired test, plus the best-ever checkpoint."""
        current = self.current_strategy()
        base_run = self.harness.evaluate(self.baseline, self.question_ids, desc="baseline")
        cur_run = self._evaluate_current(current)
        paired = paired_comparison(base_run.outcomes(), cur_run.outcomes(), alpha=self.rules.alpha,
                                   seed=self.config.seed)
        best = self.stores.checkpoint.load()
        return {
            "rounds": self.stores.last_committed_round,
            "baseline": {"hash": strategy_hash(self.baseline), "accuracy": base_run.summary["accuracy"]},
            "current": {"hash": strategy_hash(current), "accuracy": cur_run.summary["accuracy"],
                        "path": str(self.stores.strategy_path(strategy_hash(current)))},
            "best": {"hash": best.strategy_hash, "score": best.score, "round": best.round} if best else None,
            "current_vs_baseline": {k: paired.to_dict()[k] for k in
                                    ("n", "delta", "mcnemar_p", "ci_low", "ci_high", "per_category")},
            "decisions": self._decision_counts(),
        }

    def current_strategy(self) -> dict:
        digest_ = self.stores.current_strategy
        return self.stores.get_strategy(digest_) if digest_ else self.baseline

    # ------------------------------------------------------------------ one round

    def round(self, n: int) -> dict:
        started = time.perf_counter()
        self.evolver.begin_round(n, self.stores.state.get("optuna_pending", []))
        current = self.current_strategy()
        cur_run = self._evaluate_current(current, desc=f"round {n} observe")
        dg = digest(cur_run.traces)
        budget = self.config.candidates_per_round
        directions = self.planner.plan(dg, current, max(self.config.planner.max_directions, 3 * budget))
        self._planner_notes: list[str] = []
        if "planner" in self.llm_advisors:
            llm_directions = self._llm_directions(dg, current, budget)
            directions = llm_directions + [d for d in directions if d.key not in {x.key for x in llm_directions}]
        history = self.stores.read_jsonl("candidate_outcomes")
        evaluated = {r["policy_hash"] for r in history} | {policy_hash(current)}
        recent: list[list[str]] = [r["change_keys"] for r in history if r.get("probe")][-10:]

        # Gates and critic are cheap screens: refused candidates are recorded but do not use an evaluation slot.
        results: list[CandidateResult] = []
        for i, direction in enumerate(directions):
            if sum(1 for r in results if r.record.get("probe")) >= budget:
                break
            res = self._candidate(n, i, direction, current, cur_run, dg, evaluated, recent)
            evaluated.add(res.record["policy_hash"])
            if res.record.get("probe"):
                recent.append(res.record["change_keys"])
            results.append(res)

        accepted = [r for r in results if r.decision and r.decision.changes_strategy]
        winner = max(accepted, key=lambda r: r.delta, default=None)
        for r in results:
            r.record["applied"] = r is winner
        new_current, new_run = (winner.strategy, winner.run) if winner else (current, cur_run)
        pending = self._learn(results, winner)

        bundle = RoundBundle()
        restored = self._best_ever(n, new_current, new_run, bundle)
        if restored is not None:
            new_current = restored.strategy
            new_run = self.harness.evaluate(new_current, self.question_ids, desc=f"round {n} restore")
        self._fill_bundle(bundle, n, current, cur_run, new_current, new_run, dg, directions, results, winner, restored)
        bundle.state["optuna_pending"] = pending  # told to Optuna after the commit, replayed on resume
        self.stores.commit_round(n, bundle)
        self.evolver.apply_pending(bundle.state["optuna_pending"])
        self._current_run = new_run
        round_summary = self._round_summary(n, current, new_current, cur_run, new_run, results, winner, restored,
                                            time.perf_counter() - started)
        if self.tracker:
            self._track(n, round_summary, results, new_run)
        return round_summary

    # ------------------------------------------------------------------ candidates

    def _candidate(self, n: int, i: int, direction: Direction, current: dict, cur_run: EvalRun, dg: Digest,
                   evaluated: set[str], recent: list[list[str]]) -> CandidateResult:
        cid = f"r{n:03d}-c{i:02d}"
        record: dict[str, Any] = {"key": cid, "candidate_id": cid, "round": n, "direction": direction.to_dict(),
                                  "symptom": direction.symptom_key, "parent_hash": strategy_hash(current),
                                  "harness": self.harness_id}
        try:
            proposal = self.evolver.propose(current, direction)
        except EvolverError as exc:
            record.update(policy_hash="", strategy_hash="", change_keys=[], diff={}, gates=None,
                          decided_by="planner", decision={"verdict": "REJECT", "reason": str(exc), "rule": "evolver"})
            return CandidateResult(record, current, None)
        candidate = derive(current, proposal.changes)
        diff = diff_strategies(current, candidate)
        record.update(strategy_hash=strategy_hash(candidate), policy_hash=policy_hash(candidate),
                      changes=proposal.changes, change_keys=change_keys(current, candidate), diff=diff.to_dict(),
                      diff_text=diff.render(), optuna={"study": proposal.study, "trial": proposal.trial_number})
        result = CandidateResult(record, candidate, proposal)

        trail = run_gates(candidate, current, GateContext(evaluated, self.effects.to_dict(), direction.symptom_key,
                                                          self.config.max_reverts))
        record["gates"] = trail.to_dict()
        if not trail.passed:
            return self._close(result, Decision(Verdict.REJECT, trail.results[-1].reason, f"gate:{trail.decided_by}"),
                               f"gate:{trail.decided_by}")

        root_cause, _, category = direction.symptom_key.partition("/")
        examples = [{"question_id": t["question_id"], "question": t["question"], "gold": t["gold_answer"],
                     "answer": t["answer"]} for t in cur_run.traces
                    if t["root_cause"] == root_cause and category in ("*", t["category"])][:3]
        packet = CriticPacket(strategy_diff(current, candidate), record["change_keys"], root_cause, category,
                              {k: self.effects.reputation(k) for k in record["change_keys"]}, None, examples,
                              recent[-10:])
        if "critic" in self.llm_advisors:
            verdict = self.llm_advisors["critic"].review(packet.to_dict())
            review = CriticReview(verdict.label, list(verdict.reasons))
        else:
            review = self.critic.review(packet)
        self.tree.record_critique(review.label == "actionable")
        record["critic"] = review.to_dict()
        if review.blocks:
            return self._close(result, Decision(Verdict.REJECT, "; ".join(review.reasons), "critic"), "critic")

        probe_run = self.harness.evaluate(candidate, self.probe_ids, desc=f"{cid} probe")
        probe_ids = set(self.probe_ids)
        base_probe = [t["correct"] for t in cur_run.traces if t["question_id"] in probe_ids]
        base_acc = sum(base_probe) / len(base_probe)
        cand_acc = probe_run.summary["accuracy"]
        screened = probe_screen(base_acc, cand_acc, self.rules)
        base_answers = {t["question_id"]: t["answer"] for t in cur_run.traces if t["question_id"] in probe_ids}
        changed = sum(t["answer"] != base_answers[t["question_id"]] for t in probe_run.traces)
        record["probe"] = {"n": len(self.probe_ids), "acc_baseline": base_acc, "acc_candidate": cand_acc,
                           "delta": cand_acc - base_acc, "answers_changed": changed}
        if screened is not None:
            return self._close(result, screened, "probe")
        if changed == 0:
            # The change did not alter a single probe answer: a full evaluation would be spent on noise.
            return self._close(result, Decision(Verdict.FEATURE_FLAG, "inert: no probe answer changed", "probe-inert"),
                               "probe")

        run = self.harness.evaluate(candidate, self.question_ids, desc=f"{cid} full")
        paired = paired_comparison(cur_run.outcomes(), run.outcomes(), alpha=self.rules.alpha, seed=self.config.seed)
        report = {"paired": paired.to_dict(), "dcr": run.summary["dcr@3"]}
        decision = decide(report, self.rules)
        result.run = run
        record.update(paired=report["paired"], dcr=report["dcr"], summary=_brief(run.summary),
                      examples=self._examples(paired.to_dict(), cur_run, run))
        return self._close(result, decision, "decision")

    def _llm_directions(self, dg: Digest, current: dict, budget: int) -> list[Direction]:
        """The LLM planner's proposals as directions (same gates and critic follow); dropped output is noted."""
        ranked = dg.ranked()
        result = self.llm_advisors["planner"].plan(dg.to_dict(), self.effects.to_dict(), self.planner.dims, budget)
        self._planner_notes = [f"llm planner dropped: {r}" for r in result.dropped_reasons]
        directions = []
        for rank, proposal in enumerate(result.proposals):
            group = self.planner.dims[proposal.path].group
            symptom = next((sy.key for sy in ranked if group in fixing_groups(sy.root_cause)),
                           ranked[0].key if ranked else "unresolved/*")
            _, direction = proposal.key.split("::", 1)
            directions.append(Direction(proposal.key, proposal.path, direction, symptom, 1.0 - 0.01 * rank,
                                        f"llm planner: {proposal.why}"))
        return directions

    def _close(self, result: CandidateResult, decision: Decision, decided_by: str) -> CandidateResult:
        result.decision = decision
        result.record["decision"] = decision.to_dict()
        result.record["decided_by"] = decided_by
        return result

    def _examples(self, paired: dict, base: EvalRun, cand: EvalRun) -> dict:
        b = {t["question_id"]: t for t in base.traces}
        c = {t["question_id"]: t for t in cand.traces}

        def row(qid: str) -> dict:
            return {"question_id": qid, "question": b[qid]["question"], "gold": b[qid]["gold_answer"],
                    "category": b[qid]["category"], "baseline_answer": b[qid]["answer"],
                    "candidate_answer": c[qid]["answer"], "baseline_root_cause": b[qid]["root_cause"],
                    "candidate_root_cause": c[qid]["root_cause"]}

        return {side: [row(q) for q in paired[side][:EXAMPLES_PER_SIDE]] for side in ("improved", "regressed")}

    # ------------------------------------------------------------------ learning and best-ever

    def _learn(self, results: list[CandidateResult], winner: CandidateResult | None) -> list[dict]:
        """Update dimension effects and the hypothesis tree; return the Optuna results to tell after commit."""
        pending = []
        for r in results:
            if r.proposal is None:
                continue
            evaluated = r.run is not None
            accepted = bool(r.decision and r.decision.changes_strategy)
            delta = r.delta if evaluated else (r.record.get("probe") or {}).get("delta", 0.0)
            if evaluated or r.record["decided_by"] == "probe":
                for key in r.record["change_keys"]:
                    self.effects.record(key, r.record["symptom"], accepted and r is winner, delta)
                    self.tree.update(key, reward_of(accepted and r is winner, delta), delta, accepted and r is winner,
                                     parent=r.record["symptom"])
                pending.append({"study": r.proposal.study, "trial": r.proposal.trial_number, "value": delta})
            else:
                pending.append({"study": r.proposal.study, "trial": r.proposal.trial_number, "value": None})
        return pending

    def _best_ever(self, n: int, strategy: dict, run: EvalRun, bundle: RoundBundle) -> CheckpointRecord | None:
        """Checkpoint a new best; return the best-ever record when the current score fell too far below it."""
        best = self.stores.checkpoint.load()
        score = run.summary["accuracy"]
        if best is not None and best.fallback_from:
            bundle.journal.append(("RESTORE", {"what": "checkpoint", "fallback_from": best.fallback_from,
                                               "refused": [list(r) for r in best.refused],
                                               "using": best.strategy_hash, "generation": best.generation}))
            if score <= best.score:  # re-save the intact generation so CURRENT points at a good checkpoint again
                bundle.checkpoint = {"strategy": best.strategy, "score": best.score, "meta": best.meta}
        if best is None or score > best.score:
            bundle.checkpoint = {"strategy": strategy, "score": score,
                                 "meta": {"round": n, **self.harness_id, "policy_hash": policy_hash(strategy)}}
            return None
        if score < best.score - self.rules.restore_threshold:
            return best
        return None

    # ------------------------------------------------------------------ commit

    def _fill_bundle(self, bundle: RoundBundle, n: int, current: dict, cur_run: EvalRun, new_current: dict,
                     new_run: EvalRun, dg: Digest, directions: list[Direction], results: list[CandidateResult],
                     winner: CandidateResult | None, restored: CheckpointRecord | None) -> None:
        cur_hash, new_hash = strategy_hash(current), strategy_hash(new_current)
        bundle.strategies = [current, new_current] + [r.strategy for r in results if r.proposal is not None]
        bundle.records["candidate_outcomes"] = [r.record for r in results]
        bundle.records["stage_audits"] = [
            {"key": f"{r.record['candidate_id']}:{stage}", "candidate_id": r.record["candidate_id"], "round": n,
             "stage": stage, "outcome": r.record.get(stage)}
            for r in results for stage in ("gates", "critic", "probe", "paired") if r.record.get(stage) is not None]
        bundle.records["diagnosis_log"] = [{
            "key": f"r{n:03d}", "round": n, "strategy_hash": cur_hash, "summary": _brief(cur_run.summary),
            "digest": dg.to_dict(), "directions": [d.to_dict() for d in directions], "planner_notes": self._planner_notes}]
        histories = self.stores.read_doc("question_histories", {})
        for t in new_run.traces:
            histories.setdefault(t["question_id"], []).append(
                {"round": n, "strategy_hash": new_hash, "correct": t["correct"], "root_cause": t["root_cause"]})
        scoreboard = self.stores.read_doc("scoreboard", {"rounds": []})
        best_score = max([bundle.checkpoint["score"]] if bundle.checkpoint else
                         [s["best_accuracy"] for s in scoreboard["rounds"]][-1:] or [new_run.summary["accuracy"]])
        scoreboard["rounds"].append({
            "round": n, "strategy_hash": new_hash, "accuracy": new_run.summary["accuracy"],
            "observed_accuracy": cur_run.summary["accuracy"], "best_accuracy": best_score,
            "root_causes": cur_run.summary["root_causes"], "dcr@3": cur_run.summary["dcr@3"],
            "accepted": winner.record["candidate_id"] if winner else None, "restored": restored is not None,
            "decisions": {r.record["candidate_id"]: r.record["decision"]["verdict"] for r in results}})
        bundle.docs = {"dimension_effects": self.effects.to_dict(), "hypothesis_tree": self.tree.to_dict(),
                       "question_histories": histories, "scoreboard": scoreboard,
                       "escalations": self._escalations(n, current, results)}
        for r in results:
            rec = r.record
            bundle.journal.append(("CANDIDATE", {"candidate_id": rec["candidate_id"], "strategy_hash": rec["strategy_hash"],
                                                 "parent_hash": cur_hash, "diff": rec["diff"],
                                                 "decided_by": rec["decided_by"]}))
            verdict = rec["decision"]["verdict"]
            kind = "ACCEPT" if verdict.startswith("ACCEPT") else ("FLAG" if verdict == "FEATURE_FLAG" else "REJECT")
            bundle.journal.append((kind, {"candidate_id": rec["candidate_id"], "strategy_hash": rec["strategy_hash"],
                                          "decision": rec["decision"], "applied": rec["applied"],
                                          "report_hash": _report_hash(rec), "restore_to": cur_hash}))
        if restored is not None:
            bundle.journal.append(("RESTORE", {"from": strategy_hash(winner.strategy if winner else current),
                                               "to": restored.strategy_hash, "best_score": restored.score,
                                               "score": new_run.summary["accuracy"], "why": "below best-ever by more "
                                               f"than {self.rules.restore_threshold:.3f}"}))
        for key in bundle.docs["escalations"].get("new", []):
            bundle.journal.append(("ESCALATE", {"key": key, **bundle.docs["escalations"]["blocked"][key]}))
        bundle.journal.append(("ROUND", {"round": n, "from": cur_hash, "to": new_hash,
                                         "accuracy": new_run.summary["accuracy"], "harness": self.harness_id,
                                         "accepted": winner.record["candidate_id"] if winner else None}))
        bundle.state = {"current_strategy": new_hash, "baseline_strategy": strategy_hash(self.baseline),
                        "harness": self.harness_id}

    def _escalations(self, n: int, current: dict, results: list[CandidateResult]) -> dict:
        """Count candidate classes blocked for needing a framework/schema change; escalate at the threshold."""
        doc = self.stores.read_doc("escalations", {"blocked": {}, "escalated": []})
        doc["new"] = []
        blocked_keys = [r.record["direction"]["key"] for r in results
                        if r.record["decided_by"] in ("planner", "gate:schema", "gate:ranges")]
        blocked_keys += [key for key in self.tree.exhausted() if at_schema_bound(current, key)]
        for key in dict.fromkeys(blocked_keys):
            entry = doc["blocked"].setdefault(key, {"count": 0, "rounds": []})
            if n not in entry["rounds"]:
                entry["count"] += 1
                entry["rounds"].append(n)
            if entry["count"] >= self.config.escalation_threshold and key not in doc["escalated"]:
                doc["escalated"].append(key)
                doc["new"].append(key)
        return doc

    # ------------------------------------------------------------------ helpers

    def _evaluate_current(self, current: dict, desc: str = "current") -> EvalRun:
        if self._current_run is None or self._current_run.summary["strategy_hash"] != strategy_hash(current):
            self._current_run = self.harness.evaluate(current, self.question_ids, desc=desc)
        return self._current_run

    def _decision_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.stores.read_jsonl("candidate_outcomes"):
            counts[r["decision"]["verdict"]] = counts.get(r["decision"]["verdict"], 0) + 1
        return counts

    def _round_summary(self, n, current, new_current, cur_run, new_run, results, winner, restored, wall) -> dict:
        return {"round": n, "from": strategy_hash(current)[:12], "to": strategy_hash(new_current)[:12],
                "accuracy_before": cur_run.summary["accuracy"], "accuracy_after": new_run.summary["accuracy"],
                "accepted": winner.record["candidate_id"] if winner else None, "restored": restored is not None,
                "candidates": [{"id": r.record["candidate_id"], "change": r.record["direction"]["key"],
                                "decided_by": r.record["decided_by"], "verdict": r.record["decision"]["verdict"],
                                "delta": (r.record.get("paired") or {}).get("delta")} for r in results],
                "wall_time_s": round(wall, 2)}

    def _track(self, n: int, summary: dict, results: list[CandidateResult], new_run: EvalRun) -> None:
        t = self.tracker
        run_id = t.start(f"round-{n:03d}", {"memevolve.round": str(n)})
        t.log(run_id, params={"stores": str(self.config.stores), "benchmark": self.config.benchmark,
                              "strategy_hash": strategy_hash(self.current_strategy())},
              metrics={**_metrics(new_run.summary), **(self.llm_stats.to_dict() if self.llm_stats else {})},
              tags={"accepted": summary["accepted"] or "none", "restored": summary["restored"]}, step=n)
        t.artifact(run_id, "round_summary.json", summary)
        for r in results:
            rec = r.record
            child = t.start(rec["candidate_id"], {"memevolve.decision": rec["decision"]["verdict"]}, parent_run_id=run_id)
            paired = rec.get("paired") or {}
            metrics = {**(_metrics(r.run.summary) if r.run else {}),
                       **{f"paired.{k}": paired.get(k) for k in ("delta", "mcnemar_p", "ci_low", "ci_high")},
                       **{f"paired.delta.{c}": v["delta"] for c, v in paired.get("per_category", {}).items()},
                       **{f"probe.{k}": v for k, v in (rec.get("probe") or {}).items()}}
            t.log(child, params=diff_strategies(self.stores.get_strategy(rec["parent_hash"]), r.strategy).params()
                  if rec["strategy_hash"] else {}, metrics=metrics,
                  tags={"decision": rec["decision"]["verdict"], "decided_by": rec["decided_by"],
                        "reason": rec["decision"]["reason"], "applied": rec["applied"]}, step=n)
            t.artifact(child, "record.json", rec)
            if rec["strategy_hash"]:
                t.artifact(child, "candidate.yaml", self.stores.strategy_path(rec["strategy_hash"]).read_text())
                t.artifact(child, "diff.txt", rec.get("diff_text", ""))
            t.artifact(child, "gates.json", {"gates": rec.get("gates"), "critic": rec.get("critic"),
                                             "probe": rec.get("probe"), "decision": rec["decision"]})
            if r.run:
                t.artifact(child, "summary.json", r.run.summary)
                t.artifact(child, "traces.jsonl", "".join(json.dumps(x, default=str) + "\n" for x in r.run.traces))
            t.end(child)
        t.end(run_id)


def at_schema_bound(strategy: dict, key: str) -> bool:
    """Whether ``key`` ("path::increase|decrease") wants to go past its schema range: only a schema change helps."""
    path, _, direction = key.partition("::")
    dim = evolvable_dimensions().get(path)
    if dim is None or dim.kind not in ("integer", "number") or direction not in ("increase", "decrease"):
        return False
    value = get_path(strategy, path)
    return value >= dim.high if direction == "increase" else value <= dim.low


def _brief(summary: dict) -> dict:
    keep = ("accuracy", "f1", "accuracy_by_category", "evidence_recall", "root_causes", "dcr@3", "n_scored",
            "judge", "strategy_hash", "wall_time_s")
    return {k: summary[k] for k in keep}


def _metrics(summary: dict) -> dict[str, float]:
    out = {"accuracy": summary["accuracy"], "f1": summary["f1"], "dcr_at_3": summary["dcr@3"]}
    out.update({f"accuracy.{c}": v for c, v in summary["accuracy_by_category"].items()})
    out.update({f"recall_at_{k}": v for k, v in summary["evidence_recall"].items() if v is not None})
    out.update({f"root_cause.{c}": v for c, v in summary["root_causes"].items()})
    return out


def _report_hash(record: dict) -> str:
    return canonical_hash({k: record.get(k) for k in ("paired", "dcr", "probe", "gates", "critic", "decision")})
