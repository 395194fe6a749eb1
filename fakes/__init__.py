"""Fakes shared by the test suite and the benchmarks: local upstreams that answer
as the Anthropic Messages, OpenAI Chat Completions and Responses APIs do
(streams included) and reject what they reject, scripted agents, a flooding
agent, and the pinned agent CLIs run offline. Test-only helpers (hypothesis
strategies) stay in tests/fakes."""
