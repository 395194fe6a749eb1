"""A proxied call's record keeps the client's request beside what was sent
(docs/proxy.md#what-changed): what it carried, what was new, and what the
proxy changed — outputs sent as views, the note after the last item, tools
added, cache markers placed, fields passed through."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.urls import reverse

from fakes.streams import ScriptedReply, tool_call
from sessions.models import AgentKey, ContextCall, Message, Session
from sessions.services.sessions import session_create
from tests.proxy.conftest import PROXY_DB, asgi_claude
from tests.ui.conftest import op, operator  # noqa: F401 - the fixtures

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"
TOOLS = [
    {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}},
    {
        "name": "mcp__github__create_issue",
        "description": "Create an issue",
        "input_schema": {"type": "object"},
        "cache_control": {"type": "ephemeral"},
    },
]
# Enough MCP tools to pass the deferral threshold of a 24,000-token window.
TOOLS += [
    {
        "name": f"mcp__docs__page_{n}",
        "description": f"Fetch documentation page {n}. " + "Returns the page as markdown. " * 30,
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    for n in range(12)
]
BIG = "\n".join(f"line {i}: " + "x" * 70 for i in range(1500))


def _loop(key: str, sid: str, turns: int) -> list[dict]:
    history: list[dict] = [{"role": "user", "content": "list the files"}]

    async def run():
        client = asgi_claude(key, session=sid)
        for n in range(turns):
            reply = await client.messages.create(
                model=MODEL,
                max_tokens=1000,
                tools=TOOLS,
                system=[
                    {
                        "type": "text",
                        "text": "You are terse.",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
                messages=history,
                metadata={"user_id": "u1"},
            )
            history.append(
                {"role": "assistant", "content": [b.model_dump() for b in reply.content]}
            )
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": BIG}
                    ],
                }
            )

    async_to_sync(run)()
    return history


def _session(alice_key, sid: str) -> None:
    session_create(
        owner=AgentKey.objects.get(pk=alice_key[0].pk),
        data={"id": sid, "model": MODEL, "context_window": 24_000, "max_output_tokens": 1000},
    )


def _script(fake, turns: int) -> None:
    fake.script(
        *(
            ScriptedReply(
                text=f"step {n}", tool_calls=[tool_call("Bash", {"n": n}, id=f"toolu_{n}")]
            )
            for n in range(turns)
        )
    )


def test_the_record_lists_what_the_client_sent_and_what_the_proxy_changed(upstreams, alice_key):
    fake, _ = upstreams
    _session(alice_key, "ses_account")
    _script(fake, 4)
    _loop(alice_key[1], "ses_account", 4)
    records = list(ContextCall.objects.filter(session__external_id="ses_account").order_by("id"))
    assert len(records) == 4
    last = records[-1]
    client, changes = last.request["client"], last.request["changes"]
    # What the client carried: 7 messages, 6 of them in its previous request, one new.
    assert (client["messages"], client["same_as_previous"], client["appended"]) == (7, 6, 1)
    assert client["new_seqs"] == [7, 7] and client["diverged"] is False
    assert client["tools"]["names"][:2] == ["Bash", "mcp__github__create_issue"]
    assert client["system"]["chars"] == len("You are terse.")
    # The same system prompt and tools each call: the same digests.
    assert len({r.request["client"]["system"]["digest"] for r in records}) == 1
    assert len({r.request["client"]["tools"]["digest"] for r in records}) == 1
    # What the proxy changed: the fields it manages replaced, the others passed as sent.
    assert set(changes["fields"]["passed"]) == {"max_tokens", "model", "metadata"}
    assert set(changes["fields"]["replaced"]) == {"messages", "system", "tools"}
    assert "tool_search" in changes["tools"]["added"]
    assert "mcp__docs__page_0" in changes["tools"]["deferred"]
    assert changes["cache"]["client"] == ["tools[1]", "system[0]"]
    # Per message: the tool outputs went as views, the rest whole; a note after the last item.
    views = Message.objects.filter(session__external_id="ses_account", role="tool")
    view_seqs = sorted(views.exclude(view_state="full").values_list("seq", flat=True))
    assert view_seqs == [3, 5, 7]
    sent = last.breakdown["sent"]
    assert sent["ranges"] == [[1, 7]]
    assert sorted(seq for pairs in sent["views"].values() for seq, _ in pairs) == view_seqs
    (note,) = [item for item in last.breakdown["added"] if item["what"] == "note"]
    assert note["text"].startswith("[13 tools deferred")


def test_the_call_api_gives_the_side_by_side(upstreams, alice_key, alice, bob):
    fake, _ = upstreams
    _session(alice_key, "ses_account_api")
    _script(fake, 3)
    _loop(alice_key[1], "ses_account_api", 3)
    first, last = (
        ContextCall.objects.filter(session__external_id="ses_account_api")
        .order_by("id")
        .values_list("id", flat=True)
    )[::2]
    response = alice.get(f"/api/v1/sessions/ses_account_api/calls/{last}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == last and body["source"] == "proxy"
    account = body["account"]
    assert account["client"]["messages"] == 5
    assert account["since_previous"]["system_changed"] is False
    assert account["since_previous"]["messages_before"] == 3
    rows = account["messages"]
    assert [(r["from"], r["to"], r["as"]) for r in rows] == [
        (1, 2, "kept"),
        (3, 3, "view"),
        (4, 4, "kept"),
        (5, 5, "view"),
    ]
    assert {r["state"] for r in rows if r["as"] == "view"} == {"cut"}
    assert all(r["role"] == "tool" and r["ref"] for r in rows if r["as"] == "view")
    assert [item["what"] for item in account["added"]] == ["note"]
    # The first call has no previous one; another key's session, an unknown id: 404.
    assert (
        alice.get(f"/api/v1/sessions/ses_account_api/calls/{first}").json()["account"][
            "since_previous"
        ]
        is None
    )
    assert alice.get("/api/v1/sessions/ses_account_api/calls/99999999").status_code == 404
    assert bob.get(f"/api/v1/sessions/ses_account_api/calls/{last}").status_code == 404
    assert alice.get("/api/v1/sessions/ses_account_api/calls/%C2%B3").status_code == 404


def test_the_call_detail_shows_the_client_beside_what_was_sent(upstreams, alice_key, op):  # noqa: F811
    """The inspector's call detail: the trimmed outputs listed one by one with their
    refs, the note after the last item, the tools deferred, the fields passed."""
    fake, _ = upstreams
    _session(alice_key, "ses_account_page")
    _script(fake, 3)
    _loop(alice_key[1], "ses_account_page", 3)
    session = Session.objects.get(external_id="ses_account_page")
    last = ContextCall.objects.filter(session=session).order_by("-id").first()
    url = reverse("dashboard:session_call", args=[session.pk, last.pk])
    page = op.get(url, headers={"HX-Request": "true"}).content.decode()
    assert 'data-testid="call-account"' in page
    assert "The client sent" in page and "We sent" in page
    refs = Message.objects.filter(session=session, role="tool").values_list("output_ref", flat=True)
    for ref in refs:
        assert ref and ref in page
    assert page.count("<strong>cut</strong> view") == 2
    assert "a note after the last item" in page and "tools deferred to save context" in page
    assert 'passed untouched: <span class="mono">max_tokens, model, metadata' in page
    assert "unchanged" in page  # the system prompt, since the previous call
