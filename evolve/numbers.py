"""The one test for a real number in loaded data: JSON and YAML give ints and floats, and a bool is not one."""
from __future__ import annotations

from typing import Any


def is_real(value: Any) -> bool:
    """Whether ``value`` is an int or a float (``True`` and ``False`` are not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
