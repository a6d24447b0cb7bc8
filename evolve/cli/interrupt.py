"""Ctrl-C and SIGTERM: one line on stderr, exit 130 (SIGINT) or 143 (SIGTERM), no traceback.

Both signals raise :class:`Interrupted` in the main thread, so ``finally`` blocks release the stores' lock and
close files as after any error; every write of state is atomic, so nothing committed is lost. The codes follow the
shell's 128 + signal number and differ from 1 (refused) and 2 (bad input).
"""
from __future__ import annotations

import signal
import threading

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Interrupted(KeyboardInterrupt):
    """The run was interrupted by ``signum``; ``message`` (when set) says where and what resumes it."""

    def __init__(self, message: str = "", signum: int = signal.SIGINT):
        super().__init__(message)
        self.message, self.signum = message, signum


def _raise(signum: int, frame: object) -> None:
    raise Interrupted(signum=signum)


def install() -> None:
    """Make SIGINT and SIGTERM raise :class:`Interrupted` (in the main thread only, where handlers can be set)."""
    if threading.current_thread() is threading.main_thread():
        for signum in EXIT_CODES:
            signal.signal(signum, _raise)


def where(exc: KeyboardInterrupt, message: str) -> Interrupted:
    """``exc`` (a signal's exception) as an :class:`Interrupted` that says ``message``."""
    return Interrupted(message, getattr(exc, "signum", signal.SIGINT))


def report(exc: KeyboardInterrupt, command: str) -> tuple[str, int]:
    """The line to print for ``exc`` in ``command`` and the exit code."""
    signum = getattr(exc, "signum", signal.SIGINT)
    message = getattr(exc, "message", "") or (
        "interrupted at start-up; nothing lost; `memevolve run` resumes" if command == "run" else
        f"interrupted during `memevolve {command}`; nothing lost (every write is atomic); run it again")
    return f"{message} ({signal.Signals(signum).name})", EXIT_CODES[signum]
