"""What a night will spend on LLM endpoints, before it starts and without calling any (``memevolve run --estimate``).

The current strategy is evaluated dry twice (see :class:`~evolve.llm.client.DryRun`): once against an empty response
cache (the calls of one evaluation on a fresh cache) and once against the run's cache (the calls still to make).
A candidate costs at most one fresh call set per question plus its ingestion; what it is expected to cost follows
the Verify order: the LLM-free screen (ingestion and expansion), the probe questions, and the remaining questions
for the share of screened candidates that earlier rounds took to a full evaluation (one half without history).
Prompt tokens are estimated from prompt lengths; completion tokens from cached replies, else ``max_tokens``.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from evolve.llm import ResponseCache
from evolve.loop.budget import Spend, models_by_role
from evolve.loop.config import RunConfig
from evolve.state.records import load_record
from evolve.loop.setup import RunSetup
from evolve.observe.harness import EvalRun
from evolve.observe.summarize import usage_totals
from evolve.state.view import StoreView

#: Share of screened candidates assumed to reach a full evaluation when the stores hold no history.
DEFAULT_FULL_SHARE = 0.5


def estimate(config: RunConfig, rounds: int | None = None) -> dict:
    """Expected LLM calls, tokens and cost of one evaluation, one candidate and the rest of the night of ``config``
    (or of ``rounds`` more rounds), and whether they fit its budget. Touches neither the stores nor any endpoint."""
    setup = RunSetup.for_run(config, dry=True)
    models = models_by_role(setup.roles)
    current, done, full_share, history = setup.baseline, 0, DEFAULT_FULL_SHARE, 0
    if setup.layout.state.is_file():
        view = StoreView(config.stores)
        done = int(view.state.get("last_committed_round", 0))
        current = view.get_strategy(view.state["current_strategy"]) if view.state.get("current_strategy") else current
        screened = [r for r in map(load_record, view.read_jsonl("candidate_outcomes")) if r.screened]
        if screened:
            history = len(screened)
            full_share = sum(bool(r.paired) for r in screened) / history
    rounds = rounds if rounds is not None else max(0, config.rounds - done)
    out: dict = {"llm_roles": models, "rounds_left": rounds, "candidates_per_round": config.candidates_per_round,
                 "questions": len(setup.question_ids), "probe_questions": len(setup.probe_ids),
                 "full_evaluation_share": {"value": round(full_share, 3),
                                           "from": f"{history} screened candidates" if history else "assumed"}}
    if not models:
        return {**out, "note": "no role calls an LLM endpoint: the night makes no LLM calls"}

    def spend(usage: list[dict]) -> Spend:
        return Spend.of(usage_totals(usage), models, config.budget.prices)

    with tempfile.TemporaryDirectory(prefix="memevolve-estimate-") as empty:
        fresh = setup.dry_harness(cache_dir=Path(empty), persist=False).evaluate(current, setup.question_ids)
    now = setup.dry_harness(persist=False).evaluate(current, setup.question_ids)
    probe, cache = set(setup.probe_ids), ResponseCache(setup.layout.cache / "llm")
    ingestion, questions = _ingestion(fresh), [t.llm for t in fresh.traces]
    expansion = [{r: c for r, c in t.llm.items() if r == "expander"} for t in fresh.traces]
    answering = {t.question_id: {r: c for r, c in t.llm.items() if r != "expander"} for t in fresh.traces}
    screen = spend([ingestion, *expansion]) if fresh.summary.llm and _answers_call_models(models) else Spend()
    probe_spend = spend([u for q, u in answering.items() if q in probe])
    rest = spend([u for q, u in answering.items() if q not in probe])
    if not _answers_call_models(models):  # no screen: the probe also pays for ingestion and expansion
        probe_spend = probe_spend + spend([ingestion, *expansion])
    expected_candidate = screen + probe_spend + _scale(rest, full_share)
    at_most_candidate = spend([ingestion, *questions])
    per_night = config.candidates_per_round * rounds
    night_expected = spend([now.summary.llm]) + _scale(expected_candidate, per_night)
    night_at_most = spend([now.summary.llm]) + _scale(at_most_candidate, per_night)
    sizes = {role: f"{'mean of cached replies' if cache.mean_completion_tokens(role, model) else 'max_tokens'}"
             for role, model in models.items()}
    out.update({
        "completion_tokens_from": sizes,
        "evaluation": {"fresh_cache": spend([fresh.summary.llm]).to_dict(), "by_role": fresh.summary.llm,
                       "now": spend([now.summary.llm]).to_dict(),
                       "cache_coverage": _coverage(spend([now.summary.llm]), spend([fresh.summary.llm]))},
        "candidate": {"expected": expected_candidate.to_dict(), "at_most": at_most_candidate.to_dict()},
        "night": {"expected": night_expected.to_dict(), "at_most": night_at_most.to_dict()},
        "budget": _fit(config, night_expected, night_at_most),
    })
    return out


def _answers_call_models(models: dict[str, str]) -> bool:
    return "answerer" in models or "judge" in models


def _ingestion(run: EvalRun) -> dict[str, dict[str, int]]:
    """The usage of ingestion: the evaluation's totals minus what its questions used."""
    out: dict[str, dict[str, int]] = {}
    for role, counts in run.summary.llm.items():
        left = {k: v - sum(t.llm.get(role, {}).get(k, 0) for t in run.traces) for k, v in counts.items()}
        if any(left.values()):
            out[role] = left
    return out


def _scale(spend: Spend, factor: float) -> Spend:
    return Spend(round(spend.calls * factor), round(spend.prompt_tokens * factor),
                 round(spend.completion_tokens * factor), None if spend.cost is None else round(spend.cost * factor, 6))


def _coverage(now: Spend, fresh: Spend) -> float:
    """Share of one evaluation's calls the response cache already answers."""
    return round(1 - now.calls / fresh.calls, 4) if fresh.calls else 1.0


def _fit(config: RunConfig, expected: Spend, at_most: Spend) -> dict:
    """Each budget limit against the night's expected and largest spend."""
    out = {}
    for name, limit, pick in (("max_llm_calls", config.budget.max_llm_calls, lambda s: s.calls),
                              ("max_tokens", config.budget.max_tokens, lambda s: s.tokens),
                              ("max_cost", config.budget.max_cost, lambda s: s.cost or 0.0)):
        if limit is not None:
            out[name] = {"limit": limit, "expected_fits": pick(expected) <= limit, "at_most_fits": pick(at_most) <= limit}
    return out
