"""Server-side SVG geometry for the usage-over-turns chart.

No charting library: the chart is a few dozen rectangles, a polyline and
some labels, computed here and drawn by the template. Coordinates are in a
fixed viewBox; the SVG scales with its card.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils.html import escape, format_html_join
from django.utils.safestring import SafeString, mark_safe

from sessions.dashboard.selectors.usage import TurnUsage, UsageSeries
from sessions.extensions import CLIENT_COMPACTION

WIDTH = 1000
HEIGHT = 230
PAD_LEFT = 58
PAD_RIGHT = 12
PAD_TOP = 16
PAD_BOTTOM = 32
CACHE_LANE = 34  # extra height when cache tokens were reported
PLOT_BOTTOM = HEIGHT - PAD_BOTTOM

LAYERS = (
    ("overhead", "Prompt & tools"),
    ("summary", "Summary"),
    ("conversation", "Conversation"),
    ("outputs", "Tool outputs"),
)


def short(n: float) -> str:
    """12_345 → '12.3k', 1_200_000 → '1.2M'."""
    n = float(n)
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M".replace(".0M", "M")
    if n >= 1_000:
        return f"{n / 1_000:.1f}k".replace(".0k", "k")
    return f"{int(n)}"


@dataclass(slots=True)
class Rect:
    x: float
    y: float
    w: float
    h: float
    css: str


@dataclass(slots=True)
class Bar:
    x: float
    w: float
    rects: list[Rect]
    hit_y: float
    tip: str
    dot: tuple[float, float] | None = None
    compaction: bool = False
    restore: bool = False
    last_event: str = ""
    now: bool = False
    trimmed: int = 0
    cache: list[Rect] = field(default_factory=list)
    cx: float = 0.0  # centre of the bar
    total: int = 0  # the bar's "used" figure
    call_id: int | None = None  # the ContextCall drawn; None when recomputed

    @property
    def mark_x(self) -> float:
        """Compactions happen after a turn: their line is drawn at the bar's right edge."""
        return round(self.x + self.w, 2)

    @property
    def flag_path(self) -> str:
        return f"M{self.mark_x} {PAD_TOP} l7 4 l-7 4 z"

    @property
    def trim_path(self) -> str:
        """A small triangle under the axis, pointing up at the bar."""
        y = PLOT_BOTTOM + 3
        return f"M{self.cx} {y} l-3.5 6 h7 z"


@dataclass(slots=True)
class HLine:
    y: float
    css: str
    label: str


@dataclass(slots=True)
class Chart:
    width: int
    height: int
    plot_top: float
    plot_bottom: float
    plot_left: float
    plot_right: float
    bars: list[Bar]
    ticks: list[tuple[float, str]]
    lines: list[HLine]
    x_labels: list[tuple[float, str]]
    reported_path: str
    cache_top: float | None
    turns: int
    empty: bool
    per_bar: int = 1  # turns merged into one bar (peak kept)
    unit: str = "turn"  # or "LLM call" for one-task agent runs
    # "…/calls/{}/": a bar drawn from a record opens "what was sent" in that call.
    call_url: str = ""

    def bars_svg(self) -> SafeString:
        """The bars as SVG markup, built here rather than in the template: a
        chart is ~2,000 numbers, which Django's template engine formats one
        variable at a time (~40 ms). Joined as f-strings (``format_html`` per
        element cost a few ms more): the numbers are the code's own floats and
        ints, the classes constants; every other value is escaped (the tooltips
        carry only numbers and turn labels, never transcript text)."""
        height = round(self.plot_bottom - self.plot_top, 2)
        return mark_safe("".join(self._bar(b, height) for b in self.bars))

    def _bar(self, bar: Bar, height: float) -> str:
        rects = "".join(
            f'<rect class="layer layer-{escape(r.css)}" x="{r.x}" y="{r.y}" width="{r.w}" '
            f'height="{r.h}"/>'
            for r in (*bar.rects, *bar.cache)
        )
        mark = ""
        if bar.compaction or bar.restore:
            kind = "mark-restore" if bar.last_event == "restore" else "mark-compaction"
            mark = (
                f'<g class="{kind}"><line x1="{bar.mark_x}" x2="{bar.mark_x}" '
                f'y1="{self.plot_top}" y2="{self.plot_bottom}"/>'
                f'<path d="{escape(bar.flag_path)}"/></g>'
            )
        trim = f'<path class="trim-mark" d="{escape(bar.trim_path)}"/>' if bar.trimmed else ""
        opens = ""
        if bar.call_id is not None and self.call_url:
            url = escape(self.call_url.format(bar.call_id))
            opens = f' hx-get="{url}" hx-target="#call-detail" hx-swap="innerHTML show:top"'
        now = " bar-now" if bar.now else ""
        recomputed = "" if bar.call_id is not None or bar.now else " bar-recomputed"
        return (
            f'<g class="bar{now}{recomputed}" data-tip="{escape(bar.tip)}" '
            f'data-used="{bar.total}" data-call="{bar.call_id or ""}"{opens}>'
            f'<rect class="hit" x="{bar.x}" y="{self.plot_top}" width="{bar.w}" '
            f'height="{height}"/>{rects}{mark}{trim}</g>'
        )

    def dots_svg(self) -> SafeString:
        return format_html_join(
            "", '<circle cx="{}" cy="{}" r="3"/>', (b.dot for b in self.bars if b.dot)
        )


def _nice_step(top: float, target_ticks: int = 4) -> float:
    raw = top / target_ticks
    magnitude = 10 ** (len(str(int(raw))) - 1) if raw >= 1 else 1
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * magnitude:
            return mult * magnitude
    return 10 * magnitude


def _tip(t: TurnUsage) -> str:
    seqs = f"seq {t.first_seq}" if t.first_seq == t.last_seq else f"seq {t.first_seq}–{t.last_seq}"
    source = (
        f"as sent (call #{t.call_id})"
        if t.call_id is not None
        else "recomputed from today's messages (no build recorded)"
    )
    lines = [
        f"{t.label} · {seqs}",
        f"Used ≈ {t.total:,} tokens, {source}",
        f"  prompt & tools {t.overhead:,} · summary {t.summary:,}",
        f"  conversation {t.conversation:,} · tool outputs {t.outputs:,}",
    ]
    if t.reported is not None:
        lines.append(f"Provider-reported {t.reported:,}")
    if t.cache_read or t.cache_write:
        lines.append(f"Cache read {t.cache_read:,} · cache write {t.cache_write:,}")
    if t.last_event == CLIENT_COMPACTION:
        lines.append("The client compacted its own history after this (through the proxy)")
    elif t.compactions:
        lines.append(
            f"Compacted after this{' (×' + str(t.compactions) + ')' if t.compactions > 1 else ''}"
        )
    if t.restores:
        lines.append("A snapshot was restored after this")
    if t.trimmed:
        lines.append(f"{t.trimmed} tool output(s) of these turns now cut or trimmed")
    return "\n".join(lines)


def usage_chart(series: UsageSeries, *, call_url: str = "") -> Chart:
    has_cache = series.has_cache
    height = HEIGHT + (CACHE_LANE if has_cache else 0)
    plot_top = PAD_TOP
    plot_bottom = PLOT_BOTTOM
    left, right = PAD_LEFT, WIDTH - PAD_RIGHT
    bars_in = series.bars
    top_value = max([series.effective_window, *(b.peak for b in bars_in)]) * 1.06 or 1
    step = _nice_step(top_value)
    plot_h = plot_bottom - plot_top

    def y_of(v: float) -> float:
        return plot_bottom - plot_h * v / top_value

    ticks = []
    v = 0.0
    while v <= top_value:
        ticks.append((round(y_of(v), 1), short(v)))
        v += step
    lines = [
        HLine(
            round(y_of(series.effective_window), 1),
            "limit",
            f"limit {short(series.effective_window)}",
        ),
        HLine(round(y_of(series.block_at), 1), "block", f"block {short(series.block_at)}"),
        HLine(round(y_of(series.compact_at), 1), "compact", f"compact {short(series.compact_at)}"),
    ]

    n = max(1, len(bars_in))
    slot = (right - left) / n
    bar_w = max(1.0, slot * (0.72 if n > 1 else 0.3))
    cache_top = HEIGHT + 4 if has_cache else None
    cache_max = max([1, *(b.cache_read + b.cache_write for b in bars_in)])
    bars: list[Bar] = []
    points: list[str] = []
    for i, t in enumerate(bars_in):
        x = left + slot * i + (slot - bar_w) / 2
        rects = []
        base = 0
        for key, _label in LAYERS:
            value = getattr(t, key)
            if value <= 0:
                continue
            y0, y1 = y_of(base), y_of(base + value)
            rects.append(
                Rect(round(x, 2), round(y1, 2), round(bar_w, 2), round(max(0.5, y0 - y1), 2), key)
            )
            base += value
        dot = None
        if t.reported is not None:
            dot = (round(x + bar_w / 2, 2), round(y_of(t.reported), 2))
            points.append(f"{dot[0]},{dot[1]}")
        cache = []
        if has_cache and cache_top is not None:
            lane_h = CACHE_LANE - 10
            rh = lane_h * t.cache_read / cache_max
            wh = lane_h * t.cache_write / cache_max
            lane_bottom = cache_top + lane_h
            if rh:
                cache.append(
                    Rect(
                        round(x, 2),
                        round(lane_bottom - rh, 2),
                        round(bar_w, 2),
                        round(rh, 2),
                        "cache-read",
                    )
                )
            if wh:
                cache.append(
                    Rect(
                        round(x, 2),
                        round(lane_bottom - rh - wh, 2),
                        round(bar_w, 2),
                        round(wh, 2),
                        "cache-write",
                    )
                )
        bars.append(
            Bar(
                x=round(left + slot * i, 2),
                w=round(slot, 2),
                rects=rects,
                hit_y=plot_top,
                tip=_tip(t),
                dot=dot,
                compaction=bool(t.compactions),
                restore=bool(t.restores),
                now=t.now,
                last_event=t.last_event,
                trimmed=t.trimmed,
                cache=cache,
                cx=round(x + bar_w / 2, 2),
                total=t.total,
                call_id=t.call_id,
            )
        )

    # A handful of x labels: first, last and evenly spaced turns between.
    x_labels = []
    if bars_in:
        every = max(1, len(bars_in) // 8)
        for i in range(0, len(bars_in), every):
            label = "now" if bars_in[i].now else str(bars_in[i].last_turn)
            x_labels.append((round(left + slot * (i + 0.5), 1), label))
    return Chart(
        width=WIDTH,
        height=height,
        plot_top=plot_top,
        plot_bottom=plot_bottom,
        plot_left=left,
        plot_right=right,
        bars=bars,
        ticks=ticks,
        lines=lines,
        x_labels=x_labels,
        reported_path=" ".join(points),
        cache_top=cache_top,
        turns=series.turns,
        unit=series.unit,
        empty=not bars_in,
        per_bar=max((b.last_turn - b.first_turn + 1 for b in bars_in), default=1),
        call_url=call_url,
    )
