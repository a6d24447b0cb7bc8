"""Content-addressed cache of LLM responses, so a rerun replays exactly without network calls.

The key is the SHA-256 of the canonical JSON of (role, model name, messages, request parameters);
the endpoint is deliberately not part of it, so the same model served elsewhere replays the same answers.
Entries live in ``<root>/<key[:2]>/<key>.json`` and are written atomically; an entry made for one conversation names
its subject key (:mod:`evolve.runtime.subject`), so :meth:`ResponseCache.forget` finds it when the conversation is
erased. An entry that cannot be used (not
UTF-8 JSON, not the response entry for its key, text that is not valid Unicode) is dropped from the cache with a
warning naming its file, and the request is sent again.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Callable

from evolve.errors import EvolveError
from evolve.safe_text import surrogate_at
from evolve.files import atomic_write_text, os_error, read_bounded
from evolve.canonical import canonical_json
from evolve.runtime.subject import current_subject

log = logging.getLogger(__name__)


class CacheError(EvolveError, RuntimeError):
    """A cache entry cannot be read; names the file."""


def cache_key(role: str, model: str, messages: list[dict], params: dict[str, Any]) -> str:
    payload = {"role": role, "model": model, "messages": messages, "params": params}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


#: Largest cache entry read (bytes): a reply is cut to ``max_tokens`` before it is cached.
MAX_ENTRY_BYTES = 64 * 2**20


def _malformed(data: bytes, key: str) -> str | None:
    """What makes ``data`` unusable as the response entry for ``key``, or None."""
    try:
        entry = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return f"not UTF-8 at byte {exc.start}"
    except json.JSONDecodeError as exc:
        return f"{exc.msg} at line {exc.lineno}"
    if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("content"), str):
        return f"not a response entry for key {key}"
    at = surrogate_at(entry["content"])
    return None if at is None else f"reply text holds a lone surrogate at position {at}"


class ResponseCache:
    """Response entries under ``root`` (created on first write)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored entry for ``key``, or None (also when a malformed entry was just dropped, see the module)."""
        path = self.path(key)
        try:
            data = read_bounded(path, MAX_ENTRY_BYTES)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CacheError(f"{path}: cannot read cache entry ({exc})") from None
        problem = _malformed(data, key)
        if problem is None:
            return json.loads(data)
        log.warning("dropped a malformed LLM cache entry %s (%s); the request is sent again", path, problem)
        try:
            path.unlink()
        except OSError as exc:
            raise CacheError(f"{path}: malformed cache entry ({problem}) cannot be removed ({exc})") from None
        return None

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
        """Store ``entry`` (which gains ``key``, and the subject of the context, if any) atomically: temp file, fsync,
        rename."""
        subject = current_subject()
        entry = {**entry, "key": key, **({"subject": subject} if subject else {})}
        atomic_write_text(self.path(key), json.dumps(entry, sort_keys=True, ensure_ascii=False, indent=1))

    def forget(self, held: Callable[[str | None, str], bool]) -> list[Path]:
        """Delete every entry that ``held(subject, said)`` selects (``subject``: the subject key it was made for, if
        any; ``said``: its request's messages and its reply), and every entry that cannot be read; the files
        deleted."""
        gone = []
        for path in sorted(self.root.glob("*/*.json")):
            if len(path.stem) != 64 or path.parent.name != path.stem[:2]:
                continue  # not an entry of this cache
            try:
                entry = json.loads(path.read_text(encoding="utf-8"))
                said = "\n".join([str(m.get("content", "")) for m in entry.get("messages", ())] +
                                  [str(entry.get("content", ""))])
                hit = held(entry.get("subject"), said)
            except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError):
                hit = True
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise os_error(path, exc, "read a cache entry") from None
            if hit:
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    raise os_error(path, exc, "erase a cache entry") from None
                gone.append(path)
        return gone


class NoCache(ResponseCache):
    """Keeps no response: every request goes to the endpoint. For a service, whose prompts hold users' words that
    erasing a user must remove (extraction is memoised per user, in memory, instead)."""

    def __init__(self) -> None:
        super().__init__(Path("."))

    def get(self, key: str) -> dict | None:
        return None

    def put(self, key: str, entry: dict) -> None:
        pass

    def mean_completion_tokens(self, role: str, model: str, sample: int = 200, scan: int = 2000) -> float | None:
        return None
