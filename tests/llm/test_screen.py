"""The LLM-free screen: with an LLM answerer and judge, a candidate whose packed context loses gold evidence is
rejected before any answer or judgment is requested; one that keeps it goes on to the (LLM) probe."""
from __future__ import annotations

from llm_server import LoopbackLLMServer
from test_concurrency import responder

from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy
from evolve.improve.effects import DimensionEffects
from evolve.improve.evolver import Evolver
from evolve.improve.hypotheses import HypothesisTree
from evolve.improve.planner import Direction
from evolve.llm import RolesConfig
from evolve.loop.backends import build_backends
from evolve.loop.candidate import CandidateVerifier, Screen
from evolve.verify.critic import DeterministicCritic
from evolve.verify.decision import AcceptanceRules
from evolve.strategy.moves import Move


def test_an_evidence_losing_candidate_is_rejected_without_llm_calls(tmp_path):
    with LoopbackLLMServer(responder, models=("answerer-model", "judge-model")) as server:
        roles = {role: {"backend": "llm", "base_url": server.base_url, "model": f"{role}-model", "timeout_s": 5,
                        "max_retries": 0} for role in ("answerer", "judge")}
        backends = build_backends(RolesConfig.from_sources(roles, source="test"), 0.5, tmp_path / "llm")
        bench = load_benchmark("synthetic:0:3")
        ids = [q.id for q in bench.questions if q.category != "adversarial"][:60]
        harness = Harness(bench, backends.roles, progress=False)
        baseline = load_strategy(BASELINE_PATH)
        run = harness.evaluate(baseline, ids)
        tree = HypothesisTree()
        verifier = CandidateVerifier(harness, Evolver(f"sqlite:///{tmp_path / 'optuna.db'}", 0), DeterministicCritic(),
                                     DimensionEffects(), tree, AcceptanceRules(), question_ids=ids,
                                     probe_ids=ids[:20], harness_id={}, max_reverts=2, seed=0)
        screen = Screen(baseline, run, set(), [])
        before = server.request_count
        losing = verifier.verify("r001-c00", 1, Direction(Move.parse("extraction.min_fact_tokens::set:7"),
                                                         "ingestion_gap/*", 1.0, "test"), screen)
        assert server.request_count == before, (losing.record.decided_by, losing.record.reason,
                                                losing.record.evidence_screen)  # no answer or judgment spent on it
        keeping = verifier.verify("r001-c01", 1, Direction(Move.parse("answering.max_answer_tokens::set:8"),
                                                          "generation_error/*", 1.0, "test"), screen)
        assert server.request_count > before  # passed the screen, so the probe asked the LLM roles
    assert (losing.record.verdict, losing.record.decided_by) == ("REJECT", "evidence-screen")
    assert losing.record.evidence_screen.delta < 0 and losing.record.probe is None
    assert "rejected before any LLM answer" in losing.record.reason
    assert keeping.record.evidence_screen.delta == 0 and keeping.record.probe is not None
