"""Ranking tools for ``tool_search``: a BM25F index over tool names, descriptions and schemas.

docs/concepts/deferral.md#tool-search: the deferred tools (``engine.deferral``) are found
again by keywords. The index is built once per tool list and searched many
times, so building does the text analysis and a search only adds up scores.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from contextsvc.engine.messages import ToolDef

_WORD = re.compile(r"[A-Za-z0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_STOPWORDS = frozenset(
    "a an and are as at be by for from has have in into is it its of on or that the this to "
    "was were will with you your use used using can tool tools".split()
)
# BM25F: a query word in the tool's name says more than one in its description;
# the search hint is keywords the tool's author chose for exactly this search.
_FIELD_WEIGHTS = (("name", 3.0), ("description", 1.0), ("schema", 0.5), ("hint", 2.0))
_FIELDS = len(_FIELD_WEIGHTS)
Frequencies = tuple[float, ...]  # one per field of _FIELD_WEIGHTS
_K1 = 1.2
_B = 0.75
_MAX_SCHEMA_CHARS = 20_000


def _stem(word: str) -> str:
    # A deliberately small suffix stripper: query and index go through the same
    # function, so "builds", "building" and "build" meet; exactness does not matter.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed"):
        return word[:-2]
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def terms(text: str) -> list[str]:
    """Words of ``text``: camelCase and snake_case split, lower-cased, stemmed."""
    out: list[str] = []
    for word in _WORD.findall(text):
        pieces = _CAMEL.findall(word) if not word.islower() else [word]
        for piece in pieces:
            lowered = piece.lower()
            if len(lowered) < 2 or lowered in _STOPWORDS:
                continue
            out.append(_stem(lowered))
    return out


def _schema_text(schema: Any, budget: list[int], depth: int = 0) -> list[str]:
    """Property names, titles, descriptions and string enums of a JSON Schema."""
    if depth > 12 or budget[0] <= 0:
        return []
    out: list[str] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                for prop, sub in value.items():
                    out.append(str(prop))
                    budget[0] -= len(str(prop))
                    out.extend(_schema_text(sub, budget, depth + 1))
            elif key in ("description", "title") and isinstance(value, str):
                text = value[: max(0, budget[0])]
                out.append(text)
                budget[0] -= len(text)
            elif key == "enum" and isinstance(value, list):
                for item in value[:50]:
                    if isinstance(item, str):
                        out.append(item)
                        budget[0] -= len(item)
            elif isinstance(value, dict | list):
                out.extend(_schema_text(value, budget, depth + 1))
    elif isinstance(schema, list):
        for item in schema:
            out.extend(_schema_text(item, budget, depth + 1))
    return out


@dataclass(frozen=True, slots=True)
class SearchHit:
    tool: ToolDef
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.tool.name,
            "description": self.tool.description,
            "input_schema": self.tool.input_schema,
            "category": self.tool.category,
            "score": round(self.score, 4),
        }


@dataclass(slots=True)
class SearchIndex:
    """An inverted index over name, description and schema words (BM25F)."""

    tools: list[ToolDef]
    postings: dict[str, list[tuple[int, Frequencies]]]
    lengths: list[tuple[int, ...]]
    averages: tuple[float, ...]
    flat_names: list[str]  # lower-case, separators removed: substring matches

    @property
    def size(self) -> int:
        return len(self.tools)


def build_index(tools: Sequence[ToolDef]) -> SearchIndex:
    postings: dict[str, list[tuple[int, Frequencies]]] = {}
    lengths: list[tuple[int, ...]] = []
    for doc, tool in enumerate(tools):
        fields = (
            terms(tool.name),
            terms(tool.description or ""),
            terms(" ".join(_schema_text(tool.input_schema, [_MAX_SCHEMA_CHARS]))),
            terms(tool.search_hint or ""),
        )
        lengths.append(tuple(len(f) for f in fields))
        counts = [Counter(f) for f in fields]
        for term in set().union(*counts):
            postings.setdefault(term, []).append((doc, tuple(float(c[term]) for c in counts)))
    n = max(1, len(tools))
    averages = tuple(max(1.0, sum(length[i] for length in lengths) / n) for i in range(_FIELDS))
    return SearchIndex(
        tools=list(tools),
        postings=postings,
        lengths=lengths,
        averages=averages,
        flat_names=[re.sub(r"[^a-z0-9]", "", t.name.lower()) for t in tools],
    )


def search(
    index: SearchIndex,
    query: str,
    *,
    limit: int = 5,
    among: Iterable[str] | None = None,
) -> list[SearchHit]:
    """Rank tools for ``query`` (docs/concepts/deferral.md#tool-search), best first.

    BM25F over name (×3), search hint (×2), description and schema words; a query word that is
    only part of a name word ("xcode" in "xcodebuild") counts half; an exact
    name scores above everything; ties keep the agent's order.
    ``select:a,b`` returns exactly those tools. ``among`` restricts the
    candidates (the deferred tools).
    """
    if limit < 1:
        return []
    allowed = set(among) if among is not None else None
    query = query.strip()
    if query.lower().startswith("select:"):
        wanted = [w.strip() for w in query[len("select:") :].split(",") if w.strip()]
        by_name = {t.name: t for t in index.tools}
        hits = [
            SearchHit(tool=by_name[w], score=1.0)
            for w in dict.fromkeys(wanted)
            if w in by_name and (allowed is None or w in allowed)
        ]
        return hits[:limit]

    def eligible(doc: int) -> bool:
        return allowed is None or index.tools[doc].name in allowed

    words = list(dict.fromkeys(terms(query)))
    n_docs = max(1, index.size)
    scores: dict[int, float] = {}
    matched: dict[int, int] = {}
    for word in words:
        posting = index.postings.get(word, [])
        weighted: dict[int, float] = {}
        for doc, tfs in posting:
            if not eligible(doc):
                continue
            length = index.lengths[doc]
            tf = 0.0
            for i, (_, weight) in enumerate(_FIELD_WEIGHTS):
                if tfs[i]:
                    norm = 1 - _B + _B * length[i] / index.averages[i]
                    tf += weight * tfs[i] / norm
            weighted[doc] = tf
        df = len(posting)
        if len(word) >= 3:
            # Partial name matches: "xcode" in "xcodebuild", "git" in "github".
            for doc, flat in enumerate(index.flat_names):
                if doc not in weighted and word in flat and eligible(doc):
                    weighted[doc] = 0.5 * _FIELD_WEIGHTS[0][1]
                    df += 1
        idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
        for doc, tf in weighted.items():
            scores[doc] = scores.get(doc, 0.0) + idf * tf / (_K1 + tf)
            matched[doc] = matched.get(doc, 0) + 1

    flat_query = re.sub(r"[^a-z0-9]", "", query.lower())
    for doc, tool in enumerate(index.tools):
        if not eligible(doc):
            continue
        exact = tool.name.lower() == query.lower()
        if exact or (flat_query and index.flat_names[doc] == flat_query):
            scores[doc] = scores.get(doc, 0.0) + 100.0
            matched[doc] = max(matched.get(doc, 0), len(words) or 1)
        elif len(flat_query) >= 3 and flat_query in index.flat_names[doc]:
            scores[doc] = scores.get(doc, 0.0) + 2.0
            matched.setdefault(doc, 1)
    if words:
        # Prefer tools matching more of the query's words.
        for doc in scores:
            scores[doc] *= 0.5 + 0.5 * min(1.0, matched.get(doc, 0) / len(words))
    ranked = sorted((doc for doc, s in scores.items() if s > 0), key=lambda d: (-scores[d], d))
    return [SearchHit(tool=index.tools[d], score=scores[d]) for d in ranked[:limit]]
