"""Where the pinned agent CLIs are (``tests/agents``, installed by ``bin/test --agents``)."""

from __future__ import annotations

import os
from pathlib import Path

AGENTS_BIN = Path(__file__).resolve().parents[1] / "tests" / "agents" / "node_modules" / ".bin"


def agent_binary(command: str, label: str) -> str:
    """The path of ``command`` among the pinned CLIs (``CONTEXTSVC_AGENTS_BIN`` overrides
    the folder); ``FileNotFoundError`` naming ``label`` when it is not installed (their
    tests carry ``needs_agents``, so they skip or, in CI, fail before this)."""
    path = Path(os.environ.get("CONTEXTSVC_AGENTS_BIN") or AGENTS_BIN) / command
    if not path.exists():
        raise FileNotFoundError(f"{label} is not installed at {path}: run bin/test --agents")
    return str(path)
