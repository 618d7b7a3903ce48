"""Property-based fuzz of every tool: arguments drawn from each published schema, and wrong.

Every call answers: a result, or an error result naming a field. Never an internal
error, never a hang (each call has a failure bound), never a raw value echoed back
when it carries a character lambo refuses, and never an answer that cannot be sent
as UTF-8 JSON. Bounded by max_examples, with no per-example deadline (a noisy
shared machine must not fail a correct run).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambo_core.config import load_config
from lambo_core.embed.loader import LoadedModels
from lambo_core.mcp.tools import SCHEMAS
from lambo_core.service import SERVED_TOOLS, MemoryService, ToolResult
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore
from lambo_core.text import find_refused
from lambo_core.writes import WritePipeline

EXAMPLES_PER_TOOL = 120
CALL_BOUND_S = 30.0  # a failure bound on one call, not a timing
INTERNAL = "the call failed inside lambo"

# Characters lambo refuses or must treat with care, mixed into generated text.
HOSTILE = [
    "\ud800",  # lone surrogates: only Python's JSON parser lets them through
    "\udfff",
    "\x00",
    "\x1b",
    "\u202e",
    "\u200b",
    "\ufeff",
    "\u3164",
    "\u2028",
    "\U000e0041",
    "\u200d",
    "\n",
    "\t",
]
SESSION = "fuzz"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryService]:
    home: Path = tmp_path_factory.mktemp("fuzz")
    (home / "lambo.toml").write_text('[embedder]\nmatch_strategy = "canonical"\n')
    config = load_config(env={"LAMBO_HOME": str(home)}, cwd=home)
    session = Session.open(MemoryStore(), SESSION, EmbedderPlan.from_config(config, LoadedModels()))
    pipeline = WritePipeline(session).start()
    service = MemoryService(session, pipeline, config)
    # Something to refer to: references then resolve, match several or nothing.
    seed = {
        "agent_id": "seed",
        "concepts": [
            {"content": "the deploy runs on fridays", "concept_type": "logic"},
            {"content": "the deploy runs on mondays", "concept_type": "logic"},
        ],
    }
    assert not anyio.run(service.call, "lambo_derive", seed).is_error
    yield service
    pipeline.close()


# --- strategies from a schema -----------------------------------------------------------------

text = st.text(
    alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from(HOSTILE)), max_size=24
)
strings = st.one_of(
    text,
    st.sampled_from(["", " ", "deploy", "the deploy runs on fridays", SESSION, "fuzz-other"]),
    st.sampled_from(["2024-06-12T14:30:00Z", "2024-13-40T99:99:99Z", "yesterday"]),
    st.sampled_from(["00000000-0000-4000-8000-000000000000", "deadbeef", "lwr1.0.0.0"]),
    st.just("a" * 16_400),  # over the 16 KB cap
)
wrong_type = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    text,
    st.lists(st.integers(), max_size=2),
    st.dictionaries(text, st.integers(), max_size=2),
)


def value_for(schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """A value of the schema's type (inside or outside its bounds), or of a wrong type."""
    kind = schema.get("type")
    good: st.SearchStrategy[Any]
    if isinstance(kind, list):  # ["string", "null"]: any of them
        good = st.one_of(*(value_for({**schema, "type": k}, depth) for k in kind if k != "null"))
        return st.one_of(good, st.none())
    if "enum" in schema:
        good = st.one_of(st.sampled_from(schema["enum"]), strings)
    elif kind == "number":
        good = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers())
    elif kind == "string":
        good = strings
    elif kind == "integer":
        low = schema.get("minimum", -10)
        high = schema.get("maximum", low + 50_000)
        good = st.one_of(
            st.integers(min_value=low - 2, max_value=high + 2),
            st.sampled_from([low, high, -(2**63), 2**64]),
        )
    elif kind == "boolean":
        good = st.booleans()
    elif kind == "array":
        cap = schema.get("maxItems", 8)
        item = value_for(schema.get("items", {}), depth + 1)
        good = st.lists(item, max_size=min(cap, 3) if depth else min(cap, 4))
        if depth == 0:
            good = st.one_of(good, st.lists(item, min_size=cap + 1, max_size=cap + 1))
    elif kind == "object":
        good = object_for(schema, depth + 1)
    else:  # pragma: no cover - every schema member has a type
        good = wrong_type
    return st.one_of(good, good, good, wrong_type)


def object_for(schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    members = st.fixed_dictionaries(
        {name: value_for(properties[name], depth) for name in required},
        optional={
            **{
                name: value_for(member, depth)
                for name, member in properties.items()
                if name not in required
            },
            # now and then an argument no tool takes, or a refused timestamp
            "created_at": strings,
            "\u202eagent": st.integers(),
        },
    )
    if depth:
        return members
    # agent_id mostly valid, so the other arguments get read too
    return st.tuples(members, st.sampled_from(["agent-a", "agent-b", None])).map(
        lambda pair: {**pair[0], "agent_id": pair[1]} if pair[1] else pair[0]
    )


def valid_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value the tool accepts as far as types go (and mostly as far as values go)."""
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first
        return valid_for({**schema, "type": kind[0]})
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if kind == "number":
        return st.floats(min_value=-1.0, max_value=1.0)
    if schema.get("format") == "date-time":
        return st.just("2024-06-12T14:30:00Z")
    if kind == "string":
        return st.sampled_from(["agent-a", "a fact about deploys", "fuzz"])
    if kind == "integer":
        low = schema.get("minimum", 0)
        return st.integers(min_value=low, max_value=schema.get("maximum", low + 10))
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        item = schema.get("items", {})
        # references must resolve, so arrays of strings stay empty
        return (
            st.lists(valid_for(item), min_size=1, max_size=2)
            if "properties" in item
            else (st.just([]))
        )
    required = schema.get("required", [])
    return st.fixed_dictionaries(
        {name: valid_for(schema["properties"][name]) for name in required},
        optional={
            name: valid_for(member)
            for name, member in schema["properties"].items()
            if name not in required
        },
    )


def slots(schema: dict[str, Any], where: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place an argument can be: a member of an object, or the first item of an array."""
    for name, member in schema.get("properties", {}).items():
        yield (*where, name)
        if member.get("type") == "array" and "properties" in member.get("items", {}):
            yield (*where, name, 0)
            yield from slots(member["items"], (*where, name, 0))


def put(args: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        if isinstance(step, int):
            if not args:
                return
            args = args[step]
        else:
            args = args.setdefault(step, [] if isinstance(path[path.index(step) + 1], int) else {})
    if isinstance(path[-1], int):
        if args:
            args[path[-1]] = value
    else:
        args[path[-1]] = value


falsy_or_wrong = st.one_of(
    st.sampled_from([0, 0.0, False, True, {}, "", [], 1.5, float("nan")]), wrong_type
)


# --- what every answer must be -----------------------------------------------------------------


def unsafe_strings(value: Any) -> Iterator[str]:
    """Every string (value or key) that lambo must never echo raw: one it refuses."""
    if isinstance(value, str):
        if find_refused(value) is not None or any("\ud800" <= c <= "\udfff" for c in value):
            yield value
    elif isinstance(value, list):
        for item in value:
            yield from unsafe_strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from unsafe_strings(key)
            yield from unsafe_strings(item)


JSON_TYPES: dict[str, Any] = {
    "string": str,
    "array": list,
    "object": dict,
    "boolean": bool,
    "null": type(None),
}


def wrong_type_at(value: Any, schema: dict[str, Any], where: str) -> str | None:
    """The first field (by the test's own reading of the schema) whose JSON type is wrong."""
    kind = str(schema.get("type"))
    if isinstance(schema.get("type"), list):
        ok = any(isinstance(value, JSON_TYPES[k]) for k in schema["type"])
    elif kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, JSON_TYPES[kind])
    if not ok:
        return where
    if kind == "array":
        for i, item in enumerate(value):
            found = wrong_type_at(item, schema.get("items", {}), f"{where}[{i}]")
            if found:
                return found
    if kind == "object":
        for name, member in schema.get("properties", {}).items():
            if value.get(name) is not None:
                found = wrong_type_at(value[name], member, f"{where}.{name}".lstrip("."))
                if found:
                    return found
    return None


def check_answer(tool: str, args: dict[str, Any], result: ToolResult) -> None:
    wire = json.dumps(result.to_json(), ensure_ascii=False)
    wire.encode("utf-8")  # no lone surrogate leaks into an answer
    shown = "\n".join(result.texts)
    assert INTERNAL not in shown, (tool, shown)
    for raw in unsafe_strings(args):
        if len(raw) > 1 or raw in "\ud800\udfff\x00\x1b\u202e":
            assert raw not in wire, (tool, raw, shown)
    if result.is_error:
        names = [*SCHEMAS[tool]["properties"], *args, "arguments", "agent"]
        assert any(name in shown for name in names), (tool, shown)
    else:
        assert wrong_type_at(args, SCHEMAS[tool], "") is None, (tool, "accepted", shown)


def run_call(service: MemoryService, tool: str, args: dict[str, Any]) -> ToolResult:
    async def go() -> ToolResult:
        with anyio.fail_after(CALL_BOUND_S):
            return await service.call(tool, args)

    return anyio.run(go)


@pytest.mark.parametrize("tool", SERVED_TOOLS)
def test_every_tool_answers_every_argument_by_field(service: MemoryService, tool: str) -> None:
    @settings(
        max_examples=EXAMPLES_PER_TOOL,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(args=object_for(SCHEMAS[tool]))
    def fuzz(args: dict[str, Any]) -> None:
        if tool == "lambo_stats" and isinstance(args.get("wait_ms"), int):
            args["wait_ms"] = min(args["wait_ms"], 50)  # a receipt wait is a real wait
        check_answer(tool, args, run_call(service, tool, args))

    fuzz()


@pytest.mark.parametrize("tool", SERVED_TOOLS)
def test_one_wrong_type_anywhere_is_refused_by_its_field(service: MemoryService, tool: str) -> None:
    schema = SCHEMAS[tool]
    places = list(slots(schema))

    @settings(max_examples=EXAMPLES_PER_TOOL, deadline=None)
    @given(
        base=valid_for(schema),
        place=st.sampled_from(places),
        wrong=falsy_or_wrong,
    )
    def fuzz(base: dict[str, Any], place: tuple[Any, ...], wrong: Any) -> None:
        args = json.loads(json.dumps(base))
        put(args, place, wrong)
        bad = wrong_type_at(args, schema, "")
        result = run_call(service, tool, args)
        check_answer(tool, args, result)
        if bad is not None:
            assert result.is_error, (tool, bad, result.texts)
            assert bad.split("[")[0].split(".")[-1] in result.texts[0] or bad in result.texts[0]

    fuzz()


def test_an_argument_object_of_any_type_is_refused_by_name(service: MemoryService) -> None:
    for tool in SERVED_TOOLS:
        not_objects: tuple[Any, ...] = (None, [], "x", 0, False)
        for args in not_objects:
            result = run_call(service, tool, args)
            assert result.is_error
            assert result.texts == [f"the arguments of {tool} must be an object"]
