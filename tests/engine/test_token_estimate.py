"""The bounded estimate of huge texts: it tokenizes at most 64 Ki characters
(and an eighth of the text) whatever the text, and over-counts texts of even
makeup rather than under-counting them."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.messages import Message
from contextsvc.engine.token_estimate import (
    MARGIN,
    SAMPLE_CHARS,
    SAMPLE_SHARE,
    SAMPLE_WINDOWS,
    MessageCount,
    count_message,
    sample_starts,
    sampled_estimate,
)
from contextsvc.engine.tokens import approx_tokens, estimate_message, estimate_text, get_tokenizer

CL100K = get_tokenizer("tiktoken:cl100k_base")


@dataclass
class Recording:
    """cl100k, noting how many characters it was asked to count."""

    inner: object = CL100K
    chars: list[int] = field(default_factory=list)
    name: str = "recording"

    def count(self, text: str) -> int:
        self.chars.append(len(text))
        return self.inner.count(text)


def exact(text: str) -> int:
    return estimate_text(text, CL100K)


def test_tokenizes_at_most_64k_chars_whatever_the_length():
    for size in (300_000, 3_000_000, 30_000_000):
        tokenizer = Recording()
        sampled_estimate("abcdefghij" * (size // 10), tokenizer)
        assert sum(tokenizer.chars) <= SAMPLE_WINDOWS * SAMPLE_CHARS
        assert len(tokenizer.chars) == min(
            SAMPLE_WINDOWS, -(-size // (SAMPLE_SHARE * SAMPLE_CHARS))
        )


def test_tokenizes_at_most_an_eighth_of_a_mid_sized_text():
    for size in (SAMPLE_CHARS + 1, 10_000, 40_000, 100_000, 500_000):
        tokenizer = Recording()
        sampled_estimate("word " * (size // 5 + 1), tokenizer)
        assert sum(tokenizer.chars) <= size // SAMPLE_SHARE + SAMPLE_CHARS


@given(st.integers(min_value=1, max_value=50_000_000))
def test_windows_lie_inside_the_text_in_order(n):
    starts = sample_starts(n)
    assert starts[0] >= 0 and starts[-1] + min(n, SAMPLE_CHARS) <= n
    assert starts == sorted(starts) and len(starts) <= SAMPLE_WINDOWS
    if n >= SAMPLE_WINDOWS * SAMPLE_SHARE * SAMPLE_CHARS:
        assert starts[0] == 0 and starts[-1] == n - SAMPLE_CHARS  # both ends are sampled


def test_short_texts_are_exact():
    text = "def f(x):\n    return x * 2\n" * 70  # under one window
    assert len(text) <= SAMPLE_CHARS
    assert sampled_estimate(text, CL100K) == exact(text)


def test_one_word_of_30_mb_is_close_and_not_under():
    text = "abcdefghij" * 3_000_000
    estimate = sampled_estimate(text, CL100K)
    # Its exact count is chars/4 (cl100k packs more than 4 letters a token).
    assert estimate >= approx_tokens(text)
    assert estimate <= approx_tokens(text) * MARGIN * 1.05


@settings(max_examples=40, deadline=None)
@given(
    unit=st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40
    ),
    size=st.integers(min_value=SAMPLE_CHARS + 1, max_value=400_000),
)
def test_over_estimates_a_text_of_even_makeup(unit, size):
    # Any text that is one unit over and over (a log line, a CSV row, a word):
    # the windows see what the rest is made of, so the estimate is not below
    # the exact count, and not far above it.
    text = (unit * (size // len(unit) + 1))[:size]
    estimate = sampled_estimate(text, CL100K)
    count = exact(text)
    assert count <= estimate <= count * MARGIN * 1.1 + 2 * SAMPLE_WINDOWS


def test_character_tokenizers_are_never_estimated():
    for spec in ("approximate", "ratio:2.5"):
        tokenizer = get_tokenizer(spec)
        msg = Message(role="user", content="x" * 1_000_000)
        counted = count_message(msg, tokenizer, exact_chars=10)
        assert not counted.estimated
        assert counted.tokens == estimate_message(msg, tokenizer)


def test_count_message_is_exact_within_the_budget_and_estimated_past_it():
    msg = Message(role="user", content="abcdefghij" * 100_000)
    within = count_message(msg, CL100K, exact_chars=1_000_000)
    assert within == MessageCount(estimate_message(msg, CL100K), False, 1_000_000)
    past = count_message(msg, CL100K, exact_chars=999_999)
    assert past.estimated and past.exact_chars == 0
    assert past.tokens >= within.tokens
    # No budget: always exact, as every count off the request path.
    assert count_message(msg, CL100K) == within
    # Texts no longer than one window are counted exactly, budget or not.
    small = Message(role="user", content="ok")
    assert count_message(small, CL100K, exact_chars=0) == MessageCount(
        estimate_message(small, CL100K), False, 2
    )


def test_estimate_keeps_the_message_overheads():
    # Per-message overhead and media items are added as estimate_message adds them.
    parts = [{"type": "text", "text": "abcdefghij" * 50_000}, {"type": "image", "source": {}}]
    msg = Message(role="user", content=parts)
    past = count_message(msg, CL100K, exact_chars=0)
    assert past.estimated
    assert past.tokens >= estimate_message(msg, CL100K)
