"""Compaction runs (issue 4)."""
