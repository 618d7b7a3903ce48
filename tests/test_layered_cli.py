"""A layered session from the command line: one-shot commands on a SQLite store attach the
layer themselves (`--layer general`), and a layered stdio serve introduces itself with the
layered paragraph. Spec: "How the server introduces itself" (L594-L606); issue #17 item 5."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from click.testing import CliRunner, Result
from mcp import Client, StdioServerParameters

from lambo_core.cli import cli
from lambo_core.mcp.tools import instructions
from tests.layered_serve import CANONICAL, PREFERENCE, PROJECT_FACT

REPO = Path(__file__).resolve().parents[1]


def lambo(tmp_path: Path, verb: str, *args: str) -> Result:
    (tmp_path / "lambo.toml").write_text(CANONICAL)
    where = ["--session", "lambo", "--store", str(tmp_path / "lambo.db")]
    return CliRunner().invoke(cli, ["--config", str(tmp_path / "lambo.toml"), verb, *where, *args])


def test_one_shot_commands_write_into_and_read_the_layer(tmp_path: Path) -> None:
    shared = lambo(
        tmp_path, "derive", "--scope", "general", "--layer", "general",
        "--content", PREFERENCE, "--kind", "logic",
    )  # fmt: skip
    assert shared.exit_code == 0, shared.output
    assert shared.output.startswith("applied — derived 1 concept(s): 1 created")
    shared_id = shared.output.split("created: ")[1].split()[0]
    own = lambo(tmp_path, "derive", "--content", PROJECT_FACT, "--kind", "logic")
    assert own.exit_code == 0, own.output

    merged = lambo(tmp_path, "recall", "--layer", "general", "--query", "worktree tarball")
    assert merged.exit_code == 0, merged.output
    assert f"{PREFERENCE} [Logic] (score " in merged.output
    assert f"id {shared_id[:8]}, from general)" in merged.output
    assert PROJECT_FACT in merged.output
    # without --layer the project reads alone: general's preference is not in it
    alone = lambo(tmp_path, "recall", "--query", "worktree tarball")
    assert alone.exit_code == 0, alone.output
    assert PREFERENCE not in alone.output and PROJECT_FACT in alone.output
    # the layer alone, and its hit inspected with its scope
    scoped = lambo(
        tmp_path, "recall", "--layer", "general", "--scope", "general", "--query", "worktree"
    )
    assert scoped.exit_code == 0, scoped.output
    assert PREFERENCE in scoped.output and PROJECT_FACT not in scoped.output
    inspected = lambo(
        tmp_path, "inspect", "--layer", "general", "--scope", "general", "--focus", shared_id[:8]
    )
    assert inspected.exit_code == 0, inspected.output
    assert inspected.output.startswith(f"{PREFERENCE} [Logic] (id {shared_id[:8]}")


def test_a_one_shot_relative_path_into_the_layer_is_refused(tmp_path: Path) -> None:
    refused = lambo(
        tmp_path, "record-action", "--scope", "general", "--layer", "general",
        "--action", "README.md",
    )  # fmt: skip
    assert refused.exit_code != 0
    assert (
        refused.output.strip()
        .splitlines()[-1]
        .endswith(
            'action "README.md" is a relative path, refused in scope "general"; record file '
            "actions in the project's own session, use an absolute path, or send repo_scope; "
            "nothing was written"
        )
    )


def test_a_layered_stdio_serve_introduces_its_layers(tmp_path: Path) -> None:
    (tmp_path / "lambo.toml").write_text(CANONICAL + '[store]\nkind = "memory"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBO_")}
    env.update(LAMBO_HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO))
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            str(REPO / "lambo.py"), "--config", str(tmp_path / "lambo.toml"),
            "serve", "--session", "lambo", "--layer", "general",
        ],
        env=env,
        cwd=str(tmp_path),
    )  # fmt: skip

    async def scenario() -> None:
        async with Client(params) as client:
            assert client.instructions == instructions("lambo", ("general",))
            assert (client.instructions or "").endswith(
                "lambo_reserve and lambo_saints take the same scope, and lambo_stats finds a\n"
                "receipt from any of them."
            )
            answer = await client.call_tool(
                "lambo_recall", {"agent_id": "agent-a", "query": "x", "scope": "general"}
            )
            assert not answer.is_error, answer.content
            assert answer.structured_content is not None
            assert answer.structured_content["warnings"][0].startswith(
                "recall: these hits are from layer general"
            )

    anyio.run(scenario)
