"""Argument rules every tool shares: unknown arguments, types, timestamps, integers, arrays.

Tools validate their arguments in one order: unknown and refused names first
(so a typo fails before anything else is read), then the type of every
argument against the tool's published schema (``check_types``), then agent_id,
then each argument's value in the order the tool's table lists it. Every
refusal is a ``ParameterError`` naming the field and the rule; an argument
name the caller made up is quoted only through ``show_safely``, and a value
is never repeated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .errors import ParameterError
from .mcp.tools import SCHEMAS
from .text import check_concept_type, check_string, parse_event_time, show_safely

# Argument names that carry a client timestamp. Lambo stamps write time
# itself; only event_time (an about-time) is accepted, and only on writes.
_TIMESTAMP_NAMES = frozenset(
    {"created_at", "updated_at", "flushed_at", "timestamp", "time", "date", "ts", "written_at"}
)


def _is_timestamp_name(name: str) -> bool:
    return name in _TIMESTAMP_NAMES or (
        name != "event_time" and (name.endswith("_at") or name.endswith("_time"))
    )


def check_arguments(
    tool: str, args: object, allowed: Iterable[str], *, where: str = ""
) -> Mapping[str, Any]:
    """Refuse a non-object, any timestamp argument by name, and any unknown argument.

    ``where`` prefixes nested objects (``concepts[0].``) so the field is named
    in full. At the top level (no ``where``) every argument's type is then
    checked against ``tool``'s published schema (``check_types``).
    """
    allowed_list = list(allowed)
    if not isinstance(args, Mapping):
        target = where.rstrip(".") or f"the arguments of {tool}"
        raise ParameterError(f"{target} must be an object")
    for name in args:
        if not isinstance(name, str):  # pragma: no cover - JSON keys are strings
            raise ParameterError(f"{where}argument names must be strings")
        if name in allowed_list:
            continue
        shown = show_safely(name, 64)
        if _is_timestamp_name(name):
            raise ParameterError(
                f"{where}{shown} is refused: lambo stamps write time itself; only "
                "lambo_derive and lambo_record_action take event_time, an RFC3339 "
                "historical about-time"
            )
        raise ParameterError(
            f"{where}{shown} is not an argument of {tool}; it takes {', '.join(allowed_list)}"
        )
    if not where:
        check_types(tool, args)
    return args


def check_types(tool: str, args: Mapping[str, Any]) -> None:
    """Refuse any argument, at any depth, whose JSON type is not its schema's.

    Driven by ``SCHEMAS``, so no argument's type goes unchecked (a ``false``
    where an array belongs is not read as "none"). Each refusal is the one the
    tool's own check gives for that field (the same functions raise it), so a
    wrong type reads the same whichever check meets it first. JSON null for
    an argument means omitted (the tool decides whether it is required); an
    argument the schema does not describe is left to the tool.
    """
    schema = SCHEMAS.get(tool)
    if schema is not None:
        _check_members(tool, "", args, schema)


# Checked by their own tools only, after the configuration they need: a server that cannot
# serve an image or a vector says so before anything of it is read (vector_input.py).
_OWN_CHECKS = frozenset({"image", "vector", "query_vector"})


def _check_members(tool: str, where: str, value: Mapping[str, Any], schema: Any) -> None:
    for name, member in schema.get("properties", {}).items():
        if not where and name in _OWN_CHECKS:
            continue
        if value.get(name) is not None:
            _check_type(tool, f"{where}{name}", value[name], member)


def _check_type(tool: str, field: str, value: object, schema: Any) -> None:
    kind = schema.get("type")
    if kind == "object":
        # As the tool will: a typo in a nested object is refused before its types.
        members = check_arguments(tool, value, schema.get("properties", {}), where=f"{field}.")
        _check_members(tool, f"{field}.", members, schema)
    elif kind == "array":
        check_list(field, value, len(value) if isinstance(value, list) else 0)
        assert isinstance(value, list)
        for i, item in enumerate(value):
            _check_type(tool, f"{field}[{i}]", item, schema.get("items", {}))
    elif kind == "string" and not isinstance(value, str):
        if field.endswith("concept_type"):  # the enum whose own check names its variants
            check_concept_type(field, value)
        if schema.get("format") == "date-time":
            parse_event_time(field, value)
        check_string(field, value)
    elif kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        if "maximum" in schema:  # else (wait_ms, which clamps) the tool's check names its bound
            check_int(field, value, schema["minimum"], schema["maximum"])
    elif kind == "boolean":
        check_bool(field, value)


def require(args: Mapping[str, Any], name: str, *, where: str = "") -> Any:
    if name not in args or args[name] is None:
        raise ParameterError(f"{where}{name} is required")
    return args[name]


def check_int(field: str, value: object, low: int, high: int) -> int:
    """An integer inside ``low..=high``; JSON's 5.0 is not an integer, nor is true."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"{field} must be an integer in {low}..={high}")
    if not low <= value <= high:
        raise ParameterError(f"{field} must be in {low}..={high}")
    return value


def clamp_int(field: str, value: object, low: int, high: int) -> int:
    """An integer clamped into ``low..=high`` (wait_ms: asking too much is harmless)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"{field} must be an integer in {low}..={high}")
    return max(low, min(high, value))


def check_bool(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{field} must be true or false")
    return value


def check_list(field: str, value: object, max_items: int, *, what: str = "items") -> list[Any]:
    """A JSON array of at most ``max_items`` entries."""
    if not isinstance(value, list):
        raise ParameterError(f"{field} must be an array")
    if len(value) > max_items:
        raise ParameterError(f"{field} has {len(value)} {what}; at most {max_items} are accepted")
    return value


def check_scope(
    scope: object, session: str, *, layers: Sequence[str] = (), writing: bool = False
) -> str | None:
    """The session ``scope`` names: this one (``session``) or one of its ``layers``; None
    when it is omitted or null, which means this session on reads and writes alike.

    Anything else is refused, the empty string too (not the same as omitting it), listing
    the session's scopes: writes with the write tools' rule ("must name this session or
    one of its layers"), reads naming the value, which is shown with any surrounding
    whitespace so that " lambo" does not read as "lambo". A hostile value is never
    repeated raw.
    """
    if scope is None:
        return None
    value = check_string("scope", scope, allow_empty=True)
    scopes = (session, *layers)
    if value in scopes:
        return value
    listed = ", ".join(scopes)
    if writing:
        raise ParameterError(f"scope must name this session or one of its layers: {listed}")
    raise ParameterError(
        f"scope {_quoted(value)} is not a scope of this session; its scopes are: {listed}"
    )


def _quoted(value: str) -> str:
    """``value`` in quotes, made safe by ``show_safely`` but keeping its surrounding
    whitespace in sight (``show_safely`` would drop it): spaces as they are, anything
    else escaped, and a long run cut."""
    core = value.strip()
    if not core:  # "" or only whitespace
        return f'"{_visible(value)}"'
    lead = value[: value.index(core)]
    trail = value[len(lead) + len(core) :]
    return f'"{_visible(lead)}{show_safely(core, 64)}{_visible(trail)}"'


_END_CAP = 8  # characters of surrounding whitespace shown on each side


def _visible(run: str) -> str:
    shown = "".join(c if c == " " else _ESCAPES.get(c, f"\\u{ord(c):04x}") for c in run[:_END_CAP])
    return shown + ("…" if len(run) > _END_CAP else "")


_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
