"""Prompt-cache figures for the fake upstreams: what a real provider would report as cached.

``PrefixCache`` keeps the hashes of prompt prefixes (a list of blocks: tools,
system blocks, message blocks) the fake has "written"; ``lookup`` answers
how many tokens of a new prompt were read from the cache and how many were
written to it. Tokens are the fakes' usual estimate (JSON characters / 4).
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any


def _tokens(block: Any) -> int:
    return len(json.dumps(block, sort_keys=True)) // 4


def anthropic_blocks(body: dict[str, Any]) -> tuple[list[Any], list[int]]:
    """(the prompt as blocks in cache order, indices of blocks with ``cache_control``)."""
    blocks: list[Any] = []
    marked: list[int] = []

    def add(item: Any, prefix: tuple[str, ...] = ()) -> None:
        if isinstance(item, dict) and "cache_control" in item:
            marked.append(len(blocks))
            item = {k: v for k, v in item.items() if k != "cache_control"}
        blocks.append([*prefix, item])

    for tool in body.get("tools") or ():
        add(tool)
    system = body.get("system")
    for block in [system] if isinstance(system, str) else system or ():
        add(block, ("system",))
    for message in body.get("messages") or ():
        content = message.get("content")
        for block in [content] if isinstance(content, str) else content or ():
            add(block, (message.get("role", ""),))
    return blocks, marked


class PrefixCache:
    """Prefix hashes written so far (thread-safe: the fakes serve requests in threads)."""

    def __init__(self) -> None:
        self._written: set[str] = set()
        self._lock = threading.Lock()

    @staticmethod
    def _hashes(blocks: list[Any]) -> list[str]:
        digest = hashlib.sha256()
        out = []
        for block in blocks:
            digest.update(json.dumps(block, sort_keys=True).encode())
            out.append(digest.copy().hexdigest())
        return out

    def lookup(
        self, blocks: list[Any], marked: list[int], *, lookback: int = 20
    ) -> tuple[int, int]:
        """(tokens written, tokens read) for a prompt with breakpoints at ``marked``.

        As Anthropic documents: at the last breakpoint the longest cached prefix
        within ``lookback`` blocks before it is read, the rest up to the
        breakpoint written; every breakpoint's prefix is cached afterwards.
        """
        if not marked:
            return 0, 0
        hashes = self._hashes(blocks)
        sizes = [_tokens(b) for b in blocks]
        last = marked[-1]
        with self._lock:
            hit = next(
                (
                    j
                    for j in range(last, max(-1, last - lookback), -1)
                    if hashes[j] in self._written
                ),
                -1,
            )
            self._written.update(hashes[i] for i in marked)
        read = sum(sizes[: hit + 1])
        return sum(sizes[: last + 1]) - read, read

    def longest_seen(self, blocks: list[Any], *, minimum: int = 0) -> int:
        """Tokens of the longest prefix seen before (OpenAI's automatic cache); remembers all."""
        hashes = self._hashes(blocks)
        sizes = [_tokens(b) for b in blocks]
        with self._lock:
            hit = next(
                (j for j in range(len(hashes) - 1, -1, -1) if hashes[j] in self._written), -1
            )
            self._written.update(hashes)
        cached = sum(sizes[: hit + 1])
        return cached if cached >= minimum else 0
