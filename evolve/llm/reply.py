"""The chat-completion reply as the client uses it, validated once from the response body.

An endpoint may answer HTTP 200 with anything: ``"choices": "nope"``, ``usage`` fields that are null, strings or
negative, a body that is not JSON. :func:`parse_reply` turns the body into a :class:`ChatReply` or raises
:class:`MalformedReply` saying which field breaks which rule; the client treats that like any transient failure
(retried, then the role's error policy).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evolve.errors import EvolveError


class MalformedReply(EvolveError, ValueError):
    """The response body is not a chat completion the client can use; the message names the field and the rule."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class ReplyMessage(_Wire):
    content: str


class ReplyChoice(_Wire):
    message: ReplyMessage


class ReplyUsage(_Wire):
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)


class ChatReply(_Wire):
    """The first choice's text and the token usage the endpoint reported (``None`` when it reported none)."""

    choices: list[ReplyChoice] = Field(min_length=1)
    usage: ReplyUsage | None = None

    @property
    def content(self) -> str:
        return self.choices[0].message.content


def parse_reply(body: bytes) -> ChatReply:
    """The validated reply in ``body``; :class:`MalformedReply` naming the first field that breaks a rule."""
    try:
        return ChatReply.model_validate_json(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "<body>"
        raise MalformedReply(f"malformed reply: {where}: {err['msg']}") from None
