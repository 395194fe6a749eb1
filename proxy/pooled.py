"""The proxy's pooled database connections (``settings_proxy``) go back to the pool
as soon as a piece of database work is done: a stream waiting on upstream holds none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connections


def release_connections() -> None:
    """This thread's pooled connections go back to the pool."""
    for connection in connections.all(initialized_only=True):
        if getattr(connection, "pool", None) is not None:
            connection.close()


def released(work: Callable[..., Any]) -> Callable[..., Any]:
    """``work``, then this thread's pooled connections go back to the pool."""

    def run(**kwargs: Any) -> Any:
        try:
            return work(**kwargs)
        finally:
            release_connections()

    return run
