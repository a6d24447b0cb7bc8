"""Content-addressed cache of LLM responses, so a rerun replays exactly without network calls.

The key is the SHA-256 of the canonical JSON of (role, model name, messages, request parameters);
the endpoint is deliberately not part of it, so the same model served elsewhere replays the same answers.
Entries live in ``<root>/<key[:2]>/<key>.json`` and are written atomically.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from evolve.errors import EvolveError
from evolve.state.files import atomic_write_text
from evolve.canonical import canonical_json


class CacheError(EvolveError, RuntimeError):
    """A cache entry cannot be read; names the file."""


def cache_key(role: str, model: str, messages: list[dict], params: dict[str, Any]) -> str:
    payload = {"role": role, "model": model, "messages": messages, "params": params}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


class ResponseCache:
    """Response entries under ``root`` (created on first write)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored entry for ``key``, or None."""
        path = self.path(key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            entry = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CacheError(f"{path}: corrupt cache entry ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("content"), str):
            raise CacheError(f"{path}: not a response entry for key {key}")
        return entry

    def mean_completion_tokens(self, role: str, model: str, sample: int = 200, scan: int = 2000) -> float | None:
        """Mean completion tokens of up to ``sample`` cached replies of ``role``/``model`` (looking at no more than
        ``scan`` entries), or None when there are none."""
        sizes: list[int] = []
        for i, path in enumerate(self.root.glob("*/*.json")):
            if i >= scan or len(sizes) >= sample:
                break
            try:
                entry = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            if entry.get("role") == role and entry.get("model") == model and isinstance(entry.get("usage"), dict):
                sizes.append(int(entry["usage"].get("completion_tokens", 0)))
        return sum(sizes) / len(sizes) if sizes else None

    def put(self, key: str, entry: dict) -> None:
        """Store ``entry`` (which gains ``key``) atomically: temp file, fsync, rename."""
        atomic_write_text(self.path(key), json.dumps({**entry, "key": key}, sort_keys=True, ensure_ascii=False, indent=1))
