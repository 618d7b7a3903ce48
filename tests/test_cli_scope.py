"""--scope and --layer on the tool commands: --scope is the tool's scope argument (every verb
but stats, whose tool has none), its refusals named by the flag; --layer (every verb, stats
too) reaches the client, and the ServeOptions of a command that serves the session itself."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from lambo_core import client
from lambo_core import serve as serve_module
from lambo_core.cli import cli
from lambo_core.serve import ServeOptions

NODE = "478416c2-0000-4000-8000-000000000000"

# Each verb with the least it needs, and the tool it calls.
VERBS: dict[str, tuple[tuple[str, ...], str]] = {
    "derive": (("--content", "lease TTL is 45s", "--kind", "logic"), "lambo_derive"),
    "record-action": (("--action", "raised the lease TTL"), "lambo_record_action"),
    "recall": (("--query", "lease"), "lambo_recall"),
    "inspect": (("--focus", "lease"), "lambo_inspect"),
    "saints": ((), "lambo_saints"),
    "stale": ((), "lambo_stale"),
    "reserve": (("--node", NODE), "lambo_reserve"),
    "release": (("--node", NODE), "lambo_reserve"),
}


def invoke(*args: str, toml: str | None = None, tmp_path: Path | None = None) -> Result:
    prefix: list[str] = []
    if toml is not None:
        assert tmp_path is not None
        (tmp_path / "lambo.toml").write_text(toml)
        prefix = ["--config", str(tmp_path / "lambo.toml")]
    return CliRunner().invoke(cli, [*prefix, *args])


def last_line(result: Result) -> str:
    return result.output.strip().splitlines()[-1]


class Recorder:
    """open_client, recording what each command asks of it and refusing every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.layers: list[tuple[str, ...]] = []

    @asynccontextmanager
    async def open_client(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        self.layers.append(kwargs["layers"])

        async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            self.calls.append((tool, arguments))
            return {"content": [{"type": "text", "text": "recorded"}], "isError": True}

        yield call


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    recording = Recorder()
    monkeypatch.setattr(client, "open_client", recording.open_client)
    yield recording


@pytest.mark.parametrize("verb", VERBS)
def test_scope_is_the_tools_scope_argument(verb: str, recorder: Recorder) -> None:
    rest, tool = VERBS[verb]
    result = invoke(verb, "--session", "s", "--store", "memory", *rest, "--scope", "general")
    assert result.exit_code == 2, result.output
    [(called, arguments)] = recorder.calls
    assert called == tool and arguments["scope"] == "general"
    plain = invoke(verb, "--session", "s", "--store", "memory", *rest)
    assert plain.exit_code == 2, plain.output
    assert "scope" not in recorder.calls[1][1]  # omitted unless given


@pytest.mark.parametrize("verb", [*VERBS, "stats"])
def test_layer_flags_reach_the_client(verb: str, recorder: Recorder) -> None:
    rest = VERBS[verb][0] if verb in VERBS else ()
    args = ("--session", "s", "--store", "memory", *rest, "--layer", "general", "--layer", "t")
    invoke(verb, *args)
    invoke(verb, "--session", "s", "--store", "memory", *rest)
    assert recorder.layers == [("general", "t"), ()]


def test_the_configured_layers_apply_unless_the_session_is_one(
    recorder: Recorder, tmp_path: Path
) -> None:
    toml = '[serve]\nlayers = ["general"]\n'
    for session in ("s", "general"):
        invoke("saints", "--session", session, "--store", "memory", toml=toml, tmp_path=tmp_path)
    invoke("saints", "--session", "s", "--store", "memory", "--layer", "team", toml=toml,
           tmp_path=tmp_path)  # fmt: skip
    assert recorder.layers == [("general",), (), ("team",)]


def test_a_session_as_its_own_layer_is_refused(recorder: Recorder) -> None:
    result = invoke("recall", "--session", "s", "--store", "memory", "--query", "q", "--layer", "s")
    assert result.exit_code == 2
    assert last_line(result) == (
        "lambo: configuration error: --layer names 's', the session to serve: a session "
        "cannot be its own layer; name the project session with --session and its shared "
        "sessions with --layer"
    )
    assert recorder.calls == []


def test_stats_takes_no_scope() -> None:
    result = invoke("stats", "--session", "s", "--store", "memory", "--scope", "s")
    assert result.exit_code == 2
    assert "No such option '--scope'" in result.output


# --- through the real service: the refusals name --scope --------------------------------------

CANONICAL = '[embedder]\nmatch_strategy = "canonical"\n'  # no model to load


@pytest.fixture
def store(tmp_path: Path) -> list[str]:
    """A SQLite store holding session s (written by a derive), with its lambo.toml."""
    (tmp_path / "lambo.toml").write_text(CANONICAL)
    flags = ["--config", str(tmp_path / "lambo.toml")]
    where = ["--session", "s", "--store", str(tmp_path / "lambo.db")]
    made = CliRunner().invoke(cli, [*flags, "derive", *where, *VERBS["derive"][0]])
    assert made.exit_code == 0, made.output
    return [*flags, *where]


def on(store: list[str], verb: str, *args: str) -> Result:
    flags, where = store[:2], store[2:]
    return CliRunner().invoke(cli, [*flags, verb, *where, *VERBS[verb][0], *args])


@pytest.mark.parametrize("verb", ["recall", "inspect", "saints", "stale"])
def test_a_read_scope_refusal_names_the_flag(verb: str, store: list[str]) -> None:
    result = on(store, verb, "--scope", " s")
    assert result.exit_code == 2, result.output
    assert last_line(result) == (
        'lambo: --scope " s" is not a scope of this session; its scopes are: s'
    )


@pytest.mark.parametrize("verb", ["derive", "record-action"])
def test_a_write_scope_refusal_names_the_flag(verb: str, store: list[str]) -> None:
    result = on(store, verb, "--scope", "general")
    assert result.exit_code == 2, result.output
    assert last_line(result) == "lambo: --scope must name this session or one of its layers: s"


@pytest.mark.parametrize(
    "verb", ["derive", "record-action", "recall", "inspect", "saints", "stale"]
)
def test_the_sessions_own_name_is_accepted(verb: str, store: list[str]) -> None:
    result = on(store, verb, "--scope", "s")
    assert result.exit_code == 0, result.output


def test_a_command_serving_the_session_itself_puts_the_layers_in_serve_options(
    monkeypatch: pytest.MonkeyPatch, store: list[str]
) -> None:
    opened: list[ServeOptions] = []
    real = serve_module.open_service

    def open_service(store: Any, config: Any, options: ServeOptions, **kw: Any) -> Any:
        opened.append(options)
        return real(store, config, options, **kw)

    monkeypatch.setattr(client, "open_service", open_service)
    result = on(store, "saints", "--layer", "general")
    assert result.exit_code == 0, result.output
    assert opened == [ServeOptions(session="s", agent="cli", layers=("general",))]
