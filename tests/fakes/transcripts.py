"""Hypothesis strategies for agent transcripts an append would accept.

Random interleavings of user text (sometimes blank, sometimes with an image),
assistant text, assistant tool calls (one to three, some in styles Anthropic's
id pattern refuses; an id is never open twice, but an answered one may be
used again, as appends allow), tool results for open calls (in any order,
late, trimmed, blank) and calls left unanswered.
``windows`` adds what compaction and retention do to it: a cut window start,
a retain and a summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from contextsvc.engine.messages import Message, ToolCall

TEXTS = st.one_of(
    st.sampled_from(["", " ", "\n\t", "ok", "Let me look.", "trailing space  ", "done\n"]),
    # No NUL and no lone surrogate: the API refuses both (a 422: NUL in a text
    # field, a surrogate is no valid JSON), so an append would fail.
    st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=30),
)
IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
}
ID_STYLES = ("toolu_{n:03d}", "call_{n}", "fn:{n}", "fn_{n}", "{n}.x")


@dataclass
class Transcript:
    messages: list[Message]
    window_start: int = 0
    retain: str = ""
    summary: str = ""
    tool_names: list[str] = field(default_factory=list)

    @property
    def window(self) -> list[Message]:
        return self.messages[self.window_start :]


@st.composite
def transcripts(draw: Any, max_messages: int = 14) -> list[Message]:
    n = draw(st.integers(1, max_messages))
    style = draw(st.sampled_from(ID_STYLES))
    messages: list[Message] = []
    open_calls: list[tuple[str, str]] = []
    answered: list[str] = []  # ids whose call was answered: free to be used again
    counter = 0
    for _ in range(n):
        kind = draw(st.sampled_from(["user", "assistant", "call", "result", "result"]))
        if kind == "result" and open_calls:
            call_id, name = open_calls.pop(draw(st.integers(0, len(open_calls) - 1)))
            answered.append(call_id)
            trimmed = draw(st.booleans())
            messages.append(
                Message(
                    role="tool",
                    content=draw(TEXTS),
                    tool_call_id=call_id,
                    name=draw(st.sampled_from([None, name])),
                    view="[tool output trimmed; ref=out_x]" if trimmed else None,
                    view_state="trimmed" if trimmed else "full",
                )
            )
        elif kind == "call":
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                counter += 1
                name = draw(st.sampled_from(["bash", "read"]))
                if answered and draw(st.booleans()):
                    call_id = answered.pop(draw(st.integers(0, len(answered) - 1)))
                else:
                    call_id = style.format(n=counter)
                calls.append(ToolCall(call_id, name, {"n": counter}))
                open_calls.append((calls[-1].id, name))
            messages.append(Message(role="assistant", content=draw(TEXTS), tool_calls=tuple(calls)))
        elif kind == "assistant":
            messages.append(Message(role="assistant", content=draw(TEXTS)))
        elif draw(st.booleans()):
            parts = [{"type": "text", "text": draw(TEXTS)}, IMAGE]
            messages.append(Message(role="user", content=parts))
        else:
            messages.append(Message(role="user", content=draw(TEXTS)))
    return messages


@st.composite
def windows(draw: Any, max_messages: int = 14) -> Transcript:
    messages = draw(transcripts(max_messages))
    return Transcript(
        messages=messages,
        window_start=draw(st.integers(0, len(messages))),
        retain=draw(st.sampled_from(["", "- keep parser.py"])),
        summary=draw(st.sampled_from(["", "We fixed the parser."])),
        tool_names=draw(st.sampled_from([["bash", "read"], ["bash"], []])),
    )
