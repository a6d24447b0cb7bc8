"""LLM-backed roles through any OpenAI-compatible endpoint, replayed exactly from a response cache."""
from evolve.llm.cache import CacheError, ResponseCache, cache_key
from evolve.llm.client import (LLMAuthError, LLMClient, LLMError, LLMModelNotFoundError, LLMRequestError,
                               LLMUnavailableError)
from evolve.runtime.usage import UsageStats
from evolve.llm.config import ROLES, ConfigError, RoleConfig, RolesConfig, check_reachable
from evolve.llm.advisors import (CriticAdvisor, CriticVerdict, LLMCritic, LLMPlanner, PlannerAdvisor, PlannerResult,
                                 Proposal)
from evolve.llm.roles import LLMAnswerer, LLMExpander, LLMExtractor, LLMJudge, build_llm_roles

__all__ = [
    "CacheError", "ResponseCache", "cache_key",
    "LLMAuthError", "LLMClient", "LLMError", "LLMModelNotFoundError", "LLMRequestError", "LLMUnavailableError",
    "UsageStats",
    "ROLES", "ConfigError", "RoleConfig", "RolesConfig", "check_reachable",
    "CriticAdvisor", "CriticVerdict", "LLMAnswerer", "LLMCritic", "LLMExpander", "LLMExtractor", "LLMJudge", "LLMPlanner",
    "PlannerAdvisor", "PlannerResult", "Proposal", "build_llm_roles",
]
