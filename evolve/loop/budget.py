"""LLM spending limits of a night: what was spent, what an evaluation is expected to spend, and the clean stop.

A run config's ``budget:`` section caps the LLM calls, tokens and (with per-model prices) the cost of one
``memevolve run``. Before every evaluation the :class:`BudgetedHarness` runs the same evaluation *dry* (LLM clients
answer from the response cache or count the call they would make, see :class:`~evolve.llm.client.DryRun`), so the
expected spend counts cache hits as free. When the expected spend does not fit, :class:`BudgetExhausted` is raised
before any call is made; the engine then stops between rounds (the round in progress is not committed, and its
responses stay cached, so the next run redoes it for the calls it did not make).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterable

from pydantic import BaseModel, ConfigDict, Field

from evolve.errors import EvolveError
from evolve.llm.config import ROLES, RolesConfig
from evolve.runtime.usage import UsageStats

if TYPE_CHECKING:
    from evolve.observe.harness import EvalRun, Harness


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True, frozen=True)


class ModelPrice(_Strict):
    """Price of one model in currency units per million tokens."""

    input: float = Field(ge=0, le=1e6, description="per million prompt tokens (at most 1e6, far above any price)")
    output: float = Field(ge=0, le=1e6, description="per million completion tokens (at most 1e6)")


class BudgetConfig(_Strict):
    """Spending limits of one run (``None``: unlimited). Cache hits cost nothing."""

    max_llm_calls: int | None = Field(None, ge=0, le=10**12, description="HTTP requests to LLM endpoints, retries "
                                                                        "included (at most 1e12; omit for no limit)")
    max_tokens: int | None = Field(None, ge=0, le=10**15, description="prompt plus completion tokens (at most 1e15; "
                                                                      "omit for no limit)")
    max_cost: float | None = Field(None, ge=0, le=1e12, description="cost at `prices`; needs a price for every model "
                                                                    "used (at most 1e12; omit for no limit)")
    prices: dict[str, ModelPrice] = Field(default_factory=dict, description="per model name")

    @property
    def limited(self) -> bool:
        return any(v is not None for v in (self.max_llm_calls, self.max_tokens, self.max_cost))

    def check_models(self, roles: RolesConfig) -> None:
        """Refuse prices for a model no role uses, and ``max_cost`` without a price for every model a role uses.
        Raises ``ValueError`` naming the field."""
        used = models_by_role(roles)
        for model in self.prices:
            if model not in used.values():
                raise ValueError(f"budget.prices.{model}: no role uses model {model!r} "
                                 f"(LLM roles use: {sorted(set(used.values())) or 'none'})")
        if self.max_cost is not None:
            for role, model in used.items():
                if model not in self.prices:
                    raise ValueError(f"budget.max_cost: no price for model {model!r} of role {role!r}; "
                                     f"add budget.prices.{model} with input and output prices per million tokens")


def models_by_role(roles: RolesConfig) -> dict[str, str]:
    """``{role: model}`` of the roles served by an LLM endpoint."""
    return {r: roles.role(r).model for r in ROLES if roles.role(r).backend == "llm" and roles.role(r).model}


@dataclass(frozen=True)
class Spend:
    """LLM calls, tokens and cost (``None`` without prices) of some work."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def of(cls, usage: dict[str, dict[str, int]], models: dict[str, str],
           prices: dict[str, ModelPrice]) -> "Spend":
        """The spend of per-role usage counters (``{role: {requests, prompt_tokens, ...}}``)."""
        cost = 0.0 if prices else None
        calls = prompt = completion = 0
        for role, counts in usage.items():
            p, c = counts.get("prompt_tokens", 0), counts.get("completion_tokens", 0)
            calls, prompt, completion = calls + counts.get("requests", 0), prompt + p, completion + c
            price = prices.get(models.get(role, ""))
            if cost is not None and price is not None:
                cost += (p * price.input + c * price.output) / 1e6
        return cls(calls, prompt, completion, None if cost is None else round(cost, 6))

    def __add__(self, other: "Spend") -> "Spend":
        cost = None if self.cost is None and other.cost is None else round((self.cost or 0) + (other.cost or 0), 6)
        return Spend(self.calls + other.calls, self.prompt_tokens + other.prompt_tokens,
                     self.completion_tokens + other.completion_tokens, cost)

    def to_dict(self) -> dict:
        return {**asdict(self), "tokens": self.tokens}


class BudgetExhausted(EvolveError, RuntimeError):
    """The next evaluation's expected spend does not fit the budget; raised before it makes any call."""

    def __init__(self, what: str, spent: Spend, expected: Spend, limits: BudgetConfig, exceeded: list[str]):
        self.what, self.spent, self.expected, self.limits, self.exceeded = what, spent, expected, limits, exceeded
        super().__init__(f"budget: {what!r} would exceed {', '.join(exceeded)} "
                         f"(spent {spent.to_dict()}, expected {expected.to_dict()})")

    def figures(self) -> dict:
        """The stop as journaled: what was next, what was spent and expected, the limits and which one binds."""
        return {"next": self.what, "spent": self.spent.to_dict(), "expected": self.expected.to_dict(),
                "limits": self.limits.model_dump(exclude={"prices"}), "exceeded": self.exceeded}


class Budget:
    """The limits of one run against the night's real LLM usage."""

    def __init__(self, config: BudgetConfig, roles: RolesConfig, night: UsageStats):
        self.config, self.night, self.models = config, night, models_by_role(roles)
        night.max_requests = config.max_llm_calls  # binds every request, retries included

    def spend(self, usage: dict[str, dict[str, int]]) -> Spend:
        return Spend.of(usage, self.models, self.config.prices)

    @property
    def spent(self) -> Spend:
        return self.spend(self.night.by_role())

    def check(self, expected: Spend, what: str) -> None:
        """Raise :class:`BudgetExhausted` if spending ``expected`` more would pass a limit."""
        total, limits = self.spent + expected, self.config
        exceeded = [name for name, value, limit in (("max_llm_calls", total.calls, limits.max_llm_calls),
                                                    ("max_tokens", total.tokens, limits.max_tokens),
                                                    ("max_cost", total.cost or 0.0, limits.max_cost))
                    if limit is not None and value > limit]
        if exceeded:
            raise BudgetExhausted(what, self.spent, expected, limits, exceeded)


class BudgetedHarness:
    """A :class:`Harness` whose every evaluation first proves, by a dry run of itself on ``dry``, that it fits the
    budget. Everything else is the wrapped harness's."""

    def __init__(self, harness: Harness, dry: Harness, budget: Budget):
        self.harness, self.dry, self.budget = harness, dry, budget

    def __getattr__(self, name: str):
        return getattr(self.harness, name)

    def expected(self, strategy: dict, question_ids: Iterable[str] | None = None, *, answer: bool = True) -> Spend:
        """What evaluating ``strategy`` would spend now (cache hits free)."""
        run = self.dry.evaluate(strategy, question_ids, desc="dry run", answer=answer)
        return self.budget.spend(run.summary.llm)

    def evaluate(self, strategy: dict, question_ids: Iterable[str] | None = None, desc: str = "eval", *,
                 answer: bool = True) -> EvalRun:
        ids = list(question_ids) if question_ids is not None else None
        self.budget.check(self.expected(strategy, ids, answer=answer), desc)
        return self.harness.evaluate(strategy, ids, desc, answer=answer)

    def close(self) -> None:
        self.harness.close()
        self.dry.close()
