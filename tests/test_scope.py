"""The scope argument: omitted or null is this session, on reads and writes alike; this
session's name is accepted; anything else is refused with the spec's texts, listing the
session's scopes. Tool by tool through the real service (an unlayered session, whose only
scope is its own name), and the layered lists through ``check_scope`` itself (the layered
service validates scope with it before routing, so no tool's own code sees a layer)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from lambo_core.args import check_scope
from lambo_core.config import load_config
from lambo_core.embed.loader import LoadedModels
from lambo_core.errors import ParameterError
from lambo_core.service import MemoryService, ToolResult
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore
from lambo_core.writes import WritePipeline

NODE = "478416c2-0000-4000-8000-000000000000"

# Each tool that takes scope, with the least it needs besides it.
READS: dict[str, dict[str, Any]] = {
    "lambo_recall": {"query": "lease"},
    "lambo_inspect": {"focus": "lease TTL is 45s"},
    "lambo_saints": {},
    "lambo_stale": {},
    "lambo_reserve": {"node_id": NODE},
}
WRITES: dict[str, dict[str, Any]] = {
    "lambo_derive": {"concepts": [{"content": "lease TTL is 45s", "concept_type": "logic"}]},
    "lambo_record_action": {"action": "raised the lease TTL"},
}
WRITE_REFUSAL = "scope must name this session or one of its layers: s"


@pytest.fixture
def service(tmp_path: Any) -> Iterator[MemoryService]:
    (tmp_path / "lambo.toml").write_text('[embedder]\nmatch_strategy = "canonical"\n')
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    session = Session.open(MemoryStore(), "s", EmbedderPlan.from_config(config, LoadedModels()))
    pipeline = WritePipeline(session).start()
    yield MemoryService(session, pipeline, config)
    pipeline.close()


def seeded(service: MemoryService) -> str:
    """Write the concept inspect and reserve name, wait for it; its node id."""
    ack = call(service, "lambo_derive", WRITES["lambo_derive"])
    receipt = {"receipt": ack.structured and ack.structured["receipt"], "wait_ms": 30_000}
    outcome = call(service, "lambo_stats", receipt).structured
    assert outcome is not None and outcome["receipt"]["state"] == "applied"
    return str(outcome["receipt"]["created"][0])


def call(service: MemoryService, tool: str, args: dict[str, Any]) -> ToolResult:
    async def go() -> ToolResult:
        return await service.call(tool, {"agent_id": "a", **args})

    return anyio.run(go)


def refusal(service: MemoryService, tool: str, args: dict[str, Any]) -> str:
    result = call(service, tool, args)
    assert result.is_error, result.texts
    return result.texts[0]


def read_refusal(shown: str) -> str:
    return f"scope {shown} is not a scope of this session; its scopes are: s"


@pytest.mark.parametrize("tool", [*READS, *WRITES])
@pytest.mark.parametrize("scope", ["omitted", None, "s"])
def test_omitted_null_and_the_own_name_are_this_session(
    service: MemoryService, tool: str, scope: str | None
) -> None:
    node = seeded(service)
    args = {**READS, **WRITES, "lambo_reserve": {"node_id": node}}[tool]
    if scope != "omitted":
        args = {**args, "scope": scope}
    result = call(service, tool, args)
    assert not result.is_error, result.texts


@pytest.mark.parametrize("tool", READS)
@pytest.mark.parametrize(
    ("scope", "shown"),
    [
        ("general", '"general"'),
        ("", '""'),  # not the same as omitting it
        (" s", '" s"'),  # the space is shown, so it does not read as "s"
        ("s\t", '"s\\t"'),
        ("   ", '"   "'),
        ("S", '"S"'),  # names compare exactly
        ("x" * 100, '"' + "x" * 64 + '…"'),
        ("a\nb", '"a b"'),  # inside, show_safely's one line
    ],
)
def test_reads_refuse_any_other_value_naming_it(
    service: MemoryService, tool: str, scope: str, shown: str
) -> None:
    assert refusal(service, tool, {**READS[tool], "scope": scope}) == read_refusal(shown)


@pytest.mark.parametrize("tool", WRITES)
@pytest.mark.parametrize("scope", ["general", "", " s", "S"])
def test_writes_refuse_any_other_value_listing_the_scopes(
    service: MemoryService, tool: str, scope: str
) -> None:
    assert refusal(service, tool, {**WRITES[tool], "scope": scope}) == WRITE_REFUSAL


@pytest.mark.parametrize("tool", [*READS, *WRITES])
def test_a_scope_that_is_not_a_string_is_refused_by_type(service: MemoryService, tool: str) -> None:
    args = {**READS, **WRITES}[tool]
    assert refusal(service, tool, {**args, "scope": 3}) == "scope must be a string"


def test_a_hostile_scope_is_never_repeated_raw(service: MemoryService) -> None:
    text = refusal(service, "lambo_recall", {"query": "q", "scope": "x\x1b[31m"})
    assert "\x1b" not in text
    assert text.startswith("scope contains a disallowed control character (U+001B)")


# --- the layered lists, through check_scope -------------------------------------------------


def test_a_layered_session_accepts_itself_and_each_layer() -> None:
    layers = ("general", "team")
    assert check_scope(None, "lambo", layers=layers) is None
    assert check_scope(None, "lambo", layers=layers, writing=True) is None
    for name in ("lambo", "general", "team"):
        assert check_scope(name, "lambo", layers=layers) == name
        assert check_scope(name, "lambo", layers=layers, writing=True) == name


@pytest.mark.parametrize(
    ("layers", "listed"),
    [
        ((), "lambo"),
        (("general",), "lambo, general"),
        (("general", "team"), "lambo, general, team"),
    ],
)
@pytest.mark.parametrize(
    ("scope", "shown"),
    [
        ("rustydocs", '"rustydocs"'),
        ("", '""'),
        ("general ", '"general "'),
        ("\u3000x", '"\\u3000x"'),
    ],
)
def test_layered_refusal_texts(
    layers: tuple[str, ...], listed: str, scope: str, shown: str
) -> None:
    with pytest.raises(ParameterError) as read:
        check_scope(scope, "lambo", layers=layers)
    assert read.value.render() == (
        f"scope {shown} is not a scope of this session; its scopes are: {listed}"
    )
    with pytest.raises(ParameterError) as write:
        check_scope(scope, "lambo", layers=layers, writing=True)
    assert write.value.render() == (f"scope must name this session or one of its layers: {listed}")


def test_long_surrounding_whitespace_is_cut() -> None:
    with pytest.raises(ParameterError) as info:
        check_scope(" " * 20 + "general" + "\n" * 20, "lambo", layers=("general",))
    assert info.value.message == (
        'scope "        …general\\n\\n\\n\\n\\n\\n\\n\\n…" is not a scope of this session; '
        "its scopes are: lambo, general"
    )
