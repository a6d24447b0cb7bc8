"""Which files may be served: the rules a promote or rollback target must meet before anything is written.

A target must be a ``.yaml``/``.yml`` path, not a symlink, outside the stores, inside the serving directory
(``--serving-dir``, else ``MEMEVOLVE_SERVING_DIR``, else ``strategies/`` under the working directory) unless
``allow_outside`` is given, and, if it exists, a regular file holding a strategy (a YAML mapping with every
top-level section the schema requires; an older schema's file still counts); its witness (``.witness`` beside it),
if it exists, must be a regular file too. Refusals name the path and the rule, never the file's content.
"""
from __future__ import annotations

import os
from pathlib import Path

from evolve.errors import EvolveError
from evolve.state.layout import StoreLayout
from evolve.files import MAX_TEXT_BYTES, read_bounded
from evolve.strategy import strict_yaml
from evolve.strategy.schema import load_schema

#: Suffix of the witness file beside a serving file (see :mod:`evolve.ops.witness`).
WITNESS_SUFFIX = ".witness"

#: Environment variable naming the serving directory.
SERVING_DIR_ENV = "MEMEVOLVE_SERVING_DIR"
SUFFIXES = (".yaml", ".yml")


class Refused(EvolveError):
    """An action was refused; the message says why (CLI exit code 1)."""


def serving_dir(configured: str | Path | None = None) -> Path:
    """The directory serving files live in: ``configured``, else :data:`SERVING_DIR_ENV`, else ``strategies/``."""
    return Path(configured or os.environ.get(SERVING_DIR_ENV) or "strategies").resolve()


def is_strategy_file(path: Path) -> bool:
    """Whether ``path`` holds a YAML mapping with every top-level section the schema requires."""
    try:
        loaded, _ = strict_yaml.load(read_bounded(path, MAX_TEXT_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, TypeError, ValueError):
        return False
    return isinstance(loaded, dict) and set(load_schema()["required"]) <= set(loaded)


def check_target(layout: StoreLayout, target: str | Path, *, directory: str | Path | None = None,
                 allow_outside: bool = False) -> Path:
    """The resolved serving path for ``target``, or :class:`Refused` naming the rule it breaks."""
    given = Path(target).absolute()
    if given.is_symlink():
        raise Refused(f"refused: {target} is a symbolic link; serving files must be regular files "
                      "(pass the real path)")
    path = given.resolve()
    if layout.contains(path):
        raise Refused(f"refused: {target} lies inside the stores {layout.root}; serving files live outside them")
    if path.suffix not in SUFFIXES:
        raise Refused(f"refused: {target} is not a .yaml/.yml path; serving files are strategy YAML files")
    home = serving_dir(directory)
    if not allow_outside and home.exists() and not home.is_dir():
        raise Refused(f"refused: the serving directory {home} is not a directory (set --serving-dir or "
                      f"{SERVING_DIR_ENV} to the directory serving files live in)")
    if not allow_outside and home not in path.parents:
        raise Refused(f"refused: {target} is outside the serving directory {home} (set --serving-dir or "
                      f"{SERVING_DIR_ENV}, or pass --allow-outside)")
    if path.exists() and not path.is_file():
        raise Refused(f"refused: {target} exists and is not a regular file")
    if path.exists() and not is_strategy_file(path):
        raise Refused(f"refused: {target} exists and is not a strategy file; it was not overwritten")
    witness = path.with_name(path.name + WITNESS_SUFFIX)
    if witness.is_symlink() or (witness.exists() and not witness.is_file()):
        raise Refused(f"refused: {witness} (the witness file of {target}) is a symbolic link or not a regular file; "
                      "the journal head is only appended to a regular file beside the serving file")
    return path
