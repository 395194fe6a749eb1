"""Configuration that cannot drift: every environment variable read anywhere is
declared once (contextsvc/variables/), docs/configuration.md is generated from
the declarations, and the typed getters enforce what is declared."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from contextsvc import settings_env
from contextsvc.settings_env import env_bool, env_choice, env_int, env_list, env_str, env_url
from contextsvc.variables import GROUPS, VARIABLES, Derived
from contextsvc.variables.docs import BEGIN, END, PAGE, page

ROOT = Path(__file__).resolve().parent.parent
# The service's code: every name it reads must be declared, and read through a getter.
SERVICE = ("contextsvc", "sessions", "proxy", "compaction", "prompting")
SERVICE_FILES = ("gunicorn.conf.py", "manage.py")
# Tests and benchmarks: the CONTEXTSVC_* names they read or set must be declared.
DEVELOPMENT = ("tests", "bench", "clients")
SCRIPTS = [p for p in (ROOT / "bin").iterdir() if p.is_file()] + [
    ROOT / ".ci" / "run",
    ROOT / "Dockerfile",
    ROOT / "docker-compose.yml",
]
GETTERS = {f"env_{kind}" for kind in ("str", "int", "bool", "url", "list", "choice", "path")}
OWN = re.compile(r"^CONTEXTSVC_[A-Z0-9_]*[A-Z0-9]$")
# Named only to assert they are gone from the deployment files.
RETIRED = {"CONTEXTSVC_REQUIRE_SECRET_KEY"}


def _is_os_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _literal(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def environment_names(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(name, line, how) for every literal name read from or written to the environment."""
    found = []
    for node in ast.walk(tree):
        name, how = None, ""
        if isinstance(node, ast.Call):
            func = node.func
            first = _literal(node.args[0]) if node.args else None
            if isinstance(func, ast.Attribute) and _is_os_environ(func.value):
                name, how = first, f"os.environ.{func.attr}"
            elif (
                isinstance(func, ast.Attribute)
                and func.attr == "getenv"
                and isinstance(func.value, ast.Name)
                and func.value.id == "os"
            ):
                name, how = first, "os.getenv"
            elif isinstance(func, (ast.Name, ast.Attribute)):
                called = func.id if isinstance(func, ast.Name) else func.attr
                if called in GETTERS:
                    name, how = first, called
                elif called in ("setenv", "delenv"):
                    name, how = first, called
        elif isinstance(node, ast.Subscript) and _is_os_environ(node.value):
            name, how = _literal(node.slice), "os.environ[]"
        elif isinstance(node, ast.Compare) and any(_is_os_environ(c) for c in node.comparators):
            name, how = _literal(node.left), "in os.environ"
        if name:
            found.append((name, node.lineno, how))
    return found


def _python_files(folders: tuple[str, ...]) -> list[Path]:
    files = []
    for folder in folders:
        files += [p for p in (ROOT / folder).rglob("*.py") if "node_modules" not in p.parts]
    return files


def _declared(name: str) -> bool:
    if name in VARIABLES:
        return True
    # NAME_FILE: a string or URL variable read from a file (docker secrets).
    base = name.removesuffix("_FILE")
    return base != name and base in VARIABLES and VARIABLES[base].kind in ("str", "url")


def test_every_variable_the_service_reads_is_declared():
    files = _python_files(SERVICE) + [ROOT / name for name in SERVICE_FILES]
    undeclared = [
        f"{path.relative_to(ROOT)}:{line}: {name} ({how})"
        for path in files
        for name, line, how in environment_names(ast.parse(path.read_text()))
        if not _declared(name)
    ]
    assert undeclared == []


def test_the_service_reads_the_environment_only_through_the_getters():
    """os.environ / os.getenv only in settings_env; writes (setdefault, assignment) are fine."""
    files = _python_files(SERVICE) + [ROOT / name for name in SERVICE_FILES]
    direct = []
    for path in files:
        if path == Path(settings_env.__file__):
            continue
        tree = ast.parse(path.read_text())
        written = {
            id(target)
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign)
            for target in node.targets
        }
        for name, line, how in environment_names(tree):
            if how.startswith(("os.environ.get", "os.getenv", "in os.environ")):
                direct.append(f"{path.relative_to(ROOT)}:{line}: {how}({name!r})")
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and _is_os_environ(node.value):
                if id(node) not in written:
                    direct.append(f"{path.relative_to(ROOT)}:{node.lineno}: os.environ[...] read")
    assert direct == []


def test_every_own_variable_the_tests_and_benchmarks_use_is_declared():
    undeclared = []
    for path in _python_files(DEVELOPMENT):
        tree = ast.parse(path.read_text())
        names = [(name, line) for name, line, _ in environment_names(tree)]
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg:
                names.append((node.arg, node.value.lineno))
            elif isinstance(node, ast.Dict):
                names += [(_literal(k), k.lineno) for k in node.keys if _literal(k)]
            elif isinstance(node, ast.Subscript) and _literal(node.slice):
                names.append((_literal(node.slice), node.lineno))
        undeclared += [
            f"{path.relative_to(ROOT)}:{line}: {name}"
            for name, line in names
            if OWN.match(name) and not _declared(name) and name not in RETIRED
        ]
    assert undeclared == []


def test_every_variable_the_scripts_and_deployment_files_use_is_declared():
    undeclared = []
    for path in SCRIPTS:
        text = path.read_text()
        names = set(re.findall(r"\bCONTEXTSVC_[A-Z0-9_]*[A-Z0-9]\b", text))
        # ${NAME:-default} / ${NAME:=default}: read from the caller's environment.
        names |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]*):[-=]", text))
        undeclared += [f"{path.relative_to(ROOT)}: {n}" for n in sorted(names) if not _declared(n)]
    assert undeclared == []


def test_a_scan_finds_every_kind_of_read():
    """The scanner itself: each way of reading a variable is seen (else the tests above pass vacuously)."""
    code = (
        "import os\n"
        "a = os.environ.get('A1')\nb = os.environ['A2']\nc = os.getenv('A3')\n"
        "d = env_int('A4')\ne = 'A5' in os.environ\nos.environ.setdefault('A6', 'x')\n"
    )
    assert [name for name, _, _ in environment_names(ast.parse(code))] == [
        "A1", "A2", "A3", "A4", "A5", "A6",
    ]  # fmt: skip


def test_every_declared_variable_is_used_somewhere():
    """A declaration nothing reads or sets any more is stale."""
    texts = [p.read_text() for p in _python_files(SERVICE + DEVELOPMENT)]
    texts += [(ROOT / name).read_text() for name in SERVICE_FILES]
    texts += [p.read_text() for p in SCRIPTS]
    declarations = ROOT / "contextsvc" / "variables"
    outside = "\n".join(
        t for t in texts if t not in {p.read_text() for p in declarations.glob("*.py")}
    )
    assert [name for name in VARIABLES if not re.search(rf"\b{name}\b", outside)] == []


def test_declared_defaults_are_valid_values_of_their_type():
    wrong = []
    for v in VARIABLES.values():
        d = v.default
        if isinstance(d, Derived) or d is None:
            continue
        ok = {
            "str": isinstance(d, str),
            "url": isinstance(d, str) and d.startswith(("http://", "https://")),
            "bool": isinstance(d, bool),
            "int": isinstance(d, int)
            and not isinstance(d, bool)
            and (v.minimum is None or d >= v.minimum)
            and (v.maximum is None or d <= v.maximum),
            "list": isinstance(d, list),
            "choice": d in v.choices,
            "path": isinstance(d, str),
        }[v.kind]
        if not ok or not v.meaning or v.group not in GROUPS:
            wrong.append(v.name)
    assert wrong == []


def test_the_configuration_page_is_generated_from_the_declarations():
    current = PAGE.read_text()
    assert page(current) == current, "docs/configuration.md is stale: run bin/manage docs_config"
    # Every declared variable has its row, with its meaning.
    for v in VARIABLES.values():
        assert f"| `{v.name}` |" in current


def test_regenerating_keeps_the_prose_around_the_tables():
    first = page("# Title\n\nHand-written.\n")
    assert first.startswith(f"# Title\n\nHand-written.\n\n{BEGIN}\n") and first.count(END) == 1
    edited = first.replace("| `DEBUG` |", "| `DEBUGGED` |") + "\nAfter the tables.\n"
    assert page(edited) == first + "\nAfter the tables.\n"


# --- the typed getters --------------------------------------------------------------


def test_a_getter_refuses_an_undeclared_name_and_a_wrong_type():
    with pytest.raises(TypeError, match="not declared"):
        env_str("NOT_DECLARED_ANYWHERE")
    with pytest.raises(TypeError, match="declared as int"):
        env_str("CONTEXTSVC_MAX_BATCH")


def test_a_declared_default_cannot_be_given_again_and_a_derived_one_must_be(monkeypatch):
    monkeypatch.delenv("CONTEXTSVC_MAX_BATCH", raising=False)
    monkeypatch.delenv("CONTEXTSVC_PLAIN_HTTP", raising=False)
    assert env_int("CONTEXTSVC_MAX_BATCH") == VARIABLES["CONTEXTSVC_MAX_BATCH"].default
    with pytest.raises(TypeError, match="declared"):
        env_int("CONTEXTSVC_MAX_BATCH", 5)
    with pytest.raises(TypeError, match="derived"):
        env_bool("CONTEXTSVC_PLAIN_HTTP")
    assert env_bool("CONTEXTSVC_PLAIN_HTTP", True) is True


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CONTEXTSVC_MAX_BATCH", "many", "is not an integer"),
        ("CONTEXTSVC_MAX_BATCH", "0", "must be >= 1"),
        ("CONTEXTSVC_REFUSAL_HOLD_SECONDS", "61", "must be <= 60"),
        ("CONTEXTSVC_AUTO_COMPACT", "maybe", "is not a boolean"),
        ("CONTEXTSVC_UPSTREAM_OPENAI_URL", "api.openai.com/v1", "is not an http(s) URL"),
        ("CONTEXTSVC_SUMMARIZER", "gpt", "is not one of auto, offline"),
    ],
)
def test_a_bad_value_names_the_variable(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    getter = {"int": env_int, "bool": env_bool, "url": env_url, "choice": env_choice}
    with pytest.raises(ImproperlyConfigured, match=f"^{name}=") as raised:
        getter[VARIABLES[name].kind](name)
    assert message in str(raised.value)


def test_values_are_parsed_to_their_type(monkeypatch, tmp_path):
    monkeypatch.setenv("CONTEXTSVC_MAX_BATCH", "7")
    monkeypatch.setenv("CONTEXTSVC_AUTO_COMPACT", "OFF")
    monkeypatch.setenv("ALLOWED_HOSTS", " a.example, ,b.example ")
    monkeypatch.setenv("CONTEXTSVC_UPSTREAM_OPENAI_URL", "http://127.0.0.1:9/v1/")
    monkeypatch.setenv("CONTEXTSVC_SUMMARIZER", "Offline")
    monkeypatch.setenv("CONTEXTSVC_FINAL_REPORT_TOOL", "   ")  # blank: unset
    secret = tmp_path / "key"
    secret.write_text("from-a-file\n")
    monkeypatch.setenv("CONTEXTSVC_UPSTREAM_OPENAI_API_KEY_FILE", str(secret))
    assert env_int("CONTEXTSVC_MAX_BATCH") == 7
    assert env_bool("CONTEXTSVC_AUTO_COMPACT") is False
    assert env_list("ALLOWED_HOSTS") == ["a.example", "b.example"]
    assert env_url("CONTEXTSVC_UPSTREAM_OPENAI_URL") == "http://127.0.0.1:9/v1"
    assert env_choice("CONTEXTSVC_SUMMARIZER") == "offline"
    assert env_str("CONTEXTSVC_FINAL_REPORT_TOOL") == "final_report"
    assert env_str("CONTEXTSVC_UPSTREAM_OPENAI_API_KEY") == "from-a-file"


def test_the_suite_runs_on_its_own_settings_in_every_worker():
    # xdist's workers inherit the environment tests/settings.py points at
    # contextsvc.settings (for the servers tests start); were a worker to load
    # that module, the shipped pacing would refuse the in-process clients.
    assert settings.SETTINGS_MODULE == "tests.settings"
    assert settings.CONTEXTSVC_RATE_PACE == "off"
