"""memevolve: offline strategy-evolution optimizer for LLM-agent memory systems."""

__version__ = "0.1.0"
