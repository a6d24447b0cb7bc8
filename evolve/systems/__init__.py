"""Adapters of memory systems this project did not write, for ``runtime: {adapter: ...}`` (see
:mod:`evolve.runtime.external`). Each imports its system lazily: it is an optional install."""
