"""Writes of the sessions app, one module per topic (import from the module, e.g. ``sessions.services.append``)."""
