"""The dependencies routes declare (FastAPI ``Depends``): the memory service, the strategy slot, the request
metrics, the model roles' usage, the operator's answers (for the canary guard), a validated user id, and the caller
admitted for a scope (``Security``: an API key under ``--auth``, every refusal audited). ``create_app`` puts the
objects on ``app.state``."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path as PathParam, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer, SecurityScopes

from evolve.errors import EvolveError
from evolve.runtime.usage import UsageStats
from evolve.serve.access import Access, Caller
from evolve.serve.answers import Answer
from evolve.serve.backend import USER_ID, valid_user
from evolve.serve.memory import MemoryService
from evolve.serve.metrics import Metrics
from evolve.serve.strategy import StrategySlot


class Problem(EvolveError):
    """A request refused with ``status`` and a message (the service's JSON error)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _memory(request: Request) -> MemoryService:
    return request.app.state.memory


def _slot(request: Request) -> StrategySlot:
    return request.app.state.slot


def _metrics(request: Request) -> Metrics:
    return request.app.state.metrics


def _usage(request: Request) -> UsageStats | None:
    return request.app.state.usage


def _answers(request: Request) -> dict[tuple[str, str], str]:
    return request.app.state.answers


def _user(user: Annotated[str, PathParam(description="The user (tenant) whose memory is read or written: letters, "
                                                     "digits, '_', '-', '.', at most 128 characters.",
                                         max_length=200)]) -> str:
    """The path's user id; 400 unless it is one (:data:`evolve.serve.backend.USER_ID`, no ``..``)."""
    if not valid_user(user):
        raise Problem(400, f"invalid user id {user!r}: must match {USER_ID.pattern} and hold no '..'")
    return user


Memory = Annotated[MemoryService, Depends(_memory)]
Slot = Annotated[StrategySlot, Depends(_slot)]
RequestMetrics = Annotated[Metrics, Depends(_metrics)]
Usage = Annotated[UsageStats | None, Depends(_usage)]
UserId = Annotated[str, Depends(_user)]
Answers = Annotated[dict[tuple[str, str], Answer], Depends(_answers)]


def _access(request: Request) -> Access:
    return request.app.state.access


_bearer = HTTPBearer(auto_error=False, description="an API key from `memevolve keys add` (with --auth)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _for_user(scopes: SecurityScopes, access: Annotated[Access, Depends(_access)], user: UserId,
              credentials: Credentials, request: Request) -> Caller:
    """The caller of a route on one user's memory, admitted for the route's scope and that user (kept on the
    request, so a failure after admission is audited under its key: :func:`admitted`)."""
    caller = access.admit(scopes.scopes[0], credentials.credentials if credentials else None, user, _route(request))
    request.state.admitted = (caller, user)
    return caller


def _route(request: Request) -> str:
    """The request's method and route template (``POST /v1/users/{user}/recall``): what repeated refusals share."""
    return f"{request.method} {getattr(request.scope.get('route'), 'path', request.url.path)}"


def admitted(request: Request) -> tuple[Caller, str] | None:
    """The caller a user route admitted for this request, and the user (``None`` before or without admission)."""
    return getattr(request.state, "admitted", None)


def _for_service(scopes: SecurityScopes, access: Annotated[Access, Depends(_access)],
                 credentials: Credentials, request: Request) -> Caller:
    """The caller of a route on the service itself, admitted for the route's scope (``admin``)."""
    return access.admit(scopes.scopes[0], credentials.credentials if credentials else None, None, _route(request))


Capturer = Annotated[Caller, Security(_for_user, scopes=["capture"])]
Recaller = Annotated[Caller, Security(_for_user, scopes=["recall"])]
Answerer = Annotated[Caller, Security(_for_user, scopes=["answer"])]
Eraser = Annotated[Caller, Security(_for_user, scopes=["erase"])]
#: A service route's dependency: the caller holds the ``admin`` scope.
ADMIN = Security(_for_service, scopes=["admin"])
