"""The one context build: a read-only preview, and the service an LLM call uses."""
