"""Shared argument rules: unknown names, timestamps, integers, arrays."""

from __future__ import annotations

import pytest

from lambo_core.args import check_arguments, check_bool, check_int, check_list, clamp_int, require
from lambo_core.errors import ParameterError

ALLOWED = ("agent_id", "query", "top_k")


def refusal(fn: object, *args: object) -> str:
    with pytest.raises(ParameterError) as info:
        fn(*args)  # type: ignore[operator]
    return info.value.render()


def test_known_arguments_pass() -> None:
    args = {"agent_id": "a", "query": "q"}
    assert check_arguments("lambo_recall", args, ALLOWED) is args


def test_unknown_argument_is_refused_by_name() -> None:
    text = refusal(check_arguments, "lambo_recall", {"agent_id": "a", "qeury": "q"}, ALLOWED)
    assert text.startswith("qeury is not an argument of lambo_recall")
    assert "agent_id, query, top_k" in text


@pytest.mark.parametrize("name", ["created_at", "updated_at", "timestamp", "flush_time"])
def test_timestamp_arguments_are_refused_by_name(name: str) -> None:
    text = refusal(check_arguments, "lambo_derive", {"agent_id": "a", name: "x"}, ALLOWED)
    assert text.startswith(f"{name} is refused")
    assert "event_time" in text


def test_hostile_argument_name_is_not_echoed_raw() -> None:
    name = "x\u202e\x1b[2J" + "y" * 500
    text = refusal(check_arguments, "lambo_recall", {name: 1}, ALLOWED)
    assert "\u202e" not in text and "\x1b" not in text
    assert len(text) < 300


def test_nested_objects_name_their_path() -> None:
    text = refusal(
        check_arguments,
        "lambo_derive",
        {"kind": 1},
        ("content",),
    )
    assert "kind is not an argument" in text
    text = refusal(
        lambda: check_arguments("lambo_derive", {"kind": 1}, ("content",), where="concepts[3].")
    )
    assert text.startswith("concepts[3].kind is not an argument")
    assert "must be an object" in refusal(check_arguments, "lambo_derive", [1], ALLOWED)


def test_require() -> None:
    assert require({"a": 1}, "a") == 1
    assert refusal(require, {}, "query") == "query is required"
    assert refusal(require, {"query": None}, "query") == "query is required"


def test_int_bounds_at_and_past_each_edge() -> None:
    assert check_int("top_k", 1, 1, 100) == 1
    assert check_int("top_k", 100, 1, 100) == 100
    assert refusal(check_int, "top_k", 0, 1, 100) == "top_k must be in 1..=100"
    assert refusal(check_int, "top_k", 101, 1, 100) == "top_k must be in 1..=100"
    assert "must be an integer" in refusal(check_int, "top_k", 5.0, 1, 100)
    assert "must be an integer" in refusal(check_int, "top_k", True, 1, 100)
    assert "must be an integer" in refusal(check_int, "top_k", "5", 1, 100)


def test_clamp() -> None:
    assert clamp_int("wait_ms", 99_999, 0, 34_000) == 34_000
    assert clamp_int("wait_ms", -5, 0, 34_000) == 0
    assert "integer" in refusal(clamp_int, "wait_ms", "1", 0, 34_000)


def test_bool_and_list() -> None:
    assert check_bool("release", True) is True
    assert refusal(check_bool, "release", 1) == "release must be true or false"
    assert check_list("concepts", [1, 2], 64) == [1, 2]
    assert refusal(check_list, "concepts", "x", 64) == "concepts must be an array"
    assert refusal(lambda: check_list("concepts", list(range(65)), 64, what="concepts")) == (
        "concepts has 65 concepts; at most 64 are accepted"
    )


# --- types against the published schemas ----------------------------------------------------

CONCEPT = {"content": "c", "concept_type": "logic"}


@pytest.mark.parametrize(
    ("tool", "args", "text"),
    [
        # falsy values of the wrong type are not read as "none"
        (
            "lambo_derive",
            {"agent_id": "a", "concepts": [{**CONCEPT, "against": 0.0}]},
            "concepts[0].against must be an array",
        ),
        (
            "lambo_derive",
            {"agent_id": "a", "concepts": [{**CONCEPT, "depends_on": False}]},
            "concepts[0].depends_on must be an array",
        ),
        (
            "lambo_derive",
            {"agent_id": "a", "concepts": [CONCEPT], "parent_of": {}},
            "parent_of must be an array",
        ),
        ("lambo_derive", {"agent_id": "a", "concepts": [CONCEPT], "parent_of": ""}, None),
        (
            "lambo_derive",
            {"agent_id": "a", "concepts": [CONCEPT], "parent_of": [{"parent": "p", "child": 0}]},
            "parent_of[0].child must be a string",
        ),
        (
            "lambo_derive",
            {"agent_id": "a", "concepts": [{**CONCEPT, "depends_on": ["x", 0]}]},
            "concepts[0].depends_on[1] must be a string",
        ),
        (
            "lambo_derive",
            {"agent_id": "a", "concepts": [None]},
            "concepts[0] must be an object",
        ),
        (
            "lambo_derive",
            {"agent_id": "a", "concepts": [{**CONCEPT, "concept_type": 1}]},
            "concepts[0].concept_type must be a string, one of "
            "entity, logic, constraint, resource, observation",
        ),
        (
            "lambo_derive",
            {"agent_id": "a", "concepts": [CONCEPT], "event_time": 0},
            "event_time must be an RFC3339 timestamp such as 2024-06-12T14:30:00Z",
        ),
        ("lambo_record_action", {"agent_id": "a", "action": "x", "produces": 0}, None),
        ("lambo_record_action", {"agent_id": "a", "action": "x", "modifies": False}, None),
        ("lambo_record_action", {"agent_id": "a", "action": "x", "against": ""}, None),
        ("lambo_recall", {"agent_id": "a", "query": "q", "top_k": 5.0}, None),
        ("lambo_reserve", {"agent_id": "a", "node_id": "n", "release": 0}, None),
        ("lambo_stats", {"agent_id": "a", "receipt": 0}, "receipt must be a string"),
        ("lambo_stale", {"agent_id": []}, "agent_id must be a string"),
    ],
)
def test_a_wrong_type_is_refused_by_field_at_any_depth(
    tool: str, args: dict[str, object], text: str | None
) -> None:
    from lambo_core.mcp.tools import SCHEMAS

    refused = refusal(check_arguments, tool, args, list(SCHEMAS[tool]["properties"]))
    if text is not None:
        assert refused == text
    assert refused.split(" ")[0].split("[")[0].split(".")[0] in args  # names the field


def test_a_typo_inside_a_nested_object_is_refused_before_a_type() -> None:
    args = {"agent_id": "a", "concepts": [{"contnet": "c", "against": 0}]}
    text = refusal(check_arguments, "lambo_derive", args, ("agent_id", "concepts"))
    assert text.startswith("concepts[0].contnet is not an argument of lambo_derive")
    assert text.endswith("it takes content, concept_type, depends_on, against")


def test_null_means_omitted_and_right_types_pass() -> None:
    args = {"agent_id": "a", "query": "q", "top_k": None, "scope": None}
    assert check_arguments("lambo_recall", args, (*ALLOWED, "scope")) is args


def test_the_schemas_publish_the_bounds_the_tools_enforce() -> None:
    from lambo_core import inspect, locks, stale
    from lambo_core.mcp.tools import SCHEMAS
    from lambo_core.recall import request

    def bounds(tool: str, name: str) -> tuple[int, int]:
        member = SCHEMAS[tool]["properties"][name]
        return member["minimum"], member["maximum"]

    assert bounds("lambo_recall", "top_k") == request.TOP_K_RANGE
    assert bounds("lambo_recall", "max_tokens") == request.MAX_TOKENS_RANGE
    assert bounds("lambo_recall", "traversal_depth") == request.DEPTH_RANGE
    assert bounds("lambo_reserve", "ttl_seconds") == locks.TTL_RANGE
    assert bounds("lambo_inspect", "depth") == inspect.DEPTH_RANGE
    assert bounds("lambo_stale", "offset") == stale.OFFSET_RANGE
