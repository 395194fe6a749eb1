"""Prompt state, cache policy, tool deferral, sections and cache accounting, by topic."""
