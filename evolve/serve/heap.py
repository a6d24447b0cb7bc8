"""Handing the memory of unloaded users back to the operating system.

CPython frees a dropped memory's objects, but glibc's allocator keeps the freed pages for reuse, so a service that
loads and unloads users under ``--max-users`` grows by a few MB per user ever loaded until its heap settles.
Trimming the heap after unloads keeps the resident set near the bound (see ``experiments/bench/bench_serve_users.py``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache
from typing import Callable


@lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or ``None`` on another C library (nothing to trim there)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release() -> None:
    """Return the C heap's free pages to the operating system."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
