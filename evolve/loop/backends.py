"""Build the runtime roles and judge a run config asks for: deterministic defaults or LLM backends."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from evolve.observe.harness import Roles
from evolve.observe.judge import TokenF1Judge
from evolve.llm import ResponseCache, RolesConfig, UsageStats, build_llm_roles


def roles_config(config: Any) -> RolesConfig:
    """Validate the run config's ``roles`` (merged over ``MEMEVOLVE_<ROLE>_*`` environment variables)."""
    return RolesConfig.from_sources(config.roles, source="run config")


def build_roles(roles_cfg: RolesConfig, judge_threshold: float, cache_dir: Path, on_error: str = "stop"
                ) -> tuple[Roles, UsageStats | None, dict[str, Any]]:
    """``(roles, usage stats or None, {"planner": ..., "critic": ...} LLM objects where configured)``."""
    stats = UsageStats()
    llm = build_llm_roles(roles_cfg, ResponseCache(cache_dir), stats)
    roles = Roles(extractor=llm.get("extractor"), expander=llm.get("expander"), answerer=llm.get("answerer"),
                  judge=llm.get("judge") or TokenF1Judge(judge_threshold), on_error=on_error)
    return roles, (stats if llm else None), {k: llm[k] for k in ("planner", "critic") if k in llm}
