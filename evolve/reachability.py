"""Bounded HTTP probes: whether a URL answers at all, within a deadline nothing can stretch.

``urllib``'s timeout applies to each socket operation, not to the request: name resolution is not covered, and a
server that trickles its answer a byte at a time never times out. :func:`http_get` runs the request in a
daemon thread and stops waiting at the deadline.
"""
from __future__ import annotations

import threading
import urllib.error
import urllib.request
from typing import Mapping


#: How much of an answer's body is read.
MAX_BODY = 1 << 16


def http_get(url: str, timeout_s: float, headers: Mapping[str, str] | None = None) -> tuple[int, bytes] | str:
    """The HTTP status and (the start of) the body ``GET url`` answers within ``timeout_s`` in all, or a string
    saying why it answers none."""
    outcome: list[tuple[int, bytes] | str] = [f"no HTTP answer within {timeout_s:g}s"]

    def get() -> None:
        request = urllib.request.Request(url, headers=dict(headers or {}))
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                outcome[0] = (response.status, response.read(MAX_BODY))
        except urllib.error.HTTPError as exc:
            outcome[0] = (exc.code, exc.read(MAX_BODY))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            outcome[0] = str(getattr(exc, "reason", None) or exc)

    thread = threading.Thread(target=get, daemon=True, name=f"probe {url}")
    thread.start()
    thread.join(timeout_s)
    return outcome[0] if not thread.is_alive() else f"no HTTP answer within {timeout_s:g}s"
