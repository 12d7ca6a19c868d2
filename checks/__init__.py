"""Checks: the white papers' practices as rules, the findings engine and the cross-layer verdict."""
