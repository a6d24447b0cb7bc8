"""Command-line interface (``memevolve``)."""
from evolve.cli.main import main

__all__ = ["main"]
