"""Build the runtime roles and judge a run config asks for: deterministic defaults or LLM backends."""
from __future__ import annotations

from typing import Any

from evolve.harness import Roles
from evolve.judge import TokenF1Judge
from evolve.llm import ResponseCache, RolesConfig, UsageStats, build_llm_roles


def build_roles(config: Any, stores: Any) -> tuple[Roles, UsageStats | None, dict[str, Any]]:
    """``(roles, usage stats or None, {"planner": ..., "critic": ...} LLM objects where configured)``."""
    roles_cfg = RolesConfig.from_sources(config.roles, source="run config")
    stats = UsageStats()
    llm = build_llm_roles(roles_cfg, ResponseCache(stores.cache_dir / "llm"), stats)
    roles = Roles(extractor=llm.get("extractor"), expander=llm.get("expander"), answerer=llm.get("answerer"),
                  judge=llm.get("judge") or TokenF1Judge(config.judge_threshold))
    return roles, (stats if llm else None), {k: llm[k] for k in ("planner", "critic") if k in llm}
