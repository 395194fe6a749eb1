"""docs/concepts/trimming.md#line-paging tool_output_cache: paging by character inside one very long
line (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.line_paging import take_chars


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def test_spec000_1_8_offset_within_a_line_pages_by_character():
    line = ("abcdefghij" * 100).encode()
    first = take_chars(pieces(line, 7), char_offset=0, max_chars=300)
    assert (first.text, first.next_char_offset) == (line[:300].decode(), 300)
    second = take_chars(pieces(line, 7), char_offset=first.next_char_offset, max_chars=300)
    assert second.text == line[300:600].decode() and second.char_offset == 300
    last = take_chars(pieces(line, 7), char_offset=900, max_chars=300)
    assert (last.text, last.next_char_offset) == (line[900:].decode(), None)


def test_spec000_1_8_offset_counts_characters_not_bytes():
    # Every character is 3 bytes, and the pieces split characters.
    line = "日本語のテキスト" * 50
    piece = take_chars(pieces(line.encode(), 5), char_offset=10, max_chars=20)
    assert piece.text == line[10:30]
    assert piece.next_char_offset == 30


def test_spec000_1_8_line_ending_exactly_at_the_piece_has_no_continuation():
    piece = take_chars([b"x" * 50], char_offset=0, max_chars=50)
    assert (len(piece.text), piece.next_char_offset) == (50, None)


def test_spec000_1_8_offset_past_the_end_of_the_line_is_empty_not_an_error():
    piece = take_chars([b"short"], char_offset=1000, max_chars=10)
    assert (piece.text, piece.char_offset, piece.next_char_offset) == ("", 5, None)


def test_spec000_1_8_invalid_bytes_read_as_replacement_characters():
    piece = take_chars([b"ab\xffcd"], char_offset=2, max_chars=2)
    assert piece.text == "\ufffdc"


@pytest.mark.parametrize(("char_offset", "max_chars"), [(-1, 10), (0, 0)])
def test_spec000_1_8_bad_paging_arguments_are_validation_errors(char_offset, max_chars):
    with pytest.raises(EngineValidationError):
        take_chars([b"abc"], char_offset=char_offset, max_chars=max_chars)


@given(
    text=st.text(min_size=0, max_size=300),
    size=st.integers(min_value=1, max_value=17),
    step=st.integers(min_value=1, max_value=40),
)
def test_spec000_1_8_paging_a_line_reassembles_it_whole(text, size, step):
    """Reading a line piece by piece with next_char_offset gives back every character once."""
    text = text.replace("\n", " ")
    data = text.encode("utf-8", "surrogatepass")
    whole = data.decode("utf-8", "replace")
    got, offset = [], 0
    while True:
        piece = take_chars(pieces(data, size), char_offset=offset, max_chars=step)
        got.append(piece.text)
        if piece.next_char_offset is None:
            break
        offset = piece.next_char_offset
    assert "".join(got) == whole
