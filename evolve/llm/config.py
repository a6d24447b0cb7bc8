"""Which backend and model each role uses.

Precedence for every field of a role: run configuration > environment > defaults. The environment
supplies ``MEMEVOLVE_<ROLE>_BACKEND``, ``MEMEVOLVE_<ROLE>_BASE_URL`` and ``MEMEVOLVE_<ROLE>_MODEL``
(``<ROLE>`` upper-case, e.g. ``MEMEVOLVE_JUDGE_MODEL``); API keys are read only from the variable
named by ``api_key_env`` and never stored in a configuration.
"""
from __future__ import annotations

import os
import urllib.parse
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evolve.errors import ConfigError
from evolve.reachability import http_get

ROLES = ("extractor", "expander", "answerer", "judge", "planner", "critic", "questioner", "fuser")
#: Roles that reply in JSON, and so may ask for constrained decoding (``structured``).
JSON_ROLES = ("judge", "planner", "critic", "questioner", "fuser")
OPENAI_BASE_URL = "https://api.openai.com/v1"
#: Placeholder key for local servers that do not check one.
NO_KEY = "not-needed"
_ENV_FIELDS = ("backend", "base_url", "model")


class RoleConfig(BaseModel):
    """Backend and call settings of one role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["deterministic", "llm"] = "deterministic"
    base_url: str | None = None  # None: the OpenAI API
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    # Upper bounds: a reply of 1M tokens, an hour's wait or 20 retries is beyond any endpoint that works.
    max_tokens: int = Field(512, ge=1, le=1_000_000)
    timeout_s: float = Field(60.0, gt=0.0, le=3600.0)
    max_retries: int = Field(4, ge=0, le=20)
    backoff_s: float = Field(1.0, ge=0.0, le=3600.0)  # first retry delay; doubles per retry
    max_backoff_s: float = Field(30.0, ge=0.0, le=3600.0)  # cap of one delay, also applied to Retry-After
    concurrency: int = Field(4, ge=1, le=256)
    seed: int | None = None  # sent with every request when set (the judge's votes send their own: 0, 1, 2)
    # JSON roles: "json_object" sends the reply's JSON schema as {"type": "json_object", "schema": ...}, which
    # llama.cpp servers turn into a decoding grammar; "off" sends no response_format.
    structured: Literal["off", "json_object"] = "off"

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            parts = urllib.parse.urlsplit(value)
            parts.port  # a port that is not a number raises here
        except ValueError as exc:
            raise ValueError(f"not a URL ({exc})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL with a host, e.g. http://127.0.0.1:8080/v1")
        return value

    @model_validator(mode="after")
    def _llm_needs_model(self) -> "RoleConfig":
        if self.backend == "llm" and not self.model:
            raise ValueError("backend 'llm' needs a model (set model or MEMEVOLVE_<ROLE>_MODEL)")
        return self

    @property
    def endpoint(self) -> str:
        return (self.base_url or OPENAI_BASE_URL).rstrip("/")

    def api_key(self) -> str:
        """The key from ``api_key_env``, or a placeholder for local servers that need none."""
        return os.environ.get(self.api_key_env) or NO_KEY


class RolesConfig(BaseModel):
    """One :class:`RoleConfig` per role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    extractor: RoleConfig = RoleConfig()
    expander: RoleConfig = RoleConfig()
    answerer: RoleConfig = RoleConfig()
    judge: RoleConfig = RoleConfig()
    planner: RoleConfig = RoleConfig()
    critic: RoleConfig = RoleConfig()
    questioner: RoleConfig = RoleConfig()
    fuser: RoleConfig = RoleConfig()
    allow_shared_judge: bool = False

    @model_validator(mode="after")
    def _structured_json_roles(self) -> "RolesConfig":
        for name in ROLES:
            if name not in JSON_ROLES and self.role(name).structured != "off":
                raise ValueError(f"{name}.structured: only the {', '.join(JSON_ROLES)} reply in JSON; "
                                 f"use 'off' for the {name}")
        return self

    @model_validator(mode="after")
    def _judge_independent(self) -> "RolesConfig":
        planner, judge = self.planner, self.judge
        shared = (planner.backend == judge.backend == "llm" and planner.endpoint == judge.endpoint
                  and planner.model == judge.model)
        if shared and not self.allow_shared_judge:
            raise ValueError(
                f"planner and judge both use model {judge.model!r} at {judge.endpoint}: a strategy must not be "
                "judged by the component that proposed it; give the judge another model or endpoint, "
                "or set allow_shared_judge: true to accept the bias")
        return self

    def role(self, name: str) -> RoleConfig:
        if name not in ROLES:
            raise KeyError(f"unknown role {name!r}; expected one of {ROLES}")
        return getattr(self, name)

    @classmethod
    def from_sources(cls, data: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                     source: str = "<run config>") -> "RolesConfig":
        """Merge the run configuration's ``roles`` mapping over the environment over defaults."""
        env = os.environ if env is None else env
        data = dict(data or {})
        merged: dict[str, Any] = {k: v for k, v in data.items() if k not in ROLES}
        env_vars: dict[tuple[str, str], str] = {}
        for role in ROLES:
            given = data.get(role) or {}
            if not isinstance(given, Mapping):
                raise ConfigError(f"{source}: roles.{role}: must be a mapping, got {type(given).__name__}")
            from_env = {f: env[f"MEMEVOLVE_{role.upper()}_{f.upper()}"] for f in _ENV_FIELDS
                        if env.get(f"MEMEVOLVE_{role.upper()}_{f.upper()}")}
            merged[role] = {**from_env, **given}
            env_vars.update({(role, f): f"MEMEVOLVE_{role.upper()}_{f.upper()}" for f in from_env if f not in given})
        try:
            return cls.model_validate(merged)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in ("roles", *err["loc"]))
            var = env_vars.get(tuple(err["loc"][:2]))
            if var is not None:
                where += f" (from ${var})"
            raise ConfigError(f"{source}: {where}: {err['msg']}") from None


class EndpointUnreachable(ConfigError):
    """A configured endpoint does not answer (a fact about the network, not about the configuration file)."""


def check_reachable(roles: RolesConfig, timeout_s: float = 3.0) -> None:
    """Raise :class:`EndpointUnreachable` naming role, URL and cause if an LLM endpoint does not answer
    ``GET /models`` within ``timeout_s`` (a bound nothing stretches: see :func:`evolve.reachability.http_get`)
    as an OpenAI-compatible API does: the models list (200) or an authentication error (401, 403). Any other status
    is a proxy or gateway answering for a host that is not there, or a server that is not such an API.
    """
    checked: set[str] = set()
    for name in ROLES:
        cfg = roles.role(name)
        if cfg.backend != "llm" or cfg.endpoint in checked:
            continue
        checked.add(cfg.endpoint)
        url = f"{cfg.endpoint}/models"
        answer = http_get(url, min(timeout_s, cfg.timeout_s), {"Authorization": f"Bearer {cfg.api_key()}"})
        if isinstance(answer, str):
            raise EndpointUnreachable(f"LLM role {name!r}: cannot reach {cfg.endpoint} ({url}): {answer}")
        status = answer[0]
        if status not in (200, 401, 403):
            raise EndpointUnreachable(f"LLM role {name!r}: {cfg.endpoint} is not an OpenAI-compatible endpoint: "
                                      f"GET {url} answers HTTP {status} (a proxy answering for an unreachable host, "
                                      "or another kind of server)")
