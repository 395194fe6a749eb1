"""In-context views of tool outputs (docs/concepts/trimming.md#views,
docs/concepts/trimming.md#presets) and their config.

Pure: lines in, a view out. The storage layer (``sessions/outputs/``)
keeps the full output and feeds this module only the head of it, so a 200 MB
output costs the same here as a 2 KB one.

- ``make_view``: docs/concepts/trimming.md#cut-view — every line cut at ``max_line_length``
  characters, the whole view cut at ``max_message_bytes`` bytes, and when
  anything was cut a notice saying how to expand the rest by ref. The
  ``offload`` preset follows docs/concepts/trimming.md#offload-view instead: above the threshold the
  view is the replacement text with a 200-character preview.
- The budget trim of outputs already in context (docs/concepts/trimming.md#budget-trim) is
  ``engine.output_trim``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.recall import SEARCH_HINT_SHORT

ViewStyle = Literal["cut", "offload"]

# docs/concepts/trimming.md#cut-view defaults.
DEFAULT_MAX_MESSAGE_BYTES = 50 * 1024
DEFAULT_MAX_LINE_LENGTH = 2000
# docs/concepts/trimming.md#offload-view: offload above 4096 bytes, with the first 200 characters.
OFFLOAD_THRESHOLD_BYTES = 4096
OFFLOAD_PREVIEW_CHARS = 200
# docs/concepts/trimming.md#presets: toolResponseMaxBytes default 12,288.
TOOL_RESPONSE_MAX_BYTES = 12_288
# docs/concepts/trimming.md#budget-trim trim: one trim brings the outputs down to (1 − this) ×
# budget.
DEFAULT_TRIM_HYSTERESIS = 0.25

# An output's view at insertion takes at most this share of the effective window
# (``tool_output_cache.view_share``), never less than MIN_VIEW_CAP_TOKENS.
DEFAULT_VIEW_SHARE = 0.02
MIN_VIEW_CAP_TOKENS = 200

# The names of the built-in expansion tools the notices tell the model to call.
READ_TOOL = "tool_output_cache"
GREP_TOOL = "tool_output_cache_grep"
# Lines suggested per read in the notices.
SUGGESTED_READ_LINES = 200


@dataclass(frozen=True, slots=True)
class ViewConfig:
    """docs/concepts/trimming.md#stored-in-full, plus the view style and trim hysteresis."""

    enabled: bool = True
    style: ViewStyle = "cut"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_line_length: int = DEFAULT_MAX_LINE_LENGTH
    preview_chars: int = OFFLOAD_PREVIEW_CHARS
    context_budget_tokens: int | None = None
    trim_hysteresis: float = DEFAULT_TRIM_HYSTERESIS
    # the trim of the oldest outputs past the budget (docs/concepts/trimming.md#budget-trim); off
    # keeps every per-message cut (§1.6) and only stops the total-budget trim.
    budget_trim: bool = True
    # The most tokens an output's view takes when it is inserted (None: no cap
    # beyond ``max_message_bytes``): its head and tail, the rest by ref
    # (``engine.output_fit.capped_view``). The service derives it from the
    # session's window (``tool_output_cache.view_share``).
    view_tokens: int | None = None
    # A cut view's notice names the search tool too (``recall.search_available``).
    search_hint: bool = True

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_line_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise EngineValidationError(f"{name} must be a positive integer", field=name)
        if (
            isinstance(self.preview_chars, bool)
            or not isinstance(self.preview_chars, int)
            or (self.preview_chars < 0)
        ):
            raise EngineValidationError("preview_chars must not be negative", field="preview_chars")
        if self.context_budget_tokens is not None and (
            isinstance(self.context_budget_tokens, bool)
            or not isinstance(self.context_budget_tokens, int)
            or self.context_budget_tokens <= 0
        ):
            raise EngineValidationError(
                "context_budget_tokens must be a positive integer or null",
                field="context_budget_tokens",
            )
        if not 0 <= self.trim_hysteresis < 1:
            raise EngineValidationError(
                "trim_hysteresis must be in [0, 1)", field="trim_hysteresis"
            )
        if self.style not in ("cut", "offload"):
            raise EngineValidationError(f"Unknown view style {self.style!r}", field="style")


# Named presets (DESIGN.md "Defaults where the specs disagree"): explicit policy
# fields override the preset's.
PRESETS: dict[str, dict[str, Any]] = {
    # docs/concepts/trimming.md#cut-view: lines cut at 2000 chars, 50 KiB per message.
    "default": {"style": "cut", "max_message_bytes": DEFAULT_MAX_MESSAGE_BYTES},
    # docs/concepts/trimming.md#offload-view: offload above 4096 bytes with a 200-char preview.
    "offload": {
        "style": "offload",
        "max_message_bytes": OFFLOAD_THRESHOLD_BYTES,
        "preview_chars": OFFLOAD_PREVIEW_CHARS,
    },
    # docs/concepts/trimming.md#presets: toolResponseMaxBytes 12,288, truncated with a marker.
    "tool_response": {"style": "cut", "max_message_bytes": TOOL_RESPONSE_MAX_BYTES},
}

_POLICY_FIELDS = (
    "enabled",
    "budget_trim",
    "max_message_bytes",
    "max_line_length",
    "context_budget_tokens",
    "trim_hysteresis",
)


def resolve_view_config(
    policy: Mapping[str, Any] | None, *, limit: int | None = None
) -> ViewConfig:
    """A session's ``policy.tool_output_cache`` → ViewConfig (preset, then explicit
    fields). With ``limit`` (the session's effective window), the cap of an
    inserted view: ``view_share`` of it (``DEFAULT_VIEW_SHARE`` when unset)."""
    policy = policy or {}
    preset = policy.get("preset") or "default"
    if preset not in PRESETS:
        raise EngineValidationError(
            f"Unknown tool_output_cache preset {preset!r}; use one of {', '.join(PRESETS)}",
            field="tool_output_cache.preset",
        )
    values: dict[str, Any] = dict(PRESETS[preset])
    for name in _POLICY_FIELDS:
        if name in policy and (policy[name] is not None or name == "context_budget_tokens"):
            values[name] = policy[name]
    if limit is not None:
        share = float(policy.get("view_share") or DEFAULT_VIEW_SHARE)
        values["view_tokens"] = max(MIN_VIEW_CAP_TOKENS, int(share * limit))
    return ViewConfig(**values)


# --- lines ----------------------------------------------------------------------


def count_lines(text: str) -> int:
    """Lines as a reader numbers them: an unterminated last line counts, "" has none."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def count_lines_bytes(newlines: int, byte_size: int, ends_with_newline: bool) -> int:
    """``count_lines`` for a stream counted piece by piece."""
    if byte_size == 0:
        return 0
    return newlines + (0 if ends_with_newline else 1)


def iter_text_lines(text: str, max_chars: int | None = None) -> Iterator[str]:
    """Lines of ``text`` without their newline, each at most ``max_chars`` characters.

    Lazy: a view needs only the first few hundred lines of a 30 MB output, and
    a line of 10 MB is never copied whole when only its head is wanted.
    """
    pos = 0
    end = len(text)
    while pos < end:
        nl = text.find("\n", pos)
        stop = end if nl == -1 else nl
        if max_chars is not None and stop - pos > max_chars:
            yield text[pos : pos + max_chars]
        else:
            yield text[pos:stop]
        if nl == -1:
            return
        pos = nl + 1


def utf8_prefix(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits in ``max_bytes``."""
    if max_bytes <= 0:
        return ""
    encoded = text[:max_bytes].encode("utf-8")
    if len(encoded) <= max_bytes:
        return text[:max_bytes]
    return encoded[:max_bytes].decode("utf-8", errors="ignore")


# --- views ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutputInfo:
    """docs/concepts/trimming.md#output-ref, plus the tool that produced it."""

    ref: str
    byte_size: int
    line_count: int
    tool_name: str = ""


@dataclass(frozen=True, slots=True)
class View:
    """The in-context form of one tool output.

    ``text`` is None when the output goes into context unchanged (state
    ``full``); otherwise it is what the model is shown.
    """

    text: str | None
    state: Literal["full", "cut", "offloaded"]
    lines_shown: int = 0
    lines_cut: int = 0

    @property
    def is_full(self) -> bool:
        return self.text is None


def _n(value: int) -> str:
    return f"{value:,}"


def _tool(info: OutputInfo) -> str:
    return f' from "{info.tool_name}"' if info.tool_name else ""


def _search(on: bool) -> str:
    return f" {SEARCH_HINT_SHORT}." if on else ""


def _cut_notice(info: OutputInfo, config: ViewConfig, *, shown: int, cut: int, offset: int) -> str:
    max_line = config.max_line_length
    if shown >= info.line_count:
        what = f"all {_n(info.line_count)} lines shown"
    elif shown == 0:
        what = f"no lines shown of {_n(info.line_count)}"
    else:
        what = f"showing lines 1-{_n(shown)} of {_n(info.line_count)}"
    long_lines = (
        f"; {_n(cut)} line{'s' if cut != 1 else ''} longer than {_n(max_line)} characters cut"
        if cut
        else ""
    )
    return (
        f"[Tool output cut: {what} ({_n(info.byte_size)} bytes){_tool(info)}{long_lines}. "
        f"The full output is stored as ref={info.ref}. Read on with {READ_TOOL} "
        f'{{"ref_id": "{info.ref}", "offset": {offset}, "limit": {SUGGESTED_READ_LINES}}}'
        f"; search it with {GREP_TOOL} "
        f'{{"ref_id": "{info.ref}", "pattern": "<regex>"}}.{_search(config.search_hint)}]'
    )


def _offload_notice(info: OutputInfo, preview: str, preview_chars: int, search: bool = True) -> str:
    # docs/concepts/trimming.md#offload-view, pointing at our tools.
    return (
        f"[Tool result stored — {_n(info.byte_size)} bytes, {_n(info.line_count)} lines"
        f"{_tool(info)}.\nFirst {preview_chars} chars: {preview}]\n"
        f'Use the "{READ_TOOL}" tool with ref_id="{info.ref}" (offset and limit in lines) to read '
        f'specific portions, or "{GREP_TOOL}" with ref_id="{info.ref}" and a pattern to search.'
        f"{_search(search)}"
    )


def notice_reserve(info: OutputInfo, config: ViewConfig) -> int:
    """Bytes kept free for the cut notice: its length with the largest numbers it can hold.

    Every number in the notice is at most the corresponding total, so it has
    at most as many digits and the real notice is never longer than this.
    """
    n = max(info.line_count, 1)
    return max(
        len(_cut_notice(info, config, shown=shown, cut=n, offset=n).encode("utf-8"))
        for shown in (0, n - 1, n)
    )


def make_view(lines: Iterable[str], info: OutputInfo, config: ViewConfig) -> View:
    """docs/concepts/trimming.md#cut-view (style ``cut``) or docs/concepts/trimming.md#offload-view
    (style ``offload``).

    ``lines`` are the output's lines without newlines, lazily; each needs at
    most ``max_line_length + 1`` characters (one more than the cut tells a long
    line from one that just fits). Only the head is consumed.
    """
    if config.style == "offload":
        return _offload_view(lines, info, config)
    max_line = config.max_line_length
    limit = config.max_message_bytes
    shown: list[tuple[str, bool]] = []  # (line as shown, was cut at max_line_length)
    size = 0  # UTF-8 bytes of the shown lines joined by "\n"
    any_cut = False
    exhausted = True
    first: str | None = None
    for line in lines:
        was_cut = len(line) > max_line
        if was_cut:
            line = line[:max_line]
            any_cut = True
        if first is None:
            first = line
        added = len(line.encode("utf-8")) + (1 if shown else 0)
        if size + added > limit:
            exhausted = False
            break
        shown.append((line, was_cut))
        size += added
    if exhausted and not any_cut:
        return View(text=None, state="full", lines_shown=len(shown))

    # Cut: the body shrinks so that body + "\n\n" + notice fits in max_message_bytes.
    body_limit = limit - notice_reserve(info, config) - 2
    while shown and size > body_limit:
        last, _ = shown.pop()
        size -= len(last.encode("utf-8")) + (1 if shown else 0)
    partial_first = False
    if not shown and first and body_limit > 0:
        # A first line bigger than the whole budget: show its head rather than nothing.
        shown.append((utf8_prefix(first, body_limit), True))
        partial_first = True
    n_shown = len(shown)
    cut_shown = sum(1 for _, was_cut in shown if was_cut)
    if partial_first:
        next_offset = 1
    elif n_shown < info.line_count:
        next_offset = n_shown + 1
    else:
        # Everything shown, some lines cut: point at the first cut line.
        next_offset = next((i for i, (_, was_cut) in enumerate(shown, 1) if was_cut), 1)
    notice = _cut_notice(info, config, shown=n_shown, cut=cut_shown, offset=next_offset)
    body = "\n".join(line for line, _ in shown)
    text = f"{body}\n\n{notice}" if shown else notice
    return View(text=text, state="cut", lines_shown=n_shown, lines_cut=cut_shown)


def _offload_view(lines: Iterable[str], info: OutputInfo, config: ViewConfig) -> View:
    """docs/concepts/trimming.md#offload-view: above the byte threshold, the replacement text with a
    preview.

    Only the threshold decides (docs/concepts/trimming.md#offload-view has no line rule): an output
    that fits goes into context as it is.
    """
    if info.byte_size <= config.max_message_bytes:
        return View(text=None, state="full", lines_shown=info.line_count)
    head: list[str] = []
    head_chars = 0
    for line in lines:
        head.append(line)
        head_chars += len(line) + 1
        if head_chars > config.preview_chars:
            break
    preview = "\n".join(head)[: config.preview_chars]
    return View(
        text=_offload_notice(info, preview, config.preview_chars, config.search_hint),
        state="offloaded",
        lines_shown=0,
    )


def failed_view(info: OutputInfo) -> str:
    """docs/concepts/guard.md#tool-preflight: the failure put in context instead of the output."""
    return (
        "[tool output not added: it would exceed the context budget (toolBudgetExceeded); "
        f"ref={info.ref}, {_n(info.byte_size)} bytes, {_n(info.line_count)} lines{_tool(info)}. "
        f"The output is stored in full; {READ_TOOL} and {GREP_TOOL} can read it by ref. "
        "Finish now with what you have.]"
    )


def view_bytes_estimate(raw_bytes: int, config: ViewConfig) -> int:
    """Bytes an output of ``raw_bytes`` will take in context (for reserve / preview).

    The notice is sized for an output of that many bytes, one line per 80.
    """
    if config.view_tokens is not None and config.style == "cut":
        # A capped view: its head and tail, and the notice naming the ref.
        raw_bytes = min(raw_bytes, 4 * config.view_tokens + 400)
    if not config.enabled or raw_bytes <= config.max_message_bytes:
        return raw_bytes
    info = OutputInfo(
        ref="out_" + "x" * 24, byte_size=raw_bytes, line_count=max(1, raw_bytes // 80)
    )
    if config.style == "offload":
        preview = "x" * config.preview_chars
        notice = _offload_notice(info, preview, config.preview_chars, config.search_hint)
        return len(notice.encode())
    return config.max_message_bytes
