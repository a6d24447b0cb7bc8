"""The memory service: the promoted strategy serving per-user memory over HTTP (``memevolve serve``)."""
