"""One lambo.toml setting as the schema describes it: section, name, default, rule
(``config_schema.py`` lists them all and checks a raw value against one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: a tuple is a TOML array: of strings, or of tables for a key with its own ``parse``
Value = str | int | float | bool | tuple[object, ...]


@dataclass(frozen=True)
class Key:
    """One setting: its section, name, type, default, variable and rule."""

    section: str
    name: str
    default: Value
    doc: str
    env: str | None = None
    #: more variables that set this key (each refused when it disagrees with another)
    also_env: tuple[str, ...] = ()
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    #: the check of a value no plain type describes (an array of tables)
    parse: Callable[[object, str], Value] | None = None
    #: a secret: taken from its variable or flag, never from lambo.toml
    secret: bool = False

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def kind(self) -> type:
        return type(self.default)
