"""Chat completions through the ``openai`` client, with caching, bounded retries and a concurrency limit."""
from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from dataclasses import dataclass

import openai

from evolve.errors import UserError
from evolve.llm.cache import ResponseCache, cache_key
from evolve.llm.config import RoleConfig
from evolve.llm.reply import ChatReply, MalformedReply, parse_reply
from evolve.runtime.roles import RoleError
from evolve.runtime.usage import UsageStats, current_question

log = logging.getLogger(__name__)

_RETRY_STATUS = frozenset({408, 409, 429})
_JITTER = 0.25  # at most +25 % of a backoff delay


class LLMError(RoleError, UserError):
    """An LLM call failed; says which role, endpoint and model."""

    def __init__(self, role: str, base_url: str, model: str, reason: str):
        self.role, self.base_url, self.model, self.reason = role, base_url, model, reason
        super().__init__(f"LLM role {role!r} (model {model!r} at {base_url}): {reason}")


class LLMAuthError(LLMError):
    """HTTP 401/403: the key is missing, wrong or lacks permission. Never retried."""


class LLMModelNotFoundError(LLMError):
    """HTTP 404: the endpoint does not serve the model. Never retried."""


class LLMRequestError(LLMError):
    """Another 4xx: the request itself was rejected. Never retried."""


class LLMUnavailableError(LLMError):
    """Rate limits, server errors, timeouts, connection errors or malformed responses outlasted the retries."""


def _retry_after(exc: openai.APIStatusError) -> float:
    """Seconds from a ``Retry-After`` header (0 when absent or given as a date)."""
    try:
        return max(0.0, float(exc.response.headers.get("retry-after", 0)))
    except ValueError:
        return 0.0


#: Characters per token of the dry-run prompt estimate (the usual rule of thumb for BPE tokenizers on English).
CHARS_PER_TOKEN = 4
#: Characters a reply may hold per requested ``max_tokens``; the rest of a longer reply (an endpoint that ignores
#: ``max_tokens``) is cut off before it is used or cached.
MAX_CHARS_PER_TOKEN = 16


@dataclass(frozen=True)
class DryRun:
    """Answer cache misses without calling the endpoint: a fixed ``reply`` in the role's reply format, with the
    usage the call would have had tallied as a request. Prompt tokens are estimated from the prompt's length
    (:data:`CHARS_PER_TOKEN`); completion tokens are the mean of the ``observed`` real calls of the role, else of
    the cached replies, else the request's ``max_tokens`` (an upper bound)."""

    reply: str
    observed: UsageStats | None = None


def prompt_tokens_estimate(messages: list[dict]) -> int:
    """Prompt tokens of ``messages`` by the characters-per-token rule, plus a few per message for the chat format."""
    return sum(math.ceil(len(str(m.get("content", ""))) / CHARS_PER_TOKEN) + 4 for m in messages)


class LLMClient:
    """Completions for one role. Identical requests are answered from ``cache`` without HTTP calls; with ``dry``
    set, requests the cache cannot answer are counted instead of sent (see :class:`DryRun`)."""

    def __init__(self, role_cfg: RoleConfig, cache: ResponseCache, stats: UsageStats, *, role: str,
                 dry: DryRun | None = None):
        if role_cfg.backend != "llm" or not role_cfg.model:
            raise ValueError(f"role {role!r} is not configured for the llm backend")
        self.role, self.cfg, self.cache, self.stats, self.dry = role, role_cfg, cache, stats, dry
        self.model: str = role_cfg.model
        self._completion_guess: float | None = None
        self._warned: set[str] = set()
        self._slots = threading.BoundedSemaphore(role_cfg.concurrency)
        self._api = openai.OpenAI(base_url=role_cfg.endpoint, api_key=role_cfg.api_key(),
                                  timeout=role_cfg.timeout_s, max_retries=0)

    def complete(self, messages: list[dict], **params: object) -> str:
        """The assistant reply to ``messages``; ``params`` (e.g. ``stop``, ``response_format``) override the role's
        temperature, max_tokens and seed. Every parameter is part of the cache key."""
        seed = {} if self.cfg.seed is None else {"seed": self.cfg.seed}
        request = {"temperature": self.cfg.temperature, "max_tokens": self.cfg.max_tokens, **seed, **params}
        key = cache_key(self.role, self.model, messages, request)
        entry = self.cache.get(key)
        if entry is not None:
            self._tally(cache_hits=1)
            return entry["content"]
        self._tally(cache_misses=1)
        if self.dry is not None:
            self._tally(requests=1, prompt_tokens=prompt_tokens_estimate(messages),
                        completion_tokens=self._completion_estimate(request["max_tokens"]))
            return self.dry.reply
        content, usage, estimated = self._call(messages, request, key)
        self.cache.put(key, {"role": self.role, "model": self.model, "messages": messages, "params": request,
                             "content": content, "usage": usage, **({"usage_estimated": True} if estimated else {})})
        return content

    def _completion_estimate(self, max_tokens: int) -> int:
        observed = self.dry.observed if self.dry else None
        if observed is not None and observed.get(self.role, "requests"):
            return round(observed.get(self.role, "completion_tokens") / observed.get(self.role, "requests"))
        if self._completion_guess is None:
            self._completion_guess = self.cache.mean_completion_tokens(self.role, self.model) or 0.0
        return round(self._completion_guess or max_tokens)

    def _tally(self, **counts: int) -> None:
        self.stats.add(self.role, **counts)
        question = current_question()
        if question is not None:
            question.add(self.role, **counts)

    def _error(self, cls: type[LLMError], reason: str) -> LLMError:
        return cls(self.role, self.cfg.endpoint, self.model, reason)

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("LLM role %r (model %r at %s): %s", self.role, self.model, self.cfg.endpoint, message)

    def _accept(self, reply: ChatReply, messages: list[dict], request: dict) -> tuple[str, dict[str, int], bool]:
        """The reply's content (cut to :data:`MAX_CHARS_PER_TOKEN` per requested token), its usage (estimated from
        lengths when the endpoint reported none), tallied, and whether the usage is an estimate."""
        content, cap = reply.content, int(request["max_tokens"]) * MAX_CHARS_PER_TOKEN
        if len(content) > cap:
            self._warn_once("long", f"a reply of {len(content)} characters exceeds max_tokens "
                                    f"{request['max_tokens']}; kept the first {cap} characters")
            content = content[:cap]
        if reply.usage is None:
            self._warn_once("usage", "the endpoint reports no token usage; tokens are estimated from lengths "
                                     f"({CHARS_PER_TOKEN} characters a token) for the budget and the statistics")
            tokens = {"prompt_tokens": prompt_tokens_estimate(messages),
                      "completion_tokens": math.ceil(len(content) / CHARS_PER_TOKEN)}
        else:
            tokens = {"prompt_tokens": reply.usage.prompt_tokens, "completion_tokens": reply.usage.completion_tokens}
        self._tally(**tokens)
        return content, tokens, reply.usage is None

    def _call(self, messages: list[dict], request: dict, key: str) -> tuple[str, dict[str, int], bool]:
        last = ""
        for attempt in range(self.cfg.max_retries + 1):
            retry_after = 0.0
            try:
                with self._slots:
                    self._tally(requests=1)
                    started = time.perf_counter()
                    try:
                        raw = self._api.chat.completions.with_raw_response.create(model=self.model,
                                                                                  messages=messages, **request)
                    finally:
                        self._tally(latency_ms=round((time.perf_counter() - started) * 1000))
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                raise self._error(LLMAuthError, f"HTTP {exc.status_code} authentication failed; check the key "
                                                f"in ${self.cfg.api_key_env} ({exc.message})") from None
            except openai.NotFoundError as exc:
                raise self._error(LLMModelNotFoundError, f"HTTP 404 unknown model or route ({exc.message})") from None
            except openai.APIStatusError as exc:
                if exc.status_code not in _RETRY_STATUS and exc.status_code < 500:
                    raise self._error(LLMRequestError, f"HTTP {exc.status_code} ({exc.message})") from None
                last, retry_after = f"HTTP {exc.status_code} ({exc.message})", _retry_after(exc)
            except openai.APITimeoutError:
                last = f"no response within {self.cfg.timeout_s:g}s"
            except openai.APIConnectionError as exc:
                last = f"connection failed ({exc.__cause__ or exc})"
            else:
                try:
                    return self._accept(parse_reply(raw.http_response.content), messages, request)
                except MalformedReply as exc:
                    last = str(exc)
            if attempt < self.cfg.max_retries:
                self._tally(retries=1)
                time.sleep(self._delay(key, attempt, retry_after))
        self._tally(failures=1)
        raise self._error(LLMUnavailableError, f"gave up after {self.cfg.max_retries + 1} attempts; last error: {last}")

    def _delay(self, key: str, attempt: int, retry_after: float) -> float:
        """Exponential backoff with jitter derived from the request, so reruns wait identically."""
        fraction = int(hashlib.sha256(f"{key}:{attempt}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        backoff = self.cfg.backoff_s * 2 ** attempt * (1 + _JITTER * fraction)
        return min(self.cfg.max_backoff_s, max(backoff, retry_after))
