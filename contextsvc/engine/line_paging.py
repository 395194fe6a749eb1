"""Paging by character inside one line of a stored output (docs/concepts/trimming.md#reading-refs).

A read is line-based, and every line it shows is cut at ``max_line_length``
characters; a minified bundle or a one-line JSON dump is a single line of
megabytes, so the rest of it is reached by a character offset *within* the
line. Pure: the storage layer feeds the line's bytes piece by piece (it never
holds the whole line), this module skips and takes characters.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import EngineValidationError


@dataclass(frozen=True, slots=True)
class LinePiece:
    """``text``: characters ``char_offset`` … ``char_offset + len(text) - 1`` of the line."""

    text: str
    char_offset: int
    # Where the line goes on (the ``char_offset`` of the next read), None at its end.
    next_char_offset: int | None


def take_chars(pieces: Iterable[bytes], *, char_offset: int, max_chars: int) -> LinePiece:
    """Characters ``char_offset`` … of one line given as UTF-8 byte pieces (no newline).

    Invalid bytes decode to U+FFFD, as every view does, and count as one
    character each. A piece may split a character: the incremental decoder
    joins it with the next. An offset past the end gives an empty piece.
    """
    if char_offset < 0:
        raise EngineValidationError("char_offset must not be negative", field="char_offset")
    if max_chars < 1:
        raise EngineValidationError("max_chars must be positive", field="max_chars")
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    skip = char_offset
    taken: list[str] = []
    have = 0
    more = False

    def feed(text: str) -> bool:
        """Consume ``text``; True once the piece is full and more follows."""
        nonlocal skip, have, more
        if skip:
            dropped = min(skip, len(text))
            skip -= dropped
            text = text[dropped:]
        if not text:
            return False
        room = max_chars - have
        if len(text) > room:
            taken.append(text[:room])
            have = max_chars
            more = True
            return True
        taken.append(text)
        have += len(text)
        return False

    for piece in pieces:
        if feed(decoder.decode(piece)):
            break
    else:
        feed(decoder.decode(b"", final=True))
    text = "".join(taken)
    # Past the end of the line: the piece starts (empty) at the line's length.
    start = char_offset - skip
    return LinePiece(
        text=text,
        char_offset=start,
        next_char_offset=start + len(text) if more else None,
    )
