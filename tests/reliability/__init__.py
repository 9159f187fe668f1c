"""Reliability suite: fuzzing, fault injection, concurrency (issue 16)."""
