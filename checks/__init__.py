"""Checks: the seeds' practices as rules, the findings engine and the cross-layer verdict."""
