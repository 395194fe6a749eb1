"""Running one page's blocks in order: shell blocks with bash, Python blocks with the venv's python.

**Shell.** Each block runs in ``bash`` with ``set -euo pipefail``; the
variables it leaves behind (``KEY=…``, ``H=(…)``, exports) are handed to the
page's later blocks (``declare -p`` into a state file). ``curl`` is wrapped:
``--fail-with-body``, so an example's request that the service refuses (4xx/5xx)
fails the block, and each answer is kept. Where the block shows an answer in
the comment lines right after a ``curl`` (``# {"ref_id": …, "lines": 50, …}``),
what is stable is compared: every ``"name":`` shown there must be in the answer
(the values are the example's, not this run's).

**Python.** One interpreter per page (``python_driver.py``), so names carry from
block to block; top-level ``await`` works as in ``python -m asyncio``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BLOCK_TIMEOUT = 300  # seconds (Claude Code's walk-through is the longest, ~10 s)

_PROLOGUE = r"""
set -euo pipefail
__docs_dir=%(dir)s
[[ -f "$__docs_dir/state" ]] && source "$__docs_dir/state"
echo 0 >"$__docs_dir/curls"
__docs_save() {
  local name
  : >"$__docs_dir/state.new"
  for name in $(comm -13 "$__docs_dir/baseline" <(compgen -v | sort)); do
    [[ "$name" == __docs* ]] && continue
    declare -p "$name" >>"$__docs_dir/state.new" 2>/dev/null || true
  done
  mv "$__docs_dir/state.new" "$__docs_dir/state"
}
trap __docs_save EXIT
curl() {
  local n
  n=$(( $(cat "$__docs_dir/curls") + 1 ))
  echo "$n" >"$__docs_dir/curls"
  command curl --show-error --fail-with-body "$@" | tee "$__docs_dir/curl-$n.out"
  echo
}
"""
_CURL = re.compile(r"(?:^|[\s(|;&`])curl\s")
_SHOWN_NAME = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"\s*:')


@dataclass
class Outcome:
    ok: bool
    output: str


def shown_answers(text: str) -> list[set[str]]:
    """Per ``curl`` of a shell block, in order: the field names its answer comment shows."""
    lines = text.splitlines()
    shown: list[set[str]] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#") or not _CURL.search(line):
            i += 1
            continue
        calls = len(_CURL.findall(line))
        while lines[i].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            calls += len(_CURL.findall(lines[i]))
        comment = []
        j = i + 1
        while j < len(lines) and lines[j].strip().startswith("#"):
            comment.append(lines[j].strip().lstrip("#"))
            j += 1
        answer = " ".join(comment).strip()
        names = set(_SHOWN_NAME.findall(answer)) if answer.startswith(("{", "…")) else set()
        shown.extend([set()] * (calls - 1) + [names])
        i = j
    return shown


class ShellPage:
    """A page's shell blocks, one ``bash`` each, sharing their variables (module doc)."""

    def __init__(self, state_dir: Path, env: dict[str, str], cwd: Path) -> None:
        self.dir = state_dir
        self.dir.mkdir(parents=True)
        self.env = env
        self.cwd = cwd
        baseline = subprocess.run(
            ["bash", "-c", "compgen -v | sort"], env=env, capture_output=True, text=True, check=True
        )
        (self.dir / "baseline").write_text(baseline.stdout)

    def run(self, text: str) -> Outcome:
        script = _PROLOGUE % {"dir": json.dumps(str(self.dir))} + text
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
            check=False,
        )
        output = done.stdout + done.stderr
        if done.returncode != 0:
            return Outcome(False, f"exit {done.returncode}\n{output}")
        missing = []
        for n, names in enumerate(shown_answers(text), start=1):
            answer = self.dir / f"curl-{n}.out"
            got = answer.read_text(errors="replace") if answer.exists() else ""
            missing += [f"curl #{n}: {name!r}" for name in sorted(names) if f'"{name}"' not in got]
        if missing:
            return Outcome(
                False, f"fields the page shows but the answer lacks: {missing}\n{output}"
            )
        return Outcome(True, output)


class PythonPage:
    """A page's Python blocks in one interpreter (``python_driver.py``)."""

    def __init__(self, env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log = log
        self._err = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("python_driver.py"))],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )

    def run(self, text: str, filename: str) -> Outcome:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"source": text, "filename": filename}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            return Outcome(False, f"the interpreter died:\n{self.log.read_text()}")
        answer = json.loads(line)
        return Outcome(answer["ok"], answer["error"] + self.log.read_text()[-4000:])

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._err.close()
