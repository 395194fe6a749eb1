"""The house rules, checked on the source: dependencies run one way, the engine
stays pure, no import circles, no hidden imports, small documented modules.
The code beside the service (the Python client, the fakes, the benchmarks) is
held to the size rule and to imports that run one way too.

An AST walk over the project's own packages (no import-linter dependency: the
rules are few and the walk is fast). A new upward import, a Django or I/O
import in the engine, a circle or a 500-line module fails here with the file
and line to look at.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("contextsvc", "sessions", "prompting", "compaction", "proxy")
MAX_LINES = 400

# Lowest first; a module may import its own layer and the ones below it.
# The platform layer is the project's plumbing every app uses; the top layer
# assembles the apps (the API router, the URL conf, the WSGI entry point).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("engine", ("contextsvc.engine",)),
    (
        "platform",
        (
            "contextsvc.errors",
            "contextsvc.body_gate",
            "contextsvc.http",
            "contextsvc.nul",
            "contextsvc.openapi",
            "contextsvc.lru",
            "contextsvc.ratelimit",
            "contextsvc.middleware",
            "contextsvc.settings",
            "contextsvc.celery",
            "contextsvc",
        ),
    ),
    ("sessions", ("sessions",)),
    ("prompting", ("prompting",)),
    ("compaction", ("compaction",)),
    ("proxy", ("proxy",)),
    (
        "assembly",
        (
            "contextsvc.api",
            "contextsvc.urls",
            "contextsvc.urls_proxy",
            "contextsvc.wsgi",
            "contextsvc.asgi",
        ),
    ),
)

# The engine is pure computation: these (and anything not stdlib or listed in
# ENGINE_THIRD_PARTY) must never appear in it.
ENGINE_THIRD_PARTY = {"regex", "tiktoken"}
IO_MODULES = {
    "os", "io", "socket", "subprocess", "sqlite3", "urllib", "http", "shutil",
    "tempfile", "pathlib", "logging", "threading", "multiprocessing", "asyncio",
    "time", "random", "uuid", "select", "signal",
}  # fmt: skip


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported project module
    line: int
    local: bool  # inside a function


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _raw_imports(module: str) -> list[tuple[str, ast.stmt, bool]]:
    """(dotted name, node, in a function) for every import (``TYPE_CHECKING`` ones too)."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.update(id(n) for n in ast.walk(node))
    package = module if _is_package(module) else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            names = [f"{base}.{alias.name}" for alias in node.names] or [base]
        else:
            continue
        for name in names:
            out.append((name, node, id(node) in local))
    return out


def _imports() -> list[Import]:
    edges = []
    for module in MODULES:
        for name, node, local in _raw_imports(module):
            if name.split(".")[0] not in PACKAGES:
                continue
            target = _resolve(name)
            if target and target != module:
                edges.append(Import(module, target, node.lineno, local))
    return edges


IMPORTS = _imports()


def _layer(module: str) -> int:
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def _where(module: str, line: int) -> str:
    return f"{MODULES[module].relative_to(ROOT)}:{line}"


def test_every_module_belongs_to_a_layer():
    assert [m for m in MODULES if _layer(m) < 0] == []


def test_dependencies_run_one_way():
    upward = [
        f"{_where(i.source, i.line)} imports {i.target} "
        f"({LAYERS[_layer(i.source)][0]} → {LAYERS[_layer(i.target)][0]})"
        for i in IMPORTS
        if _layer(i.target) > _layer(i.source)
    ]
    assert upward == []


def test_prompting_and_compaction_meet_only_through_the_registry():
    # compaction sits above prompting; prompting never reaches up into it.
    bad = [
        _where(i.source, i.line)
        for i in IMPORTS
        if i.source.startswith("prompting") and i.target.startswith("compaction")
    ]
    assert bad == []


def test_engine_is_pure():
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for module in MODULES:
        if not module.startswith("contextsvc.engine"):
            continue
        for name, node, _ in _raw_imports(module):
            top = name.split(".")[0]
            if top == "contextsvc":
                if not name.startswith("contextsvc.engine"):
                    bad.append(f"{_where(module, node.lineno)} imports {name}")
            elif top in IO_MODULES or (top not in stdlib and top not in ENGINE_THIRD_PARTY):
                bad.append(f"{_where(module, node.lineno)} imports {name}")
    assert bad == []


def _is_ready(module: str, line: int) -> bool:
    """Whether ``line`` lies in an ``AppConfig.ready()``: app registries may only
    be filled once models are loaded, so those imports are local by necessity."""
    tree = ast.parse(MODULES[module].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "ready":
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                return True
    return False


def test_no_function_local_imports_of_project_modules():
    hidden = [
        f"{_where(i.source, i.line)} imports {i.target} inside a function"
        for i in IMPORTS
        if i.local and not (i.source.endswith(".apps") and _is_ready(i.source, i.line))
    ]
    assert hidden == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _edges(key) -> dict[str, set[str]]:
    # Imports under TYPE_CHECKING count: a circle hidden there is still one.
    edges: dict[str, set[str]] = defaultdict(set)
    for i in IMPORTS:
        a, b = key(i.source), key(i.target)
        if a != b:
            edges[a].add(b)
        edges[b]  # every node present
    return edges


def test_no_import_circle_between_modules():
    assert _cycles(_edges(lambda m: m)) == []


def _app(module: str) -> str:
    return LAYERS[_layer(module)][0]


def test_no_import_circle_between_apps():
    assert _cycles(_edges(_app)) == []


# The code beside the service, by top-level name: its folder (under ROOT) and what
# it must not import. The service imports none of it; the client is a distribution
# of its own and imports nothing of this repository; the fakes (shared by the tests
# and the benchmarks) and the benchmarks never import the tests. Benchmarks import
# the service inside functions, after django.setup(): the local-import rule is the
# service's alone.
BESIDE: dict[str, tuple[str, tuple[str, ...]]] = {
    "contextsvc_client": (
        "clients/python/src/contextsvc_client",
        (*PACKAGES, "fakes", "bench", "tests"),
    ),
    "fakes": ("fakes", ("bench", "tests", "contextsvc_client")),
    "bench": ("bench", ("tests",)),
}


def _beside() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top, (folder, _) in BESIDE.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((top, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


BESIDE_MODULES = _beside()


def _absolute_imports(path: Path, module: str) -> list[tuple[str, int]]:
    """(dotted name, line) of every import in ``path``, relative ones resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            out.append((base, node.lineno))
    return out


def _forbidden(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_service_imports_nothing_beside_it():
    beside = (*BESIDE, "tests")
    bad = [
        f"{_where(module, line)} imports {name}"
        for module, path in MODULES.items()
        for name, line in _absolute_imports(path, module)
        if _forbidden(name, beside)
    ]
    assert bad == []


def test_code_beside_the_service_imports_one_way():
    bad = []
    for module, path in BESIDE_MODULES.items():
        top = module.split(".")[0]
        for name, line in _absolute_imports(path, module):
            if _forbidden(name, BESIDE[top][1]):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert bad == []


def test_code_beside_the_service_is_found():
    # The walk above must see the client, every fake and every benchmark.
    assert {m.split(".")[0] for m in BESIDE_MODULES} == set(BESIDE)
    assert "bench.common" in BESIDE_MODULES and "contextsvc_client.client" in BESIDE_MODULES


@pytest.mark.parametrize(
    "relative",
    sorted(str(p.relative_to(ROOT)) for p in {*MODULES.values(), *BESIDE_MODULES.values()}),
)
def test_module_is_small_and_says_what_it_is_for(relative):
    path = ROOT / relative
    text = path.read_text()
    lines = text.count("\n")
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (max {MAX_LINES})"
    if text.strip():
        assert ast.get_docstring(ast.parse(text)), f"{path.relative_to(ROOT)} has no docstring"


ISSUE_REFERENCE = re.compile(r"\b[Ii]ssues? ?#?\d+\b|\(#\d+\)")


def test_comments_give_reasons_not_issue_numbers():
    cited = []
    for path in MODULES.values():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ISSUE_REFERENCE.search(line):
                cited.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert cited == []


# The provider APIs' names (``proxy.providers``): code outside those modules asks
# the provider object (``Dialect``) and never switches on which one it holds.
PROVIDER_MODULES = "proxy.providers"
PROVIDER_NAMES = {"anthropic", "openai", "responses"}


def _names_a_dialect(node: ast.AST) -> bool:
    """``dialect.name`` / ``call.dialect.name`` / ``self.name`` of a dialect, or a
    variable holding one's name (``dialect_name``)."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        inner = node.value
        label = inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", "")
        return "dialect" in label.lower()
    return isinstance(node, ast.Name) and "dialect" in node.id.lower()


def _is_name_attribute(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "name"


def _provider_switches(tree: ast.AST) -> list[int]:
    """Lines that compare a provider's name, or look it up in a table of its own."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = [s for s in sides if isinstance(s, ast.Constant) and s.value in PROVIDER_NAMES]
            if any(_names_a_dialect(s) for s in sides) or (
                named and any(_is_name_attribute(s) or _names_a_dialect(s) for s in sides)
            ):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "get" and any(_names_a_dialect(a) for a in node.args):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _names_a_dialect(node.slice):
            lines.append(node.lineno)
    return lines


def test_only_the_provider_modules_tell_providers_apart():
    bad = [
        _where(module, line)
        for module, path in MODULES.items()
        if module.startswith("proxy.")
        and not (module == PROVIDER_MODULES or module.startswith(PROVIDER_MODULES + "."))
        for line in _provider_switches(ast.parse(path.read_text()))
    ]
    assert bad == [], "ask the provider object (proxy.providers.base.Dialect) instead"


@pytest.mark.parametrize(
    "source",
    [
        'if dialect.name == "anthropic": pass',
        'x = call.dialect.name != "responses"',
        'x = dialect.name in ("openai", "responses")',
        'x = dialect_name == "anthropic"',
        'x = "openai" == self.name',
        "x = {'anthropic': 1}.get(dialect.name, 2)",
        "x = TABLE[dialect.name]",
    ],
)
def test_a_provider_switch_is_seen(source):
    assert _provider_switches(ast.parse(source)) == [1]


def test_a_provider_label_is_not_a_switch():
    assert _provider_switches(ast.parse('log(dialect.name, "x"); t.name in names')) == []
