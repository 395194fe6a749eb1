"""The drop-in proxy: Anthropic Messages and OpenAI Chat Completions served with the managed context."""
