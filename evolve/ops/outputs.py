"""Where command outputs may be written: the rules every output option (``report --out/--markdown``,
``eval --out``, ``--summary-out``, ``replay --json``, ``capture-export --out``) checks before any work, so that no
output replaces state.

An output path must not be a symbolic link (nor resolve through a loop), must not lie inside a stores directory
(the one given, or any directory holding ``state.json`` or ``journal.jsonl``), must not be a serving file, a
strategy file or a witness (``*.witness``), nor be or lie in a path the command protects (what it reads: a serving
file, a recall log, a service's data directory), and, if it exists, must be a regular file. Refusals are
:class:`~evolve.files.StoreError` naming the option, the path and the rule (CLI exit code 2). The writes
themselves go through :func:`~evolve.files.atomic_write_bytes`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from evolve.ops.drift import serving_targets
from evolve.ops.targets import WITNESS_SUFFIX, is_strategy_file
from evolve.files import StoreError, require_output_dir
from evolve.state.entries import JournalEntry

#: Files whose presence marks a directory as stores.
STORES_MARKERS = ("state.json", "journal.jsonl")


def _refuse(option: str, path: Path, rule: str) -> StoreError:
    return StoreError(f"{option} {path}", f"refused: {rule}; nothing was written")


def _resolved(option: str, path: Path) -> Path:
    if path.is_symlink():
        raise _refuse(option, path, "is a symbolic link; outputs are written to regular files only (pass the real "
                                    "path)")
    try:
        return path.resolve(strict=False)
    except (RuntimeError, OSError) as exc:  # a symlink loop in a parent
        raise _refuse(option, path, f"cannot be resolved ({exc})") from None


def enclosing_stores(path: Path) -> Path | None:
    """The stores directory ``path`` (resolved) is or lies in, if any."""
    for directory in (path, *path.parents):
        if directory.is_dir() and any((directory / m).is_file() for m in STORES_MARKERS):
            return directory
    return None


def protect(paths: Iterable[str | Path], what: str) -> dict[Path, str]:
    """``paths`` resolved, each mapped to ``what``, as :func:`check_output_file`'s ``protected`` (a path that cannot
    be resolved is left out: no output resolves to it)."""
    out = {}
    for path in paths:
        try:
            out[Path(path).resolve()] = what
        except (RuntimeError, OSError):  # a symlink loop
            continue
    return out


def served_files(entries: list[JournalEntry]) -> dict[Path, str]:
    """The serving files the journal ``entries`` name, as :func:`check_output_file`'s ``protected``."""
    return protect(serving_targets(entries), "a serving file the journal names")


def check_output_file(option: str, path: str | Path, *, protected: Mapping[Path, str] | None = None,
                      new_dirs: bool = True) -> Path:
    """The resolved path of output file ``path`` given as ``option``; :class:`StoreError` naming the broken rule.

    ``protected`` maps further paths (resolved files or directories) the output must not be nor lie in to what each
    is, e.g. the serving files a journal names. Without ``new_dirs`` the output's directory must already exist (an
    output written after state is committed, which must not fail then).
    """
    given = Path(path)
    resolved = _resolved(option, given)
    stores = enclosing_stores(resolved.parent)
    if stores is not None:
        raise _refuse(option, given, f"lies inside the stores {stores}; outputs are written outside them")
    if resolved.name.endswith(WITNESS_SUFFIX):
        raise _refuse(option, given, "is a witness file (*.witness) of a serving file")
    for kept, what in (protected or {}).items():
        if kept == resolved or kept in resolved.parents:
            raise _refuse(option, given, f"is {what}" if kept == resolved else f"lies in {what} {kept}")
    if resolved.exists() and not resolved.is_file():
        raise _refuse(option, given, "exists and is not a regular file (a directory, device, pipe or socket)")
    if resolved.exists() and is_strategy_file(resolved):
        raise _refuse(option, given, "holds a strategy (a serving or strategy file); outputs never replace one")
    require_output_dir(resolved.parent)
    if not new_dirs and not resolved.parent.is_dir():
        raise _refuse(option, given, f"its directory {resolved.parent} does not exist; create it first")
    return resolved


def check_output_dir(option: str, path: str | Path, files: tuple[str, ...]) -> Path:
    """The resolved output directory ``path`` that will receive ``files``; :class:`StoreError` naming the rule."""
    given = Path(path)
    resolved = _resolved(option, given)
    stores = enclosing_stores(resolved)
    if stores is not None:
        raise _refuse(option, given, f"lies inside the stores {stores}; outputs are written outside them")
    require_output_dir(resolved)
    for name in files:
        check_output_file(option, resolved / name)
    return resolved
