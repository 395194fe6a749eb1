"""One page's Python blocks in one interpreter: a block per line of JSON on stdin.

Each block runs in the page's namespace; top-level ``await`` is allowed (as
in ``python -m asyncio``) and runs on the page's one event loop. The answer,
``{"ok", "error"}``, is one line on stdout; what a block prints goes to stderr.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import sys
import traceback


def main() -> None:
    answers = sys.stdout
    sys.stdout = sys.stderr
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    namespace: dict[str, object] = {"__name__": "__main__"}
    for line in sys.stdin:
        block = json.loads(line)
        print(f"--- {block['filename']}", file=sys.stderr)
        try:
            code = compile(
                block["source"], block["filename"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
            result = eval(code, namespace)  # noqa: S307 - the docs' own examples
            if inspect.iscoroutine(result):
                loop.run_until_complete(result)
            answer = {"ok": True, "error": ""}
        except BaseException:  # noqa: BLE001 - any failure of the block is its answer
            answer = {"ok": False, "error": traceback.format_exc()}
        sys.stderr.flush()
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    loop.close()


if __name__ == "__main__":
    main()
