"""Gemini ``generateContent`` bodies to and from the transcript (requests, contents, tools).

Rules (see ``common`` for the meta carried on a text part; Gemini's meta keys
start with ``gemini_`` so no other converter reads them):

- ``systemInstruction``: its text parts are sections ``system.0`` … in order.
- ``contents``: roles ``user`` and ``model`` (anything else is the API's 400).
  A ``model`` turn is an assistant message: ``text`` parts and images are its
  content in order, ``functionCall`` parts its ``tool_calls`` (after the other
  parts on the way back, the order the model emits), ``thought`` parts its
  ``reasoning`` (the parts themselves, with their signatures, in the meta). A
  ``user`` turn's ``functionResponse`` parts become one ``tool`` message each,
  in order; its other parts a user message after them. Messages made from one
  turn after its first carry ``gemini_join`` so the way back makes one turn.
- ``inlineData`` with an image type is the transcript's neutral ``image`` part
  (base64 source); every other part kind (files, code execution …) is kept
  verbatim as ``{"type": "gemini", "part": …}``, which other providers' builds
  leave out (``engine.parts``).
- Ids: a call without ``id`` gets a made-up one, stable across requests: a hash
  of its name and arguments, suffixed ``_2`` … only while an identical call is
  still unanswered. A reply and the next request that carries it back make the
  same id even when the client compressed its history in between, which a
  position could not promise. A ``functionResponse`` without ``id`` answers the
  oldest open call of its name; one with an id no open call has, the oldest
  id-less call of its name (``OpenCalls``). Made-up ids are not sent back (meta).
- A ``functionResponse``'s ``response`` object is the tool message's text: the
  value of its one ``output`` (or ``error``, flagged as such) key when that is
  a string, else the object as JSON; the way back rebuilds the same object.

What comes back equals what went in apart from these documented changes: keys
of ``systemInstruction`` other than ``parts``, several ``functionDeclarations``
entries (back as one, before the other tools), the part order of a turn with
text after a ``functionCall``, and user parts before a ``functionResponse``
(back after it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ..messages import PromptSection, ToolDef
from .common import ConversionError, Converted, attach_meta, client_tool_category, take_meta
from .gemini_contents import contents_from_transcript

MANAGED_FIELDS = ("contents", "systemInstruction", "system_instruction", "tools")
ROLES = ("user", "model")
MADE_PREFIX = "gemini_"  # ids made up for calls sent without one (``made_call_id``)
_IMAGE_PREFIX = "image/"
_DECLARATION_KEYS = {"name", "description", "parameters", "parametersJsonSchema"}


def request_to_transcript(body: dict[str, Any], *, messages: bool = True) -> Converted:
    """Split a ``generateContent`` request into transcript messages, sections, tools and the rest."""
    contents = body.get("contents")
    if not isinstance(contents, list):
        raise ConversionError("contents is not specified", "contents")
    tools, other_tools, extras = tools_to_defs(body.get("tools") or [])
    system = body.get("systemInstruction", body.get("system_instruction"))
    return Converted(
        messages=contents_to_transcript(contents) if messages else [],
        sections=system_to_sections(system),
        tools=tools,
        other_tools=other_tools,
        tool_extras=extras,
        rest={k: v for k, v in body.items() if k not in MANAGED_FIELDS},
    )


def request_from_transcript(converted: Converted) -> dict[str, Any]:
    """The request again: the inverse of ``request_to_transcript`` (module doc: what differs)."""
    body = dict(converted.rest)
    if converted.sections:
        body["systemInstruction"] = sections_to_system(converted.sections)
    body["contents"] = contents_from_transcript(converted.messages)
    if converted.tools or converted.other_tools:
        body["tools"] = tools_from_defs(
            converted.tools, converted.other_tools, converted.tool_extras
        )
    return body


# --- system and tools -------------------------------------------------------------


def system_to_sections(system: Any) -> list[PromptSection]:
    if system is None:
        return []
    if isinstance(system, str):  # the SDKs take a string and send parts; be as lenient
        return [PromptSection(name="system.0", content=system)]
    parts = system.get("parts") if isinstance(system, dict) else None
    if not isinstance(parts, list):
        raise ConversionError("Invalid value (parts)", "systemInstruction.parts")
    out = []
    for i, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise ConversionError(
                "system instruction parts must be text", f"systemInstruction.parts.{i}"
            )
        out.append(PromptSection(name=f"system.{i}", content=part["text"]))
    return out


def sections_to_system(sections: Sequence[PromptSection]) -> dict[str, Any]:
    return {"parts": [{"text": s.content} for s in sections]}


def tools_to_defs(
    tools: list[Any],
) -> tuple[list[ToolDef], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(function declarations, other tools verbatim, per declaration its extra keys and schema key)."""
    defs: list[ToolDef] = []
    others: list[dict[str, Any]] = []
    extras: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ConversionError("Invalid value: a tool is an object", f"tools.{i}")
        declarations = tool.get("functionDeclarations", tool.get("function_declarations"))
        if declarations is None:
            others.append(tool)
            continue
        for j, decl in enumerate(declarations if isinstance(declarations, list) else ()):
            if not isinstance(decl, dict) or not isinstance(decl.get("name"), str):
                raise ConversionError("function declaration name is required", f"tools.{i}.{j}")
            key = "parametersJsonSchema" if "parametersJsonSchema" in decl else "parameters"
            schema = decl.get(key) or {"type": "object", "properties": {}}
            name = decl["name"]
            defs.append(
                ToolDef(
                    name=name,
                    description=decl.get("description") or "",
                    input_schema=schema,
                    category=client_tool_category(name),
                )
            )
            # Always recorded: a tool without it is not the client's (``tools_from_defs``).
            extras[name] = {"schema_key": key if key in decl else None}
            if extra := {k: v for k, v in decl.items() if k not in _DECLARATION_KEYS}:
                extras[name]["extra"] = extra
    return defs, others, extras


def tools_from_defs(
    defs: Sequence[ToolDef],
    other_tools: Sequence[dict[str, Any]] = (),
    tool_extras: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One ``functionDeclarations`` entry, then the other tools.

    A tool the client did not declare in Gemini's shape gets ``parametersJsonSchema``:
    its schema is JSON Schema, which ``parameters`` (an OpenAPI subset) may refuse.
    """
    declarations = []
    for tool in defs:
        extra = (tool_extras or {}).get(tool.name, {"schema_key": "parametersJsonSchema"})
        decl: dict[str, Any] = {"name": tool.name}
        if tool.description:
            decl["description"] = tool.description
        key = extra.get("schema_key")
        if key is not None:
            decl[key] = tool.input_schema
        decl.update(extra.get("extra", {}))
        declarations.append(decl)
    out: list[dict[str, Any]] = [{"functionDeclarations": declarations}] if declarations else []
    out.extend(dict(t) for t in other_tools)
    return out


# --- ids --------------------------------------------------------------------------


def made_call_id(name: str, args: Any, open_ids: Sequence[str]) -> str:
    """A stable id for a call sent without one (module doc): hash, then a free suffix."""
    canon = json.dumps([name, args], sort_keys=True, ensure_ascii=False, default=str)
    base = MADE_PREFIX + hashlib.sha256(canon.encode()).hexdigest()[:12]
    candidate, n = base, 1
    while candidate in open_ids:
        n += 1
        candidate = f"{base}_{n}"
    return candidate


class OpenCalls:
    """Calls waiting for their ``functionResponse``, in order: pairs results by id or by name.

    A response without an id answers the oldest open call of its name. A
    response whose id no open call has answers the oldest open call of its
    name that came without an id: Gemini CLI makes up ids for the calls the
    API sends without one, and sends them on its responses only.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bool]] = []  # (id, name, id made up here)

    def ids(self) -> list[str]:
        return [call[0] for call in self.calls]

    def open(self, call_id: str, name: str, *, made: bool = False) -> None:
        self.calls.append((call_id, name, made))

    def answer(self, call_id: str | None, name: str) -> str | None:
        """The id of the call this response answers (now closed), else ``call_id``."""
        k = next((k for k, c in enumerate(self.calls) if c[0] == call_id), None)
        if k is None:
            k = next(
                (
                    k
                    for k, (_, open_name, made) in enumerate(self.calls)
                    if open_name == name and (call_id is None or made)
                ),
                None,
            )
        if k is None:
            return call_id
        return self.calls.pop(k)[0]


def add_meta(content: Any, extra: dict[str, Any]) -> Any:
    """``content`` with ``extra`` added to the meta it already carries."""
    if not extra:
        return content
    clean, meta = take_meta(content)
    return attach_meta(clean, {**meta, **extra})


# --- contents -> transcript ---------------------------------------------------------


def _parts(content: dict[str, Any], path: str) -> list[dict[str, Any]]:
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise ConversionError("contents.parts must not be empty", f"{path}.parts")
    for j, part in enumerate(parts):
        if not isinstance(part, dict):
            raise ConversionError("Invalid value: a part is an object", f"{path}.parts.{j}")
    return parts


def part_to_transcript(part: dict[str, Any]) -> dict[str, Any]:
    """A non-call, non-thought part as a transcript content part."""
    if isinstance(part.get("text"), str) and set(part) == {"text"}:
        return {"type": "text", "text": part["text"]}
    data = part.get("inlineData")
    if (
        set(part) == {"inlineData"}
        and isinstance(data, dict)
        and set(data) == {"mimeType", "data"}
        and str(data.get("mimeType", "")).startswith(_IMAGE_PREFIX)
    ):
        source = {"type": "base64", "media_type": data["mimeType"], "data": data["data"]}
        return {"type": "image", "source": source}
    return {"type": "gemini", "part": part}


def contents_to_transcript(
    contents: list[Any], *, offset: int = 0, open_calls: Sequence[tuple[str, str]] = ()
) -> list[dict[str, Any]]:
    """Gemini ``contents`` → transcript message dicts (module doc: the rules).

    ``open_calls``: (id, name) of calls made before these contents and not yet
    answered (a session's, when an agent appends a turn at a time), so an
    id-less response pairs with its call.
    """
    out: list[dict[str, Any]] = []
    calls = OpenCalls()
    for call_id, name in open_calls:
        calls.open(call_id, name, made=call_id.startswith(MADE_PREFIX))
    for i, content in enumerate(contents, offset):
        path = f"contents.{i}"
        if not isinstance(content, dict):
            raise ConversionError("Invalid value: a content is an object", path)
        role = content.get("role", "user")
        if role not in ROLES:
            raise ConversionError("Please use a valid role: user, model.", f"{path}.role")
        parts = _parts(content, path)
        meta: dict[str, Any] = {}
        extra = {k: v for k, v in content.items() if k not in ("role", "parts")}
        if extra:
            meta["gemini_content"] = extra
        if "role" not in content:
            meta["gemini_no_role"] = True
        made = (
            [model_to_transcript(parts, calls, meta)]
            if role == "model"
            else _user_to_transcript(parts, calls, meta, path)
        )
        for message in made[1:]:
            message["content"] = add_meta(message["content"], {"gemini_join": True})
        out.extend(made)
    return out


def model_to_transcript(
    parts: list[dict[str, Any]], calls: OpenCalls | None = None, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``model`` turn's parts (request or response) as an assistant transcript message."""
    calls = calls if calls is not None else OpenCalls()
    meta = dict(meta or {})
    content: list[dict[str, Any]] = []
    thoughts: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    call_meta: dict[str, dict[str, Any]] = {}
    for part in parts:
        if part.get("thought"):
            thoughts.append(part)
            continue
        call = part.get("functionCall")
        if not isinstance(call, dict):
            content.append(part_to_transcript(part))
            continue
        name = str(call.get("name") or "")
        args = call.get("args") if isinstance(call.get("args"), dict) else {}
        given = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else None
        call_id = given or made_call_id(name, args, calls.ids())
        calls.open(call_id, name, made=given is None)
        tool_calls.append({"id": call_id, "name": name, "arguments": args})
        kept: dict[str, Any] = {}
        if given is None:
            kept["made"] = True
        if extra := {k: v for k, v in part.items() if k != "functionCall"}:
            kept["part"] = extra
        if extra := {k: v for k, v in call.items() if k not in ("name", "args", "id")}:
            kept["call"] = extra
        if "args" not in call:
            kept["no_args"] = True
        if kept:
            call_meta[call_id] = kept
    if call_meta:
        meta["gemini_calls"] = call_meta
    if thoughts:
        meta["gemini_thoughts"] = thoughts
    message: dict[str, Any] = {"role": "assistant", "content": attach_meta(content, meta)}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if thoughts:
        message["reasoning"] = "".join(str(t.get("text") or "") for t in thoughts)
    return message


def _user_to_transcript(
    parts: list[dict[str, Any]], calls: OpenCalls, meta: dict[str, Any], path: str
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        if "functionCall" in part:
            raise ConversionError(
                "functionCall parts are only allowed in model turns", f"{path}.parts.{j}"
            )
        response = part.get("functionResponse")
        if not isinstance(response, dict):
            rest.append(part_to_transcript(part))
            continue
        out.append(tool_message(response, part, calls, f"{path}.parts.{j}"))
    if rest or not out:
        out.append({"role": "user", "content": rest})
    out[0]["content"] = add_meta(out[0]["content"], meta)
    return out


def tool_message(
    response: dict[str, Any], part: dict[str, Any], calls: OpenCalls, path: str
) -> dict[str, Any]:
    name = response.get("name")
    if not isinstance(name, str):
        raise ConversionError("function response name is required", f"{path}.functionResponse.name")
    given = response.get("id") if isinstance(response.get("id"), str) and response["id"] else None
    call_id = calls.answer(given, name) or made_call_id(name, "result", [])
    result = response.get("response")
    meta: dict[str, Any] = {}
    key = next(iter(result)) if isinstance(result, dict) and len(result) == 1 else None
    if key in ("output", "error") and isinstance(result[key], str):
        text = result[key]
        if key == "error":
            meta["is_error"] = True
    else:
        text = json.dumps(result, ensure_ascii=False)
        meta["gemini_json"] = True
    if given is None:
        meta["gemini_made_id"] = True
    elif given != call_id:  # the client's own id for a call sent without one
        meta["gemini_response_id"] = given
    if extra := {k: v for k, v in response.items() if k not in ("name", "id", "response")}:
        meta["gemini_response"] = extra
    if extra := {k: v for k, v in part.items() if k != "functionResponse"}:
        meta["gemini_part"] = extra
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "name": name,
        "content": attach_meta(text, meta),
    }
