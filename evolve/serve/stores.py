"""Open the store a service, replay or export reads: a directory (the embedded file store) or a
``postgresql://`` URL (the shared database)."""
from __future__ import annotations

from evolve.serve.backend import Backend

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_backend(spec: str) -> Backend:
    """The backend ``spec`` names."""
    if spec.startswith(POSTGRES_SCHEMES):
        from evolve.serve.pgstore import PostgresBackend

        return PostgresBackend(spec)
    from evolve.serve.filestore import FileBackend

    return FileBackend(spec)
