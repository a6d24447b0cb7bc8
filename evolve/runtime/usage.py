"""Accounting of role calls that wait on a model server: per-role counters for a whole run, and for one question.

:class:`UsageStats` counts requests, retries, failures, tokens, cache use and latency per role. The harness opens
:func:`question_usage` around each question, so the LLM client tallies that question's calls too (in the thread
that runs it, and in contexts copied from it, e.g. the judge's parallel votes); the totals land in its trace.
"""
from __future__ import annotations

import contextvars
import threading
from collections import Counter
from contextlib import contextmanager
from typing import Iterator

from evolve.errors import EvolveError

#: Counters kept per role by :class:`UsageStats`.
COUNTERS = ("requests", "retries", "failures", "prompt_tokens", "completion_tokens", "cache_hits", "cache_misses",
            "latency_ms")


class RequestLimitReached(EvolveError, RuntimeError):
    """One more request would pass the run's ``max_llm_calls``; raised before the request is sent, so retries can
    never overrun the limit. :meth:`figures` are journaled like a budget stop's."""

    def __init__(self, role: str, sent: int, limit: int):
        self.role, self.sent, self.limit = role, sent, limit
        super().__init__(f"budget: a request of LLM role {role!r} would exceed max_llm_calls {limit} "
                         f"({sent} requests sent, retries included)")

    def figures(self) -> dict:
        return {"next": f"a request of LLM role {self.role!r}", "spent": {"calls": self.sent},
                "limits": {"max_llm_calls": self.limit}, "exceeded": ["max_llm_calls"]}


class UsageStats:
    """Thread-safe per-role counters of requests, tokens, cache use and latency. With ``max_requests`` set, adding a
    request beyond it raises :class:`RequestLimitReached` (and counts nothing)."""

    def __init__(self, max_requests: int | None = None) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counter[str]] = {}
        self.max_requests = max_requests

    def add(self, role: str, **counts: int) -> None:
        unknown = set(counts) - set(COUNTERS)
        if unknown:
            raise KeyError(f"unknown usage counters {sorted(unknown)}; expected {COUNTERS}")
        with self._lock:
            if self.max_requests is not None and counts.get("requests"):
                sent = sum(c["requests"] for c in self._counts.values())
                if sent + counts["requests"] > self.max_requests:
                    raise RequestLimitReached(role, sent, self.max_requests)
            self._counts.setdefault(role, Counter()).update(counts)

    def by_role(self) -> dict[str, dict[str, int]]:
        """``{role: {counter: n}}`` of the non-zero counters."""
        with self._lock:
            return {role: {c: counts[c] for c in COUNTERS if counts[c]} for role, counts in sorted(self._counts.items())}

    def get(self, role: str, counter: str) -> int:
        with self._lock:
            return self._counts.get(role, Counter())[counter]

    def to_dict(self) -> dict[str, int]:
        """Flat metrics ``llm.<role>.<counter>`` and ``llm.total.<counter>`` (ready to log to MLflow)."""
        with self._lock:
            out: dict[str, int] = {}
            total: Counter[str] = Counter()
            for role in sorted(self._counts):
                for counter in COUNTERS:
                    out[f"llm.{role}.{counter}"] = self._counts[role][counter]
                total.update(self._counts[role])
            out.update({f"llm.total.{counter}": total[counter] for counter in COUNTERS})
            return out


#: The tally of the question being evaluated (see :func:`question_usage`).
_QUESTION: contextvars.ContextVar[UsageStats | None] = contextvars.ContextVar("memevolve_question_usage",
                                                                              default=None)


@contextmanager
def question_usage() -> Iterator[UsageStats]:
    """Tally, per role, every LLM call made in this context (and in contexts copied from it) while it is open."""
    sink = UsageStats()
    token = _QUESTION.set(sink)
    try:
        yield sink
    finally:
        _QUESTION.reset(token)


def current_question() -> UsageStats | None:
    """The tally of the question being evaluated in this context, if any."""
    return _QUESTION.get()
