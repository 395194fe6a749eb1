"""Every environment variable the service, its scripts and its tests read, declared once.

Each is a ``Variable`` (name, group, type, default, meaning) in one of the
group modules here. The settings read them only through the typed getters of
``contextsvc.settings_env``, which refuse an undeclared name;
``bin/manage docs_config`` writes docs/configuration.md's tables from
``VARIABLES``; tests/test_configuration.py fails when code reads a name that is
not declared here, or the page differs from a fresh generation.
"""

from __future__ import annotations

from . import core, mail, workload
from .declaration import Derived, Variable

# The docs' sections, in this order: group -> (title, what the group is about).
GROUPS: dict[str, tuple[str, str]] = {
    "service": ("Service", "What the service is and where it keeps its files."),
    "security": ("Security", "Keys, hosts, HTTPS and the dashboard's sign-in."),
    "mail": ("Mail and password reset", "Password reset is served only where mail is delivered."),
    "database": ("Database", ""),
    "broker": ("Broker and workers", "Celery: the broker, task limits and queues."),
    "sessions": ("Sessions", "Tool names, token counts, stored outputs and recall."),
    "compaction": ("Compaction and summarisers", "[Compaction](compaction.md)."),
    "limits": ("Request limits", "Bigger or more is refused with a 4xx naming the field."),
    "per-key limits": (
        "Per-key limits",
        "No agent key may starve the others ([API](api.md), per-key limits).",
    ),
    "upstreams": ("Upstreams", "Where the drop-in proxy forwards ([Drop-in proxy](proxy.md))."),
    "proxy": ("Proxy process", "Its database pool (PostgreSQL)."),
    "server": (
        "Web server",
        "gunicorn.conf.py; command-line flags and `GUNICORN_CMD_ARGS` win over these.",
    ),
    "quick start": ("Quick start", "`bin/run`, `bin/setup` and docker-compose.yml."),
    "development": ("Development", "The tests and benchmarks; the service never reads these."),
}


def _gather() -> dict[str, Variable]:
    found: dict[str, Variable] = {}
    for variable in (*core.VARIABLES, *mail.VARIABLES, *workload.VARIABLES):
        if variable.name in found:
            raise ValueError(f"{variable.name} is declared twice")
        if variable.group not in GROUPS:
            raise ValueError(f"{variable.name}: unknown group {variable.group!r}")
        found[variable.name] = variable
    return found


VARIABLES: dict[str, Variable] = _gather()

__all__ = ["GROUPS", "VARIABLES", "Derived", "Variable"]
