"""Verify: fail-fast gates, the critic, the probe screen, paired statistics and the decision contract."""
