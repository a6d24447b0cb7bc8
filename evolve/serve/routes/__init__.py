"""The service's HTTP routes, one router per concern; their shared dependencies in :mod:`.deps`."""
