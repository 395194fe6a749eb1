"""A bounded token estimate for huge texts, so no request tokenizes without limit.

An exact cl100k count costs a core ~0.1 s per MB (1.5-3 s for a 30 MB text):
one agent posting such texts would take a web core from every other agent. Past
a per-request budget of characters, an append stores this estimate instead,
marks the count as estimated, and a background task replaces it with the exact
count (``sessions.services.exact_counts``).

The estimate tokenizes up to ``SAMPLE_WINDOWS`` windows of ``SAMPLE_CHARS``
characters spread evenly over the text — at most an eighth of it and at most
64 Ki characters, whatever its length — and scales their tokens per character
to the whole text, times ``MARGIN``. A window cut inside a word counts a token
or two more than the word would have there, so the samples lean high; the
margin covers the variation between the samples and the rest. On any text whose makeup is even at the scale of a window (a log,
code, prose, one long word, a repeated unit) it is an over-estimate, by ~10 %;
a text built to differ between the windows (dense where no window falls) can
be under-counted until the exact count lands. Like every count here it is
floored by ``ceil(chars / 4)`` (docs/concepts/context-build.md#token-estimate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from contextsvc.engine.messages import Message
from contextsvc.engine.tokens import (
    DEFAULT_ESTIMATE_CONFIG,
    CharRatioTokenizer,
    EstimateConfig,
    Tokenizer,
    approx_tokens,
    counted_text,
    estimate_text,
    message_overhead,
)

SAMPLE_WINDOWS = 32
SAMPLE_CHARS = 2048
# At most one character in this many is sampled: a batch of many mid-sized
# texts costs at most an eighth of its length, not 64 Ki characters per text.
SAMPLE_SHARE = 8
MARGIN = Fraction(11, 10)


def sample_starts(n: int) -> list[int]:
    """Where the sample windows of a text of ``n`` characters start (evenly spread,
    first at 0, last ending at the end); one window covers a text up to its size."""
    if n <= SAMPLE_CHARS:
        return [0]
    windows = min(SAMPLE_WINDOWS, -(-n // (SAMPLE_SHARE * SAMPLE_CHARS)))
    last = n - SAMPLE_CHARS
    if windows == 1:
        return [last // 2]
    return [last * i // (windows - 1) for i in range(windows)]


def sampled_estimate(text: str, tokenizer: Tokenizer) -> int:
    """Estimated tokens of ``text`` from at most 64 Ki characters of it (see the module doc).

    Exact for a text no longer than one window, and for the character
    tokenizers (whose count needs no tokenizing).
    """
    n = len(text)
    if n <= SAMPLE_CHARS or isinstance(tokenizer, CharRatioTokenizer):
        return estimate_text(text, tokenizer)
    starts = sample_starts(n)
    sampled = sum(tokenizer.count(text[start : start + SAMPLE_CHARS]) for start in starts)
    scaled = math.ceil(n * sampled * MARGIN / (len(starts) * SAMPLE_CHARS))
    return max(scaled, approx_tokens(text))


@dataclass(frozen=True, slots=True)
class MessageCount:
    """A message's token count; ``estimated`` when it is ``sampled_estimate``'s."""

    tokens: int
    estimated: bool
    # Characters an exact count tokenized (0 when estimated): what the caller
    # takes off its per-request budget.
    exact_chars: int


def count_message(
    msg: Message,
    tokenizer: Tokenizer,
    config: EstimateConfig = DEFAULT_ESTIMATE_CONFIG,
    *,
    exact_chars: int | None = None,
) -> MessageCount:
    """``estimate_message``, exactly while its counted text fits in ``exact_chars``
    (None: always), else with the text's ``sampled_estimate``.

    A caller keeping a per-request budget of ``exact_chars`` tokenizes at most
    that plus an eighth of the rest (and a window per message) per request.
    """
    text = counted_text(msg)
    overhead = message_overhead(msg, config)
    n = len(text)
    if isinstance(tokenizer, CharRatioTokenizer):
        return MessageCount(estimate_text(text, tokenizer) + overhead, False, 0)
    if exact_chars is None or n <= exact_chars or n <= SAMPLE_CHARS:
        return MessageCount(estimate_text(text, tokenizer) + overhead, False, n)
    return MessageCount(sampled_estimate(text, tokenizer) + overhead, True, 0)
