"""Provider formats (Anthropic Messages, OpenAI Chat Completions) to and from the transcript: pure converters, SSE parsing and stream accumulation, client-view fingerprints."""
