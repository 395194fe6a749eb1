"""Prompting: prompt sections and cache breakpoints, tool deferral and search, cache accounting, and the context build."""
