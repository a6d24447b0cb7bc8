"""Build the runtime roles, judge and LLM advisors a run config asks for: deterministic defaults or LLM backends."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.llm import LLMCritic, LLMPlanner, ResponseCache, RolesConfig, UsageStats, build_llm_roles
from evolve.observe.evaluator import Roles
from evolve.observe.judge import TokenF1Judge


@dataclass
class Backends:
    """The roles the harness runs, LLM usage counters (``None`` without LLM roles) and the LLM advisors."""

    roles: Roles
    usage: UsageStats | None
    planner: LLMPlanner | None
    critic: LLMCritic | None


def roles_config(config: Any) -> RolesConfig:
    """Validate the run config's ``roles`` (merged over ``MEMEVOLVE_<ROLE>_*`` environment variables)."""
    return RolesConfig.from_sources(config.roles, source="run config")


def build_backends(roles_cfg: RolesConfig, judge_threshold: float, cache_dir: Path, on_error: str = "stop", *,
                   dry: bool = False, dry_observing: UsageStats | None = None) -> Backends:
    """The roles of ``roles_cfg``; with ``dry`` their LLM clients call no endpoint (see ``build_llm_roles``)."""
    stats = UsageStats()
    llm = build_llm_roles(roles_cfg, ResponseCache(cache_dir), stats, dry=dry, dry_observing=dry_observing)
    roles = Roles(extractor=llm.get("extractor"), expander=llm.get("expander"), answerer=llm.get("answerer"),
                  fuser=llm.get("fuser"), judge=llm.get("judge") or TokenF1Judge(judge_threshold), on_error=on_error)
    return Backends(roles, stats if llm else None, llm.get("planner"), llm.get("critic"))
