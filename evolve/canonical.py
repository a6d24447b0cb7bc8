"""Canonical JSON and content hashes: equal data always serialises, and hashes, equal (used by every layer)."""
from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(data: Any) -> str:
    """Compact JSON with sorted keys: equal data always serialises (and hashes) equal."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_hash(data: Any) -> str:
    """SHA-256 of the canonical JSON form of ``data``."""
    return sha256_hex(canonical_json(data).encode("utf-8"))
