"""The service's own routes: the strategy serving, health, and Prometheus metrics."""
from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from evolve.serve.batching import BatchingEmbedder
from evolve.serve.routes.deps import ADMIN, Memory, RequestMetrics, Slot, Usage

#: Model-role usage counters exported on ``/metrics``, per role.
LLM_COUNTERS = ("requests", "failures", "prompt_tokens", "completion_tokens")

router = APIRouter(tags=["service"])


@router.get("/v1/strategy", summary="The strategy serving, its lineage and journal entry", dependencies=[ADMIN])
def strategy(slot: Slot) -> dict:
    run = slot.canary
    return {"serving": slot.current.describe(), "refused": slot.refused, "reloads": slot.reloads,
            "shadow": {**slot.shadow.describe(), "serves": "nobody"} if slot.shadow else None,
            "canary": run.describe() if run is not None else None, "canary_stopped": slot.canary_stopped,
            "canary_refused": slot.canary_refused}


@router.get("/healthz")
def healthz(slot: Slot, memory: Memory) -> dict:
    return {"ok": True, "strategy": slot.current.strategy_hash, "users": len(memory.loaded()),
            "max_users": memory.max_users, "organisation_pending": memory.pending(),
            "quarantined": dict(memory.quarantined)}


@router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus text format", dependencies=[ADMIN])
def prometheus(slot: Slot, memory: Memory, metrics: RequestMetrics, usage: Usage) -> PlainTextResponse:
    current = slot.current
    gauges = [("strategy_info", "The strategy serving (1) by hash and state.",
               {"hash": current.strategy_hash, "state": current.state}, 1),
              ("strategy_refused", "1 while the serving file on disk is refused (the previous one serves).", {},
               1 if slot.refused else 0),
              ("strategy_reloads", "Serving-file reloads since start.", {}, slot.reloads),
              ("strategy_refusals", "Serving-file versions refused since start.", {}, slot.refusals),
              ("users_loaded", "Users whose memory is loaded.", {}, len(memory.loaded())),
              ("users_evicted", "Users' memories unloaded for --max-users since start.", {}, memory.evictions),
              ("organisation_pending", "Closed sessions waiting for organisation.", {}, memory.pending()),
              ("organisation_steps", "Organisation steps completed since start.", {}, memory.organised_steps),
              ("memory_builds_after_capture", "Users' memories built in the background after their captures "
               "paused, since start.", {}, memory.warmed),
              ("organisation_failures", "Organisation steps that failed since start.", {}, memory.organise_failures),
              ("users_quarantined", "Users whose stored memory cannot be read (503 for them).", {},
               len(memory.quarantined)),
              ("recall_log_failures", "Recall-log lines that could not be appended since start.", {},
               memory.recall_log_failures)]
    run = slot.canary
    gauges += [("canary_fraction", "Share of users the running canary serves (0: none runs).",
                {"candidate": run.candidate_id, "hash": run.loaded.strategy_hash} if run else {},
                run.fraction if run else 0),
               ("canary_stopped_by_guard", "1 when the last canary was stopped by its guard.", {},
                1 if (slot.canary_stopped or {}).get("by") == "guard" else 0)]
    if run is not None:
        status = run.guard.status()
        gauges += [("canary_guard_pairs", "Judged paired recalls of the running canary, by outcome.",
                    {"outcome": k}, status[k]) for k in ("both_good", "both_bad", "harmed", "helped")]
        gauges.append(("canary_guard_looks", "Looks the canary guard has made.", {}, status["looks_made"]))
        gauges += [("canary_guard_judged", "Pairs the canary guard has judged, by source: the operator's answers, or "
                    "probes of the canary users' own turns by category.", {"source": k}, n)
                   for k, n in status["judged"].items()]
    embedder = current.runtime.embedder
    if isinstance(embedder, BatchingEmbedder):
        gauges += [("embed_passes", "Forward passes that encoded queued texts (questions) since start.", {},
                    embedder.passes),
                   ("embed_texts", "Texts those passes encoded; over embed_passes, the mean batch.", {},
                    embedder.texts)]
    for role, counts in (usage.by_role() if usage is not None else {}).items():
        gauges += [(f"llm_{counter}", f"Model-role {counter.replace('_', ' ')} since start.", {"role": role}, n)
                   for counter, n in counts.items() if counter in LLM_COUNTERS]
    return PlainTextResponse(metrics.render(gauges), media_type="text/plain; version=0.0.4")
