"""Tokenising is bounded whatever the text: long texts are counted in segments
cut at piece boundaries (exact), and only a run with no boundary is cut inside."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.tokens import (
    SEGMENT_CHARS,
    approx_tokens,
    bounded_count,
    estimate_text,
    get_tokenizer,
    segment_bounds,
)
from tests.parts import WORKLOADS

CL100K = get_tokenizer("tiktoken:cl100k_base")
ENCODING = CL100K.encoding


def whole(text: str) -> int:
    """Today's count: one encode of the whole text."""
    return len(ENCODING.encode_ordinary(text))


def workload_texts() -> list[str]:
    texts = []
    for path in sorted(WORKLOADS.glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            message = json.loads(line)
            if isinstance(message.get("content"), str) and message["content"]:
                texts.append(message["content"])
            for call in message.get("tool_calls") or []:
                texts.append(json.dumps(call.get("arguments")))
    return texts


@pytest.fixture(scope="module")
def real_texts() -> list[str]:
    return workload_texts()


@pytest.mark.needs_workloads
def test_count_is_unchanged_on_real_agent_text(real_texts):
    # Every message of the recorded runs, and all of them as one ~2 MB text
    # (hundreds of segments), count exactly as one encode of the whole does.
    for text in real_texts:
        assert CL100K.count(text) == whole(text)
    joined = "\n".join(real_texts)
    assert len(segment_bounds(joined)) > 100
    assert not any(forced for *_, forced in segment_bounds(joined))
    assert CL100K.count(joined) == whole(joined)


@pytest.mark.parametrize("size", [64, 300, 2048])
@pytest.mark.needs_workloads
def test_small_segments_cut_real_text_only_at_piece_boundaries(real_texts, size):
    # Tiny segments put a cut every few words: each must fall on a boundary.
    for text in real_texts[::7]:
        bounds = segment_bounds(text, size)
        if not any(forced for *_, forced in bounds):
            assert bounded_count(ENCODING, text, size) == whole(text), text[:200]


ALPHABET = st.sampled_from(
    list("aZé中ß'sdtlmvr09²½.,;:=-_/\\\"()[]{}<>#@!?*+")
    + [" ", "  ", "\n", "\r\n", "\t", "\u00a0", "\u2028", "e\u0301"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ALPHABET, min_size=1, max_size=300).map("".join), st.integers(8, 64))
def test_a_cut_at_a_piece_boundary_never_changes_the_count(text, size):
    bounds = segment_bounds(text, size)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(text)
    assert all(a < b <= a + size for a, b, _ in bounds)
    assert all(b == c for (_, b, _), (c, _, _) in zip(bounds, bounds[1:], strict=False))
    if not any(forced for *_, forced in bounds):
        assert bounded_count(ENCODING, text, size) == whole(text)


@pytest.mark.parametrize("char", ["a", "中", "=", " ", "7"])
def test_a_run_without_boundaries_is_cut_into_bounded_segments(char):
    text = char * (SEGMENT_CHARS * 5 + 17)
    bounds = segment_bounds(text)
    assert all(end - start <= SEGMENT_CHARS for start, end, _ in bounds)
    assert sum(forced for *_, forced in bounds) == 5
    # The chunked count stays close to the whole one (a token or two per cut).
    assert abs(CL100K.count(text) - whole(text)) <= 2 * len(bounds)


def test_thirty_megabytes_of_one_word_count_in_seconds_not_minutes():
    # The attack: one unbroken 30 MB word (byte-pair encoding it whole
    # took minutes and held a web thread). Generous bound for a loaded CI box;
    # bench/bench_tokens.py prints the figures.
    text = "abcdefghij" * 3_000_000
    start = time.perf_counter()
    tokens = estimate_text(text, CL100K)
    elapsed = time.perf_counter() - start
    assert elapsed < 30, f"{elapsed:.1f} s"
    # The estimate keeps its chars/4 floor and stays a sane figure.
    assert approx_tokens(text) <= tokens <= len(text)
