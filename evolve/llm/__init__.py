"""LLM-backed roles through any OpenAI-compatible endpoint, replayed exactly from a response cache.

Names load on first use, so importing a submodule (e.g. :mod:`evolve.llm.local` for the CLI's model list) does
not import the OpenAI client.
"""
from __future__ import annotations

from evolve.lazy import lazy_exports

#: Public name -> module that defines it.
_EXPORTS = {
    **dict.fromkeys(("CacheError", "NoCache", "ResponseCache", "cache_key"), "evolve.llm.cache"),
    **dict.fromkeys(("LLMAuthError", "LLMClient", "LLMError", "LLMModelNotFoundError", "LLMRequestError",
                     "LLMUnavailableError"), "evolve.llm.client"),
    "UsageStats": "evolve.runtime.usage",
    **dict.fromkeys(("ROLES", "ConfigError", "RoleConfig", "RolesConfig", "check_reachable"), "evolve.llm.config"),
    **dict.fromkeys(("CriticAdvisor", "CriticVerdict", "LLMCritic", "LLMPlanner", "PlannerAdvisor", "PlannerResult",
                     "ProposalReply"), "evolve.llm.advisors"),
    **dict.fromkeys(("LLMAnswerer", "LLMExpander", "LLMExtractor", "LLMJudge", "build_llm_roles"), "evolve.llm.roles"),
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("evolve.llm", _EXPORTS, globals())
