"""LLM-backed roles through any OpenAI-compatible endpoint, replayed exactly from a response cache."""
from evolve.llm.cache import CacheError, ResponseCache, cache_key
from evolve.llm.client import (LLMAuthError, LLMClient, LLMError, LLMModelNotFoundError, LLMRequestError,
                               LLMUnavailableError, UsageStats)
from evolve.llm.config import ROLES, ConfigError, RoleConfig, RolesConfig, check_reachable
from evolve.llm.roles import (CriticVerdict, LLMAnswerer, LLMCritic, LLMExpander, LLMExtractor, LLMJudge, LLMPlanner,
                              PlannerResult, Proposal, build_llm_roles)

__all__ = [
    "CacheError", "ResponseCache", "cache_key",
    "LLMAuthError", "LLMClient", "LLMError", "LLMModelNotFoundError", "LLMRequestError", "LLMUnavailableError",
    "UsageStats",
    "ROLES", "ConfigError", "RoleConfig", "RolesConfig", "check_reachable",
    "CriticVerdict", "LLMAnswerer", "LLMCritic", "LLMExpander", "LLMExtractor", "LLMJudge", "LLMPlanner",
    "PlannerResult", "Proposal", "build_llm_roles",
]
