"""What a declared environment variable is: its name, type, default, meaning and group.

The declarations themselves live beside this module, one module per few groups
(contextsvc/variables/__init__.py gathers them); the settings read a variable only
through the typed getters of contextsvc/settings_env.py, which refuse a name that
is not declared, and docs/configuration.md is generated from the same records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["str", "int", "bool", "url", "list", "choice", "path"]


@dataclass(frozen=True, slots=True)
class Derived:
    """A default worked out at start from other settings; ``text`` says how (for the docs).

    The reader passes the value (``env_bool("CONTEXTSVC_PLAIN_HTTP", DEBUG)``); a
    variable with a fixed default takes it from its declaration alone.
    """

    text: str


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    group: str
    kind: Kind
    default: object  # the value when unset: None (unset), a fixed value, or Derived
    meaning: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    shown: str | None = None  # the default as the docs show it, when a bare number says too little

    @property
    def derived(self) -> bool:
        return isinstance(self.default, Derived)
