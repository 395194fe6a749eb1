"""Instructions instead of seconds: a bench's measured part counted by callgrind.

On a shared two-core machine the CPU time of the same call moves by ±3 ms from
one run to the next, which hides a 10 % growth. The number of instructions a
process executes does not move with the machine's load: under callgrind the
same work counts the same to about 1 in 100,000, run after run.

``BENCH_INSTRUCTIONS=1``: ``rerun_under_callgrind()`` starts the bench again
under ``valgrind --tool=callgrind`` with counting off (the set-up runs at
Valgrind's plain speed, several times slower than native); ``counted()`` turns
counting on around the measured part alone and reads its total
(``BENCH_CALLGRIND_OUT=file``: the last measured part's profile, for
``callgrind_annotate``). What it counts
is this process's work (the parse, the build, the writes, the database client),
not PostgreSQL's: the same share of the proxy's work that ``time.process_time``
measures. Valgrind is Debian's package (``apt-get install valgrind``); the
measured calls run about 50 times slower than native.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

WANTED = os.environ.get("BENCH_INSTRUCTIONS", "") == "1"
_UNDER = "CONTEXTSVC_BENCH_UNDER_CALLGRIND"
ACTIVE = os.environ.get(_UNDER) == "1"


def rerun_under_callgrind() -> None:
    """With ``BENCH_INSTRUCTIONS=1``, replace this process by the same bench under
    callgrind (counting off); otherwise return."""
    if not WANTED or ACTIVE:
        return
    valgrind = shutil.which("valgrind")
    if valgrind is None or shutil.which("callgrind_control") is None:
        sys.exit("BENCH_INSTRUCTIONS=1 needs valgrind (apt-get install valgrind)")
    # As this process was started (a venv's python finds its packages by its own
    # path), but an executable, not a launcher script: valgrind follows no child.
    python = sys.executable
    with open(os.path.realpath(python), "rb") as binary:
        if binary.read(4) != b"\x7fELF":
            sys.exit(
                f"BENCH_INSTRUCTIONS=1: {python} is a script; run the bench with python itself"
            )
    env = {**os.environ, _UNDER: "1", "PYTHONHASHSEED": "0"}
    profile = os.environ.get("BENCH_CALLGRIND_OUT") or "/dev/null"
    command = [
        valgrind, "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={profile}",
        "--quiet", python, *sys.argv,
    ]  # fmt: skip
    os.execve(valgrind, command, env)


def _control(*args: str) -> str:
    done = subprocess.run(
        ["callgrind_control", *args, str(os.getpid())],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def _total(report: str) -> int:
    """The instructions of every thread in a ``callgrind_control -e Ir`` report."""
    return sum(int(n.replace(",", "")) for n in re.findall(r"Th\s+\d+\s+([\d,]+)", report))


@contextmanager
def counted() -> Iterator[list[int]]:
    """Count the instructions of the block: the list holds their number afterwards."""
    out: list[int] = []
    _control("--zero")
    _control("--instr=on")
    try:
        yield out
        out.append(_total(_control("-e", "Ir")))
    finally:
        _control("--instr=off")
