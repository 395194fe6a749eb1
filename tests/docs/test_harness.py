"""The doc tests' own rules, on made-up pages: what counts as marked, and what a block must show."""

from __future__ import annotations

import json
import os

from tests.docs.blocks import blocks, problems
from tests.docs.runners import PythonPage, ShellPage, shown_answers

PAGE = """# A page

```sh
echo runs
```

<!-- example: skip — needs a real key -->
```sh
claude
```

Not run by the doc tests (needs a real key):

<!-- example: skip — needs a real key -->
```python
call_the_provider()
```

<!-- example: sometimes -->
```json
{}
```
"""


def test_marks_need_a_reason_a_visible_note_and_a_known_kind(tmp_path):
    (tmp_path / "page.md").write_text(PAGE)
    found = blocks(tmp_path / "page.md", tmp_path)
    assert [(b.line, b.kind) for b in found] == [
        (3, "run"),
        (8, "skip"),
        (15, "skip"),
        (20, "sometimes"),
    ]
    assert [len(problems(b)) for b in found] == [0, 1, 0, 1]
    assert "not run by the doc tests" in problems(found[1])[0]


def test_a_shown_answer_is_compared_by_its_field_names(tmp_path):
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"id": "out_1", "byte_size": 10}))
    env = dict(os.environ)
    block = f'X=$(curl -s file://{answer})\n# {{"id": "out_…", "byte_size": 4812331, "line_count": 3}}\n'
    assert shown_answers(block) == [{"id", "byte_size", "line_count"}]
    page = ShellPage(tmp_path / "state", env, tmp_path)
    failed = page.run(block)
    assert not failed.ok and "'line_count'" in failed.output
    assert page.run(block.replace(', "line_count": 3', "")).ok
    # The variable the first block set is there for the next one.
    assert page.run('test "$X" = \'{"id": "out_1", "byte_size": 10}\'\n').ok
    assert not page.run("false\n").ok


def test_python_blocks_share_a_namespace_and_may_await(tmp_path):
    page = PythonPage(dict(os.environ), tmp_path, tmp_path / "python.log")
    try:
        assert page.run("import asyncio\nx = await asyncio.sleep(0, result=41)\n", "p:1").ok
        assert page.run("assert x + 1 == 42\n", "p:2").ok
        failed = page.run("undefined_name\n", "p:3")
        assert not failed.ok and "NameError" in failed.output
    finally:
        page.close()
