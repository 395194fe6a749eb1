"""Every example in README.md and docs/**/*.md runs against a started service, or says why not.

``blocks.py`` says which blocks run and how the others are marked;
``service.py`` starts ``bin/run`` on the fake provider APIs; ``runners.py`` runs
a page's blocks in order. The suite's summary prints how many blocks ran and
how many are marked, with their reasons (``conftest.py``).
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator

import pytest

from tests.docs.blocks import NOT_RUN_KINDS, SHELL, Block, blocks, pages, problems
from tests.docs.runners import Outcome, PythonPage, ShellPage
from tests.docs.service import Service, bin_run
from tests.docs.summary import RESULTS
from tests.live_server import ROOT

ALL = {str(p.relative_to(ROOT)): blocks(p, ROOT) for p in pages(ROOT)}
RUN_PAGES = [page for page, found in ALL.items() if any(b.runs for b in found)]
# A shell line that starts an agent CLI, Claude Code or Gemini CLI (after any VAR=value
# words; a line may end a continued one).
_AGENT = re.compile(r"(?m)^\s*(?:\w+=\S*\s+)*(?:claude|gemini)\s+[^=\s]")


def _launches_agent(page: str) -> bool:
    return any(b.runs and b.lang in SHELL and _AGENT.search(b.text) for b in ALL[page])


# A page that runs an agent CLI needs them: skipped where they are not
# installed (bin/test --agents installs them), a failure in CI (tests/parts.py).
PAGE_PARAMS = [
    pytest.param(page, marks=[pytest.mark.needs_agents] if _launches_agent(page) else [])
    for page in RUN_PAGES
]


def test_every_block_runs_or_is_marked_where_a_reader_sees_it():
    found = [p for page in ALL.values() for b in page for p in problems(b)]
    assert found == []
    assert any(b.kind in NOT_RUN_KINDS for page in ALL.values() for b in page)


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    with bin_run(tmp_path_factory.mktemp("docs"), RUN_PAGES) as started:
        # The README's page uses the key bin/run printed, as a reader's first steps do.
        started.page_keys["README.md"] = started.demo_key
        yield started


def _post_session(service: Service, page: str, fields: dict) -> Outcome:
    body = json.dumps({"model": "claude-sonnet-4-6", **fields}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{service.port}/api/v1/sessions",
        data=body,
        headers={
            "Authorization": f"Bearer {service.page_keys[page]}",
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - our server
            return Outcome(answer.status == 201, answer.read().decode())
    except urllib.error.HTTPError as refused:
        return Outcome(False, f"{refused.code} {refused.read().decode()}")


def _run(block: Block, service: Service, shell: ShellPage, python: PythonPage, page: str):
    text = service.localize(block.text)
    if block.kind == "session policy":
        return _post_session(service, page, {"policy": json.loads(text)})
    if block.kind == "session fields":
        return _post_session(service, page, json.loads(text))
    if block.lang in ("python", "py"):
        return python.run(text, block.where)
    return shell.run(text)


@pytest.mark.parametrize("page", PAGE_PARAMS)
def test_the_page_runs_in_order(page, service, tmp_path):
    runnable = [b for b in ALL[page] if b.runs]
    env = service.page_env(page)
    shell = ShellPage(tmp_path / "shell", env, service.workdir)
    python = PythonPage(env, service.workdir, tmp_path / "python.log")
    try:
        for block in runnable:
            outcome = _run(block, service, shell, python, page)
            RESULTS.append((block.where, outcome.ok))
            assert outcome.ok, f"{block.where} failed:\n{block.text}\n---\n{outcome.output[-6000:]}"
    finally:
        python.close()
