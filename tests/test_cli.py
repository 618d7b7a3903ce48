"""The `lambo` command in-process (click's CliRunner): exit codes, stdout and stderr.

The real entry points, spawned as processes, are in tests/e2e/test_cli_shell.py.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from lambo_core import __version__
from lambo_core.cli import cli


@dataclass(frozen=True)
class Ran:
    """What a shell sees of one command: its exit code and its two streams."""

    returncode: int
    stdout: str
    stderr: str


def run(*args: str, env: dict[str, str] | None = None) -> Ran:
    result = CliRunner().invoke(cli, list(args), env=env, prog_name="lambo")
    # Anything but a clean exit would have been a traceback on a real stderr.
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return Ran(result.exit_code, result.stdout, result.stderr)


def test_version_and_help() -> None:
    out = run("--version")
    assert out.returncode == 0
    assert __version__ in out.stdout
    out = run("--help")
    assert out.returncode == 0
    for word in (
        "config",
        "provision",
        "model",
        "serve",
        "derive",
        "recall",
        "stats",
        "inspect",
        "saints",
        "stale",
        "reserve",
        "release",
    ):
        assert word in out.stdout


def test_config_init_then_show(lambo_home: Path, tmp_path: Path) -> None:
    out = run("config", "init")
    assert out.returncode == 0, out.stderr
    written = lambo_home / "config" / "lambo.toml"
    assert written.is_file()
    tomllib.loads(written.read_text())
    again = run("config", "init")
    assert again.returncode == 2
    assert "--force" in again.stderr
    assert run("config", "init", "--force").returncode == 0

    shown = run("config", "show")
    assert shown.returncode == 0
    assert f"# config file: {written}" in shown.stdout
    assert 'kind = "sqlite"  # file' in shown.stdout


def test_global_config_flag_and_store_flag(tmp_path: Path) -> None:
    cfg = tmp_path / "other.toml"
    cfg.write_text("[recall]\ntop_k = 11\n")
    out = run("--config", str(cfg), "config", "show", "--store", "memory")
    assert out.returncode == 0, out.stderr
    assert "top_k = 11  # file" in out.stdout
    assert 'kind = "memory"  # flag --store' in out.stdout


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[store]\nkind = 'sqlite'\ntypo = 1\n", "unknown key store.typo"),
        ("[embeder]\nmodel = 'x'\n", "unknown section [embeder]"),
    ],
)
def test_unknown_settings_fail_at_start(tmp_path: Path, toml: str, needle: str) -> None:
    (tmp_path / "lambo.toml").write_text(toml)
    out = run("config", "show")
    assert out.returncode == 2
    assert needle in out.stderr
    assert out.stdout == ""
    assert "Traceback" not in out.stderr


def test_provision_is_safe_to_run_twice(lambo_home: Path, tmp_path: Path) -> None:
    first = run("provision")
    assert first.returncode == 0, first.stderr
    assert "applied migrations 1, 2, 3" in first.stdout
    assert (lambo_home / "data" / "lambo.db").is_file()
    second = run("provision")
    assert second.returncode == 0
    assert "already current" in second.stdout
    elsewhere = tmp_path / "nested" / "elsewhere.db"
    refused = run("provision", "--store", str(elsewhere))
    assert refused.returncode == 2  # lambo creates the store file, not its directory
    assert "Invalid value for '--store': the directory" in refused.stderr
    assert not elsewhere.parent.exists()
    elsewhere.parent.mkdir()
    third = run("provision", "--store", str(elsewhere))
    assert third.returncode == 0, third.stderr
    assert elsewhere.is_file()
    assert run("provision", "--store", "memory").returncode == 0


def test_provision_migrates_a_postgres_store_once(pg_dsn: str) -> None:
    from lambo_core.store.postgres.dsn import dsn_identity

    env = {"LAMBO_STORE": "postgres", "LAMBO_POSTGRES_DSN": pg_dsn}
    first = run("provision", env=env)
    assert first.returncode == 0, first.stderr
    assert (
        first.stdout
        == f"store {dsn_identity(pg_dsn)}: schema version 5 (applied migrations 1, 2, 3, 4, 5)\n"
    )
    second = run("provision", env=env)
    assert second.returncode == 0, second.stderr
    assert second.stdout == f"store {dsn_identity(pg_dsn)}: schema version 5, already current\n"


def test_provision_and_config_show_never_print_a_dsn_password(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "hunter2-Secret"
    base, _, query = pg_dsn.partition("?")
    head = base.rpartition("/")[0].replace("postgres:@", f"postgres:{secret}@")
    env = {"LAMBO_STORE": "postgres", "LAMBO_POSTGRES_DSN": f"{head}/no_such_db?{query}"}
    out = run("provision", env=env)
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == (
        "lambo: store error: the PostgreSQL store could not be reached; the detail was logged"
    )
    assert "no_such_db" in caplog.text  # the logged detail says why
    shown = run("config", "show", env=env)
    assert shown.returncode == 0
    assert "postgres:***@" in shown.stdout
    assert secret not in out.stdout + out.stderr + shown.stdout + shown.stderr + caplog.text
    missing = run("provision", env={"LAMBO_STORE": "postgres"})
    assert missing.returncode != 0
    assert "store kind postgres needs a DSN: set store.dsn in lambo.toml or LAMBO_POSTGRES_DSN" in (
        missing.stderr
    )


def test_provision_refuses_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-db.db"
    bogus.write_bytes(b"this is not sqlite" * 100)
    out = run("provision", "--store", str(bogus))
    assert out.returncode == 1
    # The operator's log line carries the driver's reason; the refusal itself does not.
    assert out.stderr.splitlines()[-1] == "lambo: store error: the store file could not be opened"
    assert "Traceback" not in out.stderr


def test_a_failed_model_pull_reads_as_a_download_error(lambo_home: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = run("model", "pull", "bge-m3", env={"LAMBO_HUB_URL": f"http://127.0.0.1:{port}"})
    assert out.returncode == 1  # a run-time failure, not a bad setting
    last = out.stderr.splitlines()[-1]
    assert last.startswith(
        f"lambo: download error: could not reach the hub at http://127.0.0.1:{port} "
        "(connection refused), so nothing was downloaded; check the network and "
        "`[embedder] hub_url` (LAMBO_HUB_URL)"
    )
    assert last.endswith("`lambo model import DIR --name bge-m3`")
    assert "store error" not in out.stderr
    assert "Traceback" not in out.stderr
    # a hub URL that is not one is the setting's fault: a configuration error, exit 2
    out = run("model", "pull", "bge-m3", env={"LAMBO_HUB_URL": "ftp://example.org"})
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == (
        "lambo: configuration error: embedder.hub_url must start with http:// or https://"
    )
