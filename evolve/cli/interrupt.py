"""Ctrl-C and SIGTERM: one line on stderr, exit 130 (SIGINT) or 143 (SIGTERM), no traceback.

Both signals raise :class:`KeyboardInterrupt` (carrying ``signum``) in the main thread, so ``finally`` blocks
release the stores' lock and close files as after any error; every write of state is atomic, so nothing committed is
lost. The codes follow the shell's 128 + signal number and differ from 1 (refused) and 2 (bad input).

An exception raised inside a C extension's import fails that import for good, and one raised inside a ``__del__`` or a
weakref callback is printed and dropped by Python. So start-up work runs :func:`deferred` (the signal is raised when it
ends), and an interrupt that Python dropped is delivered again.
"""
from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def interrupted(signum: int, message: str = "") -> KeyboardInterrupt:
    """A :class:`KeyboardInterrupt` for ``signum`` whose ``message`` (when set) says where and what resumes."""
    exc = KeyboardInterrupt(message)
    exc.signum, exc.message = signum, message  # type: ignore[attr-defined]
    return exc


_received: list[int] = []
_deferring: list[bool] = []  # non-empty inside deferred()


def _raise(signum: int, frame: object) -> None:
    if _received:  # a second signal while the first one's clean-up runs: leave at once (every write is atomic)
        os.write(2, f"interrupted again ({signal.Signals(signum).name}); left at once, nothing lost\n".encode())
        os._exit(EXIT_CODES[signum])
    _received.append(signum)
    if not _deferring:
        raise interrupted(signum)


def _redeliver(hook):
    """``sys.unraisablehook`` that delivers again an interrupt Python dropped (raised in a ``__del__`` or a weakref
    callback), and passes anything else to ``hook``."""
    def unraisable(info) -> None:
        signum = getattr(info.exc_value, "signum", None)
        if signum is None or not isinstance(info.exc_value, KeyboardInterrupt):
            hook(info)
            return
        _received.clear()  # raised again from another thread a moment later, once the callback has returned
        threading.Timer(0.05, _thread.interrupt_main, (signum,)).start()
    return unraisable


@contextmanager
def deferred() -> Iterator[None]:
    """Within the block (imports of C extensions, model loading) a signal is only recorded; it is raised as
    :func:`interrupted` when the block ends."""
    _deferring.append(True)
    try:
        yield
    finally:
        _deferring.pop()
    if _received and not _deferring:
        raise interrupted(_received[0])


@contextmanager
def handled() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM raise :func:`interrupted` (in the main thread only, where handlers can
    be set), and a second signal during the clean-up exits at once with its code; the previous handlers after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {signum: signal.signal(signum, _raise) for signum in EXIT_CODES}
    hook, sys.unraisablehook = sys.unraisablehook, _redeliver(sys.unraisablehook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def where(exc: KeyboardInterrupt, message: str) -> KeyboardInterrupt:
    """``exc`` (a signal's exception) as one that says ``message``."""
    return interrupted(getattr(exc, "signum", signal.SIGINT), message)


def report(exc: KeyboardInterrupt, command: str) -> tuple[str, int]:
    """The line to print for ``exc`` in ``command`` and the exit code."""
    signum = getattr(exc, "signum", signal.SIGINT)
    message = getattr(exc, "message", "") or (
        "interrupted at start-up; nothing lost; `memevolve run` resumes" if command == "run" else
        f"interrupted during `memevolve {command}`; nothing lost (every write is atomic); run it again" if command else
        "interrupted; nothing lost (every write is atomic); run the command again")
    return f"{message} ({signal.Signals(signum).name})", EXIT_CODES[signum]
