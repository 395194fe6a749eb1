"""The client stands alone: installable by itself, typed, importing nothing of the service."""

from __future__ import annotations

import ast
import inspect
import sys
import tomllib
from pathlib import Path

import contextsvc_client
from contextsvc_client import AsyncClient, AsyncSession, Client, Session

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"
SOURCE = CLIENT / "src" / "contextsvc_client"
SERVICE = {"contextsvc", "sessions", "prompting", "compaction", "proxy", "django", "ninja"}
# Each framework module may import its own framework (an optional extra), nothing else may.
OPTIONAL = {"agents.py": {"agents"}, "langchain.py": {"langchain", "langchain_core"}}


def _top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_client_imports_only_httpx_the_stdlib_and_its_extras():
    allowed = set(sys.stdlib_module_names) | {"httpx", "__future__"}
    for path in SOURCE.glob("*.py"):
        imported = _top_level_imports(path)
        assert not imported & SERVICE, path.name
        assert imported <= allowed | OPTIONAL.get(path.name, set()), (path.name, imported - allowed)


def test_the_package_is_typed_and_declares_its_extras():
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "contextsvc-client"
    assert [d.split(">")[0] for d in project["dependencies"]] == ["httpx"]
    assert set(project["optional-dependencies"]) == {"agents", "langchain"}
    assert (SOURCE / "py.typed").exists()
    # The tests import the installed (editable) package, this very source.
    assert Path(contextsvc_client.__file__).resolve().parent == SOURCE.resolve()


def _relative_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.module or "__init__"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level
    }


def test_the_two_clients_share_their_operations_without_importing_each_other():
    # Both take the operations from _ops and the retry rule from _core; neither
    # reaches for the other or the package (no import circle).
    for name in ("client.py", "aio.py"):
        imported = _relative_imports(SOURCE / name)
        assert imported <= {"_core", "_ops", "errors"}, (name, imported)
    assert _relative_imports(SOURCE / "_ops.py") <= {"_core"}
    assert _relative_imports(SOURCE / "_core.py") <= {"errors"}


def test_sync_and_async_clients_offer_the_same_methods_with_the_same_signatures():
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_") and name not in {"close", "aclose"}
        }

    for sync, asynchronous in ((Client, AsyncClient), (Session, AsyncSession)):
        ours, theirs = public(sync), public(asynchronous)
        assert set(ours) == set(theirs)
        for name, signature in ours.items():
            assert list(signature.parameters) == list(theirs[name].parameters), name
    session = AsyncClient("http://svc", "cx_k").session("s")
    pending = session.budget()
    assert inspect.isawaitable(pending)
    pending.close()  # never sent
    assert Client("http://svc", "cx_k").session("s").__class__ is Session
