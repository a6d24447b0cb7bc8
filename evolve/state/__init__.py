"""Persistent optimizer state: crash-safe files, the stores and their round commit, journal and checkpoint."""
