"""Summary prompts and summary requests, and what a summariser is
(docs/concepts/compaction.md#summary-request, docs/concepts/compaction.md#sandwich).

Pure: messages in, a request or a text out. A summariser is anything with
``complete(SummaryRequest) -> SummaryResult``; the ones that call the Anthropic,
Chat Completions and Gemini APIs live in ``compaction/`` (the engine never touches the
network), the deterministic one in ``engine.offline_summarizer``.

Two request kinds:

- ``retain_summary`` (docs/concepts/compaction.md#summary-request): the prepared messages, then the
  interrupt — a user message asking for ``<retain>`` and ``<summary>`` — sent
  without tools; neither the interrupt nor the raw answer stays in history.
- ``compress`` (docs/concepts/compaction.md#compression-prompt): one user message, the compression
  prompt with the excerpt formatted as text.

What goes to an LLM carries no ``tool_use`` / ``tool_result`` blocks at all:
the API rejects tool blocks in a request that defines no tools, so calls and
results are rendered as text (``render_for_llm``). The rule of
docs/concepts/compaction.md#strip-trailing-calls — a trailing assistant ``tool_calls`` message
becomes content-only, or is dropped — is applied first (``strip_trailing_tool_calls``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from contextsvc.engine.build import ContextParts, build_request, system_reminder
from contextsvc.engine.errors import EngineUnavailableError, EngineValidationError
from contextsvc.engine.messages import Message
from contextsvc.engine.recall import SEARCH_PROMPT_NOTE
from contextsvc.engine.summary_prefix import kept_note, prefix_body, prefix_messages
from contextsvc.engine.tokens import compact_json

SummaryKind = Literal["retain_summary", "compress"]

# Who may write a session's summaries (``CONTEXTSVC_SUMMARIZER``,
# ``policy.compaction.summarizer``); ``auto`` picks one per session.
SUMMARIZERS: tuple[str, ...] = ("auto", "offline", "anthropic", "openai", "gemini")

# docs/concepts/compaction.md#summary-request: the default summary prompt (<summary> tags).
DEFAULT_SUMMARY_PROMPT = """\
Your context window is nearly full, so the conversation above will be replaced by a summary. \
Write that summary now: it is all you will have to continue the work.

Inside <summary></summary> tags, cover:
1. The user's requests and intent, in order, with their exact constraints.
2. Key decisions, what was tried, and why it did or did not work.
3. Files, functions and commands involved (exact paths).
4. Errors met and how they were resolved, or that they are still open.
5. The current state of the work and the next step.

Do not call tools. Do not add greetings or filler."""

# docs/concepts/compaction.md#directives: the retain section's instruction (<retain> tags).
DEFAULT_RETAIN_PROMPT = """\
Before the summary, inside <retain></retain> tags, list verbatim as bullets the facts that must \
survive word for word: the user's explicit requests and constraints, exact file paths, exact error \
messages, tool output refs (ref=...), and open TODOs."""

# docs/concepts/compaction.md#compression-prompt.
DEFAULT_COMPRESSION_PROMPT = """\
Summarize this conversation excerpt concisely. Preserve:
- Key facts and decisions made
- Important context needed to continue the discussion
- User preferences or requirements mentioned
- Any commitments or action items

Do not include greetings or filler. Focus on information density.

Conversation:
---
{formatted_messages}
---"""

SUMMARY_SYSTEM = (
    "You summarise an agent's conversation so that the agent can continue its work from the "
    "summary alone. Answer with text only; never call tools."
)

# docs/concepts/context-build.md#summary-placement: the summary is shown as "[Earlier conversation
# summary: {summary}]".
SANDWICH_SUMMARY_FORMAT = "[Earlier conversation summary: {summary}]"

# Rendering limits for what an LLM (or the offline summariser) is shown.
MAX_ARGUMENT_CHARS = 2_000
_RETAIN_RE = re.compile(r"<retain>(.*?)(?:</retain>|$)", re.DOTALL | re.IGNORECASE)
_SUMMARY_RE = re.compile(r"<summary>(.*?)(?:</summary>|$)", re.DOTALL | re.IGNORECASE)


# --- prompts ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromptConfig:
    """The prompt settings of docs/concepts/compaction.md#retain-summary, plus the compression
    prompt (docs/concepts/compaction.md#compression-prompt).

    ``retain_prompt``: None means the default, "" disables the retain section.
    ``instructions`` come from a manual request (``POST /compact``) and are
    appended to the summary prompt after the policy's directives.
    """

    summary_prompt: str | None = None
    summary_directives: tuple[str, ...] = ()
    retain_prompt: str | None = None
    retain_directives: tuple[str, ...] = ()
    compression_prompt: str | None = None
    instructions: str = ""

    def __post_init__(self) -> None:
        template = self.compression_prompt
        if template is not None and "{formatted_messages}" not in template:
            raise EngineValidationError(
                "compression_prompt must contain {formatted_messages}",
                field="policy.compaction.compression_prompt",
            )


def bullets(items: Sequence[str]) -> str:
    """docs/concepts/compaction.md#directives: directives are appended as a bulleted list."""
    return "\n".join(f"- {item.strip()}" for item in items if item and item.strip())


def build_interrupt(config: PromptConfig, search_hint: bool = False) -> str:
    """The instruction of docs/concepts/compaction.md#summary-request (retain + summary
    instructions, the search note)."""
    parts: list[str] = []
    retain_prompt = DEFAULT_RETAIN_PROMPT if config.retain_prompt is None else config.retain_prompt
    if retain_prompt.strip():
        parts.append(retain_prompt.strip())
        if config.retain_directives:
            parts.append(bullets(config.retain_directives))
    parts.append((config.summary_prompt or DEFAULT_SUMMARY_PROMPT).strip())
    if search_hint:
        parts.append(SEARCH_PROMPT_NOTE)
    extra = [*config.summary_directives]
    if config.instructions.strip():
        extra.append(config.instructions.strip())
    if extra:
        # docs/concepts/compaction.md#directives: appended, never replacing the prompt.
        parts.append("Additional instructions:\n" + bullets(extra))
    return "\n\n".join(parts)


def wants_retain(config: PromptConfig) -> bool:
    prompt = DEFAULT_RETAIN_PROMPT if config.retain_prompt is None else config.retain_prompt
    return bool(prompt.strip())


def extract_retain_summary(text: str) -> tuple[str, str]:
    """docs/concepts/compaction.md#summary-request: the text of ``<retain>`` and ``<summary>``.

    A missing closing tag (an answer cut at max_tokens) takes the rest of the
    text; a missing ``<summary>`` tag takes everything outside ``<retain>``.
    """
    retain_match = _RETAIN_RE.search(text)
    retain = retain_match.group(1).strip() if retain_match else ""
    summary_match = _SUMMARY_RE.search(text)
    if summary_match:
        summary = summary_match.group(1).strip()
    else:
        rest = text[: retain_match.start()] + text[retain_match.end() :] if retain_match else text
        summary = rest.strip()
    return retain, summary


# --- preparing messages -------------------------------------------------------------


def strip_trailing_tool_calls(messages: Sequence[Message]) -> list[Message]:
    """docs/concepts/compaction.md#strip-trailing-calls: a last assistant message with tool_calls
    becomes content-only, or is dropped when it has no content (its results are not there: the pair
    would be broken in the summary request)."""
    out = list(messages)
    if out and out[-1].role == "assistant" and out[-1].tool_calls:
        last = out[-1]
        if last.context_text.strip() or (isinstance(last.content, list) and last.part_count):
            out[-1] = replace(last, tool_calls=(), token_count=None)
        else:
            out.pop()
    return out


def _call_text(message: Message) -> str:
    lines = []
    for call in message.tool_calls:
        args = compact_json(call.arguments)
        if len(args) > MAX_ARGUMENT_CHARS:
            args = args[:MAX_ARGUMENT_CHARS] + "…"
        lines.append(f"[tool call {call.name} id={call.id}: {args}]")
    return "\n".join(lines)


def _result_header(message: Message) -> str:
    ref = f" ref={message.output_ref}" if message.output_ref else ""
    return f"[tool result {message.name or 'tool'} id={message.tool_call_id}{ref}]"


def _plain_text(message: Message) -> str:
    if message.view is None and isinstance(message.content, list):
        out = []
        for part in message.content:
            kind = part.get("type", "text")
            out.append(str(part.get("text", "")) if kind == "text" else f"[{kind}]")
        return "\n".join(p for p in out if p)
    return message.context_text


def render_for_llm(messages: Sequence[Message]) -> list[Message]:
    """Messages as plain user/assistant text: tool calls and results become text.

    A request without tools may not carry tool blocks, and provider rules
    about call/result adjacency no longer apply to text. Leading assistant
    text gets a user message before it (the first message must be a user's).
    """
    out: list[Message] = []
    for msg in messages:
        if msg.role == "tool":
            text = f"{_result_header(msg)}\n{msg.context_text}".rstrip()
            out.append(Message(role="user", content=text))
            continue
        if msg.role == "system":
            # The summariser's request takes no system role in its history.
            if msg.context_text.strip():
                out.append(Message(role="user", content=system_reminder(msg)))
            continue
        text = _plain_text(msg)
        if msg.role == "assistant" and msg.tool_calls:
            text = f"{text}\n{_call_text(msg)}".strip()
        if text.strip():
            out.append(Message(role=msg.role, content=text))
    if out and out[0].role != "user":
        out.insert(0, Message(role="user", content="[The conversation continues from earlier.]"))
    return out


def format_messages(messages: Sequence[Message]) -> str:
    """docs/concepts/compaction.md#compression-prompt {formatted_messages}: one ``role: text`` block
    per message."""
    blocks = []
    for msg in messages:
        if msg.role == "tool":
            blocks.append(f"tool: {_result_header(msg)}\n{msg.context_text}".rstrip())
            continue
        text = _plain_text(msg)
        if msg.role == "assistant" and msg.tool_calls:
            text = f"{text}\n{_call_text(msg)}".strip()
        blocks.append(f"{msg.role}: {text}")
    return "\n\n".join(blocks)


def build_compression_prompt(messages: Sequence[Message], template: str | None = None) -> str:
    # str.replace, not str.format: conversation text is full of braces.
    return (template or DEFAULT_COMPRESSION_PROMPT).replace(
        "{formatted_messages}", format_messages(messages)
    )


# --- requests and summarisers ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What a summariser is asked. ``source`` are the messages being summarised
    (already prepared), ``prompt`` the interrupt or the compression prompt."""

    kind: SummaryKind
    source: tuple[Message, ...]
    prompt: str
    model: str
    max_tokens: int
    system: str = SUMMARY_SYSTEM
    want_retain: bool = True
    # The session's context, re-read from the provider's cache (``summary_prefix``).
    prefix: ContextParts | None = None
    search_hint: bool = True  # the agent has the search tool (``engine.recall``)

    def llm_messages(self) -> list[Message]:
        """The conversation an LLM gets: text only, the prompt as the last user message."""
        if self.prefix is not None:
            return prefix_messages(self.prefix, self.prompt)
        if self.kind == "compress":
            return [Message(role="user", content=self.prompt)]
        return [*render_for_llm(self.source), Message(role="user", content=self.prompt)]

    def _plain_body(self, fmt: str) -> dict[str, Any]:
        """The one assembler's (``engine.build``) body of the text-only messages, no tools."""
        parts = ContextParts(
            model=self.model, max_output_tokens=self.max_tokens, messages=self.llm_messages()
        )
        body = build_request(fmt, parts)
        body.pop("tools", None)
        return body

    def anthropic_body(self) -> dict[str, Any]:
        """The Messages API body, no tools."""
        if self.prefix is not None:
            return prefix_body("anthropic", self.prefix, self.prompt, self.model, self.max_tokens)
        return {**self._plain_body("anthropic"), "system": self.system}

    def openai_body(self) -> dict[str, Any]:
        """The Chat Completions body by the same assembler: the system message first, no tools."""
        if self.prefix is not None:
            return prefix_body("openai", self.prefix, self.prompt, self.model, self.max_tokens)
        body = self._plain_body("openai")
        body["messages"] = [{"role": "system", "content": self.system}, *body["messages"]]
        return body

    def gemini_body(self) -> dict[str, Any]:
        """The ``generateContent`` body (the model goes in the URL), no tools."""
        if self.prefix is not None:
            return prefix_body("gemini", self.prefix, self.prompt, self.model, self.max_tokens)
        return {
            **self._plain_body("gemini"),
            "systemInstruction": {"parts": [{"text": self.system}]},
        }


@dataclass(frozen=True, slots=True)
class SummaryResult:
    text: str
    model: str
    summarizer: str
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: float = 0.0


class Summarizer(Protocol):
    @property
    def name(self) -> str: ...

    def complete(self, request: SummaryRequest) -> SummaryResult: ...


class SummarizerError(EngineUnavailableError):
    """The summariser could not answer (docs/concepts/compaction.md#summarizer-failure →
    SERVICE_UNAVAILABLE).

    ``transient`` errors (429, 5xx, overloaded, timeouts, connection) are worth
    retrying later; the others (a 400, a bad key) are not.
    """

    def __init__(self, message: str, *, transient: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status


def make_retain_summary_request(
    messages: Sequence[Message],
    config: PromptConfig,
    *,
    model: str,
    max_tokens: int,
    prefix: ContextParts | None = None,
    kept: int = 0,
    after_memory: bool = False,
    search_hint: bool = True,
) -> SummaryRequest:
    """docs/concepts/compaction.md#summary-request: prepare the messages, add the interrupt. With
    ``prefix`` an LLM re-reads the session's context (``kept``: its newest
    messages, not to summarise) instead of the prepared messages."""
    prepared = strip_trailing_tool_calls(messages)
    if not prepared:
        # docs/concepts/context-build.md#validation: nothing to summarise is a validation error, not
        # an empty summary.
        raise EngineValidationError("Conversation has no messages", field="messages")
    return SummaryRequest(
        kind="retain_summary",
        source=tuple(prepared),
        prompt=build_interrupt(config, search_hint)
        + (kept_note(kept, after_memory) if prefix is not None else ""),
        model=model,
        max_tokens=max_tokens,
        want_retain=wants_retain(config),
        prefix=prefix,
        search_hint=search_hint,
    )


def make_compress_request(
    messages: Sequence[Message], config: PromptConfig, *, model: str, max_tokens: int
) -> SummaryRequest:
    """docs/concepts/compaction.md#compression-prompt: format the messages into the compression
    prompt."""
    if not messages:
        raise EngineValidationError("Conversation has no messages", field="messages")
    return SummaryRequest(
        kind="compress",
        source=tuple(messages),
        prompt=build_compression_prompt(messages, config.compression_prompt),
        model=model,
        max_tokens=max_tokens,
        want_retain=False,
    )
