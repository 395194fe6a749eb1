"""Stored tool outputs: blob store, reads, grep, append ingest, GC, tool budget, built-in tools."""
