"""The project's exception roots: every exception it raises derives from :class:`EvolveError`; those that are the
user's to fix (bad input, configuration or stores) from :class:`UserError`, which the CLI reports in one line with
exit code 2. Any other :class:`EvolveError` reaching the CLI is a fault of the optimizer."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class EvolveError(Exception):
    """Root of every exception the project raises."""


class UserError(EvolveError):
    """Bad input, configuration or stores; the message says what to fix."""


class ConfigError(UserError, ValueError):
    """A run or role configuration is unusable; the message names the source and the field."""


def first_problem(exc: "ValidationError", whole: str = "") -> tuple[str, str]:
    """The dotted field path (``whole`` when the problem is the input as a whole) and the message of the first
    problem of a pydantic validation error: how every stored or sent record names what is wrong."""
    first = exc.errors()[0]
    return ".".join(map(str, first["loc"])) or whole, first["msg"]
