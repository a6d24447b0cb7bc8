"""The one rule for where a command finds its run config and its stores.

Every command that reads or writes stores (``run``, ``candidates``, ``show``, ``flags``, ``escalations``,
``report``, ``promote``, ``rollback``, ``journal verify``, ``serving``) takes ``--config PATH``; without it the run config is
``$MEMEVOLVE_CONFIG``, else ``experiments/nightly.yaml`` when that file exists. The stores are ``--stores`` when
given, else the run config's ``stores``, else ``stores/``.
"""
from __future__ import annotations

import os
from pathlib import Path

CONFIG_ENV = "MEMEVOLVE_CONFIG"
DEFAULT_CONFIG = Path("experiments") / "nightly.yaml"
DEFAULT_STORES = Path("stores")
CONFIG_HELP = (f"run config (default: ${CONFIG_ENV}, else {DEFAULT_CONFIG} if it exists); its relative paths "
               "resolve from the directory it is named in (for a symlink, the link's directory, not its target's)")


def config_path(given: str | Path | None) -> Path | None:
    """The run config a command uses: ``given``, ``$MEMEVOLVE_CONFIG``, or the nightly config if present."""
    if given:
        return Path(given)
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    return DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None


def stores_dir(stores: str | Path | None, config: str | Path | None) -> Path:
    """The stores a read command uses: ``stores``, else the run config's, else ``stores/``."""
    if stores:
        return Path(stores)
    path = config_path(config)
    if path is None:
        return DEFAULT_STORES
    from evolve.loop.config import load_config

    return load_config(path, check_files=False).stores
