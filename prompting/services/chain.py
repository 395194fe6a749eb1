"""A session's cache chain (docs/concepts/caching.md#breakpoints): computed, compared and stored
without moving the whole of it on every build.

Each build's chain of block digests (``caching.chain``, 8 bytes a block: 16 KB
at 2,000 messages) is compared with the previous build's and stored for the
next. Moving it whole through the database on every build (escaped on the way
in, unescaped on the way out) cost about as much as the rest of the history's
growth together, so:

- this process keeps the last chain it built per session (``build_chain``): a build
  shares all but its last blocks with the one before, so only those are hashed;
- the row keeps a tag of its chain (``chain_tag``: the last block's digest and
  the block count; every digest covers all the blocks before it). This process
  remembers the chain it last wrote or read per session; a state read then
  leaves the chain out (``held``), and that chain is used when the tags agree.
  The row's own is read only when another process's record came in between
  (with the row, when nothing is known here: one query either way);
- the write sends the blocks past those shared with the stored chain, spliced
  onto its kept part in SQL, on the condition that the row still holds the
  chain compared with. A build that raced another one finds the condition
  false and stores no chain (the next build is then accounted as a first
  one): never a chain made of two builds' parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import BinaryField, CharField
from django.db.models.expressions import Expression

from contextsvc.engine import caching
from contextsvc.lru import BoundedLRU

from ..models import PromptState

# The last chain built per session (this process), with the block keys it was made of.
BUILT_KEPT = 512
_BUILT: BoundedLRU[int, tuple[list[bytes], bytes]] = BoundedLRU(BUILT_KEPT)


def chain_tag(chain: bytes) -> str:
    """What names a chain in its row: its last digest and block count ("" for none)."""
    if not chain:
        return ""
    return f"{chain[-caching.DIGEST_BYTES :].hex()}:{len(chain) // caching.DIGEST_BYTES}"


def build_chain(session_pk: int, keys: list[bytes]) -> bytes:
    """``caching.chain(keys)``, hashing only the keys past those this process's last build of
    the session shared."""
    memo = _BUILT.get(session_pk)
    shared = 0
    if memo is not None:
        before, _ = memo
        if keys[: len(before)] == before:  # the common case: the history only grew
            shared = len(before)
        else:
            for a, b in zip(keys, before, strict=False):
                if a != b:
                    break
                shared += 1
    start = memo[1][: shared * caching.DIGEST_BYTES] if memo is not None else b""
    current = caching.chain(keys[shared:], start)
    _BUILT.put(session_pk, (keys, current))
    return current


# The chain this process last knew a session's row to hold (written by its record, or
# read with the row): a state read leaves the chain out only when one is known here
# (``held``), so a read is one query either way, whatever was built before.
_STORED: BoundedLRU[int, bytes] = BoundedLRU(BUILT_KEPT)


def held(session_pk: int) -> bool:
    """Whether this process knows a chain the session's row held: its read may leave it out."""
    return session_pk in _STORED


def stored(state: PromptState) -> bytes | None:
    """The chain ``state``'s row holds: the one known here when the tags agree, otherwise
    the row's own bytes (read now if the state was read without them, which only another
    process's record since this one's makes happen)."""
    if not state.chain_tag:
        return None
    mine = _STORED.get(state.session_id)
    if mine is not None and chain_tag(mine) == state.chain_tag:
        return mine
    chain = bytes(state.last_chain or b"") or None
    if chain is not None:
        _STORED.put(state.session_id, chain)
    return chain


def written(session_pk: int, chain: bytes) -> None:
    """A record stored ``chain`` for the session (or, raced, nothing: the tags tell)."""
    _STORED.put(session_pk, chain)


@dataclass(frozen=True, slots=True)
class ChainWrite:
    """A build's chain to store: ``current``, of which the first ``kept`` bytes are those of
    the chain the row held when read (tagged ``held``)."""

    current: bytes
    held: str
    kept: int

    def fields(self) -> dict[str, Any]:
        """The row's ``last_chain`` and ``chain_tag`` for an ``update()`` (module doc)."""
        tag = chain_tag(self.current)
        if not self.held:  # nothing stored: the whole chain
            return {"last_chain": self.current, "chain_tag": tag}
        spliced = "substr({column}, 1, %s) || %s"
        return {
            "last_chain": _IfHeld(self.held, spliced, [self.kept, self.current[self.kept :]], b""),
            "chain_tag": _IfHeld(self.held, "%s", [tag], ""),
        }


class _IfHeld(Expression):
    """``CASE WHEN chain_tag = held THEN <then> ELSE <otherwise> END``, written as SQL at
    once (``{column}`` in ``then``: the column set): every build's record runs it, and
    the ORM's ``Case`` / ``When`` cost more than the rest of that update. It refers to
    no other expression, so there is nothing to resolve or look for inside it."""

    contains_aggregate = contains_over_clause = contains_column_references = False

    def __init__(self, held: str, then: str, params: list[Any], otherwise: bytes | str) -> None:
        blob = isinstance(otherwise, bytes)
        super().__init__(output_field=BinaryField() if blob else CharField())
        self.held, self.then, self.params, self.otherwise = held, then, params, otherwise

    def resolve_expression(self, *args: Any, **kwargs: Any) -> _IfHeld:
        return self

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        quote = connection.ops.quote_name
        then = self.then.format(column=quote("last_chain"))
        sql = f"CASE WHEN {quote('chain_tag')} = %s THEN {then} ELSE %s END"
        return sql, [self.held, *self.params, self.otherwise]

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        sql, params = self.as_sql(compiler, connection, **extra)
        if isinstance(self.otherwise, bytes):  # SQLite's ``||`` makes text of blobs: cast back
            sql = f"CAST({sql} AS BLOB)"
        return sql, params
