"""`lambo store copy`: every row of a session moved with its ids, refusals, progress, counts.

Real SQLite files on both sides (the PostgreSQL round trip is in test_store_copy_pg.py),
the command run in-process through click's runner.
"""

from __future__ import annotations

import hashlib
import io
import os
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from lambo_core.cli import cli
from lambo_core.cli.row_progress import RowProgress
from lambo_core.errors import ParameterError
from lambo_core.forget import ForgetRequest
from lambo_core.model import (
    CanonizationEvent,
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    ForgetEvent,
    IntentState,
    Interaction,
    InteractionKind,
    Lease,
    Status,
    WriteBatch,
    WriteIntent,
)
from lambo_core.store import SqliteStore, Store
from lambo_core.store.copy import TABLES, count_rows
from lambo_core.store.copy_location import parse_location
from lambo_core.store.postgres.dsn import mask_dsn
from lambo_core.store.rows import vector_to_blob

T0 = 1_700_000_000.0
DIM = 8
# where a vector came from (None: the text's own embedding), one each on a session of 12
SOURCES = (None, "image/png", "client", None, "image/jpeg", "image/webp")


def fill(store: Store, session: str, concepts: int = 12, seed: int = 1) -> None:
    """A session with a row in every table, every field set to something but its default."""
    rng = np.random.default_rng(seed)
    store.ensure_session(session, T0 - 100)
    store.stamp_contract(session, {"kind": "onnx", "model": "m", "dim": DIM})
    store.mark_shared_layer(session)
    calls = [
        Interaction(f"{session}-i{k}", session, "agent-a", InteractionKind.DERIVE, T0 + k,
                    T0 + k - 1, f"call {k}")
        for k in range(3)
    ]  # fmt: skip
    for call in calls:
        store.apply(WriteBatch(session=session, interaction=call))
    nodes = [
        Concept(
            id=f"{session}-c{k:05d}",
            session=session,
            content=f"concept {k} of {session} about leases",
            canonical_key=f"concept {k}",
            concept_type=list(ConceptType)[k % 5],
            created_at=T0 + k,
            about_time=T0 + k - 5,
            agent_id=f"agent-{k % 2}",
            interaction_id=calls[k % 3].id,
            status=list(Status)[k % 4],
            access_count=k,
            repo_scope="repo" if k % 3 == 0 else None,
            vector=None if k % 4 == 3 else rng.standard_normal(DIM).astype(np.float32),
            gc_survived=k % 3,
            vector_source=None if k % 4 == 3 else SOURCES[k % len(SOURCES)],
        )
        for k in range(concepts)
    ]
    for start in range(0, len(nodes), 7):
        store.apply(WriteBatch(session=session, concepts=nodes[start : start + 7]))
    edges = [Edge(session, calls[0].id, nodes[0].id, EdgeType.DERIVES, 1.0, calls[0].id,
                  "agent-a", T0, T0)]  # fmt: skip
    edges += [
        Edge(session, nodes[k].id, nodes[k + 1].id, list(EdgeType)[k % 9], 0.25 + k, calls[1].id,
             "agent-b", T0 + k, T0 + k - 2)
        for k in range(concepts - 1)
    ]  # fmt: skip
    store.apply(WriteBatch(session=session, edges=edges))
    for k, state in enumerate(["pending", "applied", "failed", "applied"]):
        receipt = f"{session}-r{k}"
        store.add_intent(
            WriteIntent(receipt, session, "agent-a", "lambo_derive", {"n": k, "t": "é"},
                        T0 + k, via="proj" if k == 1 else None)
        )  # fmt: skip
        if state != "pending":
            store.settle_intent(receipt, state, {"k": k}, T0 + 50 + k, payload={"final": k})
    for k in range(3):
        store.add_canon_event(
            CanonizationEvent(session, nodes[k].id, Status.NONE, Status.CANDIDATE, k or None,
                              T0 + 10 + k)
        )  # fmt: skip
    forget_two(store, session)
    store.set_gc_clock(session, T0 + 40, 5)


def forget_two(store: Store, session: str) -> None:
    """Two real forgets of concepts written for them: a forget audit of two rows (the
    other tables' counts as they were)."""
    doomed = [
        Concept(f"{session}-gone{k}", session, f"pasted secret {k}", f"secret {k}",
                ConceptType.OBSERVATION, T0 + 20 + k, T0 + 20 + k, "agent-a")
        for k in range(3)
    ]  # fmt: skip
    store.apply(WriteBatch(session=session, concepts=doomed))
    store.forget(ForgetRequest(session, "op-1", T0 + 30, (doomed[0].id, doomed[1].id),
                               (doomed[0].content, doomed[1].content), True, None))  # fmt: skip
    store.forget(ForgetRequest(session, "op-2", T0 + 31, (doomed[2].id,), (doomed[2].content,),
                               False, None))  # fmt: skip


def dump(store: Store, session: str) -> dict[str, Any]:
    """Everything the store returns of a session, vectors as bytes, intents without seq."""
    record = store.get_session(session)
    assert record is not None
    return {
        "record": replace(record, mutation_count=0, last_gc_epoch=0),
        "since_sweep": record.mutation_count - record.last_gc_epoch,
        "interactions": list(store.interactions(session)),
        "concepts": [
            (replace(c, vector=None), vector_to_blob(c.vector)) for c in store.concepts(session)
        ],
        "edges": list(store.edges(session)),
        "intents": [replace(i, seq=0) for i in store.intents(session)],
        "events": store.canon_events(session),
        "forgets": store.forget_events(session),
    }


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["store", "copy", *args], prog_name="lambo")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "from.db"
    store = SqliteStore(path)
    try:
        fill(store, "alpha", seed=1)
        fill(store, "beta", concepts=5, seed=2)
    finally:
        store.close()
    return path


def read(path: Path, session: str) -> dict[str, Any]:
    store = SqliteStore(path)
    try:
        return dump(store, session)
    finally:
        store.close()


def test_copy_moves_every_row_with_its_ids(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "to.db"
    before = hashlib.sha256(source.read_bytes()).hexdigest()
    code, out, err = run("--from", str(source), "--to", str(target))
    assert code == 0, err
    assert hashlib.sha256(source.read_bytes()).hexdigest() == before  # --from never written
    for session in ("alpha", "beta"):
        got, want = read(target, session), read(source, session)
        assert got == want
        assert len(got["concepts"]) > 0
        assert all(len(got[k]) for k in ("edges", "intents", "events", "forgets"))
    carried = {c.vector_source for c, _ in read(target, "alpha")["concepts"]}
    assert carried == set(SOURCES)  # every kind of source, not only the default
    states = {i.state for i in read(target, "alpha")["intents"]}
    assert states == {IntentState.PENDING, IntentState.APPLIED, IntentState.FAILED}
    assert (
        "session alpha: interactions 3/3, concepts 12/12, edges 12/12, write_intents 4/4, "
        "canonization_events 3/3, forget_events 2/2 (--from/--to): ok"
    ) in out
    assert "session beta:" in out and "copied 2 session(s)" in out
    # the copy released its lease in --to: a serve may take the session at once
    store = SqliteStore(target)
    try:
        lease = store.get_lease("alpha")
        assert lease is not None and lease.expires_at == 0 and lease.holder.startswith("store-")
    finally:
        store.close()


def test_copy_of_named_sessions_only_and_into_a_store_with_others(
    source: Path, tmp_path: Path
) -> None:
    target = tmp_path / "to.db"
    store = SqliteStore(target)
    fill(store, "gamma", concepts=3)
    store.close()
    code, out, err = run("--from", str(source), "--to", str(target), "--session", "beta")
    assert code == 0, err
    store = SqliteStore(target)
    try:
        assert [r.name for r in store.list_sessions()] == ["beta", "gamma"]
    finally:
        store.close()
    assert "copying 1 session(s)" in out and "alpha" not in out


def test_copy_continues_an_interrupted_one_and_refuses_a_conflict(
    source: Path, tmp_path: Path
) -> None:
    target = tmp_path / "to.db"
    store = SqliteStore(target)
    part = SqliteStore(source)
    try:
        # as a copy cut short leaves it: the record, some rows, an intent not settled yet
        record = part.get_session("alpha")
        assert record is not None
        store.ensure_session("alpha", record.created_at)
        store.apply(WriteBatch("alpha", interaction=next(part.interactions("alpha"))))
        store.apply(WriteBatch("alpha", concepts=list(part.concepts("alpha"))[:4]))
        settled = next(i for i in part.intents("alpha") if i.state is IntentState.APPLIED)
        store.add_intent(settled)
        store.add_forget_event(part.forget_events("alpha")[1])  # the later one
    finally:
        part.close()
        store.close()
    code, out, err = run("--from", str(source), "--to", str(target), "--session", "alpha")
    assert code == 0, err
    assert read(target, "alpha") == read(source, "alpha")  # that audit row not added twice
    assert "copied 1 session(s): 30 row(s) written" in out  # 36 rows, 6 there already
    code, out, err = run("--from", str(source), "--to", str(target), "--session", "alpha")
    assert code == 0, err
    assert "0 row(s) written" in out and read(target, "alpha") == read(source, "alpha")

    store = SqliteStore(target)
    try:  # a row --to has that --from does not: refused, nothing written
        store.set_status("alpha", "alpha-c00001", Status.CANONICAL)
        before = count_rows(store, "beta")
    finally:
        store.close()
    code, _out, err = run("--from", str(source), "--to", str(target))
    assert code == 1
    assert f"--to {target} already holds session 'alpha'" in err
    assert "concept alpha-c00001 differs (table concepts)" in err
    assert read(target, "alpha")["concepts"][1][0].status is Status.CANONICAL
    store = SqliteStore(target)
    try:
        assert store.get_session("beta") is None and before == dict.fromkeys(TABLES, 0)
    finally:
        store.close()


def test_a_concept_in_to_with_another_vector_source_refuses_the_copy(
    source: Path, tmp_path: Path
) -> None:
    target = tmp_path / "to.db"
    code, _out, err = run("--from", str(source), "--to", str(target), "--session", "alpha")
    assert code == 0, err
    conn = sqlite3.connect(target)
    with conn:  # no store call changes it: the source is set once, when a concept is made
        conn.execute("UPDATE concepts SET vector_source = 'client' WHERE id = 'alpha-c00001'")
    conn.close()
    code, _out, err = run("--from", str(source), "--to", str(target), "--session", "alpha")
    assert code == 1
    assert "concept alpha-c00001 differs (table concepts)" in err


@pytest.mark.parametrize("extra", ["a second copy of one", "one --from lacks"])
def test_a_forget_audit_row_to_has_beyond_from_refuses_the_copy(
    extra: str, source: Path, tmp_path: Path
) -> None:
    target = tmp_path / "to.db"
    assert run("--from", str(source), "--to", str(target))[0] == 0
    store = SqliteStore(target)
    try:
        event = store.forget_events("beta")[0]
        if extra == "one --from lacks":
            event = replace(event, node_ids=("beta-c00001",))
        store.add_forget_event(event)
        before = count_rows(store, "beta")
    finally:
        store.close()
    code, _out, err = run("--from", str(source), "--to", str(target), "--session", "beta")
    assert code == 1
    assert "already holds session 'beta' and has 1 row(s) of table forget_events" in err
    assert "that --from lacks" in err
    store = SqliteStore(target)
    try:
        assert count_rows(store, "beta") == before and before["forget_events"] == 3
    finally:
        store.close()


def test_a_session_not_in_from_is_refused_by_name(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "to.db"
    code, _, err = run("--from", str(source), "--to", str(target), "--session", "nope")
    assert code == 2
    assert "--session 'nope': no session of that name in --from" in err
    assert "alpha, beta" in err
    assert not target.exists()


def test_same_store_on_both_sides_is_refused(source: Path) -> None:
    code, _, err = run("--from", str(source), "--to", str(source.parent / "." / source.name))
    assert code == 2
    assert "--from and --to name the same store" in err


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--to", "x.db"], "--from"),
        (["--from", "x.db"], "--to"),
        (["--from", "", "--to", "x.db"], "--from"),
        (["--from", "a.db", "--to", "x.db", "--session", " "], "--session"),
        (["--from", "a.db", "--to", "memory"], "--to"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    args: list[str], flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    SqliteStore(tmp_path / "a.db").close()
    code, _, err = run(*args)
    assert code == 2
    assert flag in err
    assert not (tmp_path / "x.db").exists()


def test_from_that_does_not_exist_is_refused_and_not_created(tmp_path: Path) -> None:
    code, _, err = run("--from", str(tmp_path / "none.db"), "--to", str(tmp_path / "to.db"))
    assert code == 2
    assert "--from names no SQLite store file" in err
    assert not (tmp_path / "none.db").exists()


def test_a_session_a_serve_holds_is_refused_on_either_side(source: Path, tmp_path: Path) -> None:
    now = 2e9  # far in the future: held whatever the clock
    held = Lease("alpha", "agent@elsewhere#7", 7, "agent", T0, T0, now, 0)
    target = tmp_path / "to.db"
    store = SqliteStore(target)
    store.acquire_lease(held, T0)
    store.close()
    code, _, err = run("--from", str(source), "--to", str(target), "--session", "alpha")
    assert code == 1
    assert "session 'alpha' in --to is held by agent@elsewhere#7" in err
    store = SqliteStore(source)
    store.acquire_lease(held, T0)
    store.close()
    code, _, err = run("--from", str(source), "--to", str(tmp_path / "b.db"))
    assert code == 1
    assert "session 'alpha' in --from is held by agent@elsewhere#7" in err


def test_a_lease_left_by_a_killed_process_of_this_host_does_not_stop_a_copy(
    source: Path, tmp_path: Path
) -> None:
    """A copy (or serve) killed with kill -9 leaves its lease live for the TTL; its holder,
    a process of this host that no longer runs, is taken over at once on either side."""
    import subprocess
    import sys

    from lambo_core.hub.lease import this_host

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(gone.stdout)
    dead = Lease("alpha", f"store-copy@{this_host()}#{pid}", pid, "store-copy", T0, T0, 2e9, 0)
    target = tmp_path / "to.db"
    for path in (source, target):
        store = SqliteStore(path)
        store.acquire_lease(dead, T0)
        store.close()
    code, out, err = run("--from", str(source), "--to", str(target), "--session", "alpha")
    assert code == 0, err
    assert "ok" in out


def test_plain_progress_lines_and_the_terminal_line() -> None:
    now = [0.0]
    plain = io.StringIO()
    bar = RowProgress(plain, tty=False, clock=lambda: now[0])
    bar.start("session s", 1000)
    for _ in range(20):
        now[0] += 0.1
        bar.advance(50)
    now[0] += 10
    bar.advance(0)  # 5 s since the last line: another, whatever the count
    bar.finish()
    lines = plain.getvalue().splitlines()
    assert lines[0] == "session s: 100/1000 rows (10%), 500 rows/s, 0:02 left"
    assert len(lines) == 12 and lines[4].startswith("session s: 500/1000 rows (50%)")
    assert lines[-2].startswith("session s: 1000/1000 rows (100%), ")
    assert lines[-1] == "session s: 1000/1000 rows in 12.0 s"
    assert "\r" not in plain.getvalue()
    term = io.StringIO()
    now[0] = 0.0
    bar = RowProgress(term, tty=True, clock=lambda: now[0])
    bar.start("session t", 10)
    now[0] = 1.0
    bar.advance(5)
    bar.finish()
    text = term.getvalue()
    assert text.count("\n") == 1 and text.count("\r") == 3
    drawn = "session t: 5/10 rows (50%), 5 rows/s, 0:01 left"
    assert "\r" + drawn in text
    last = text.rsplit("\r", 1)[1]  # the final line blanks what the bar drew before it
    assert last.rstrip() == "session t: 5/10 rows in 1.0 s" and len(last) == len(drawn) + 1


def test_dsn_locations_are_parsed_and_shown_masked() -> None:
    uri = parse_location("--to", "postgresql://lambo:s3cret@db.example:5433/mem")
    assert uri.dsn is not None and uri.shown == "postgresql://lambo:***@db.example:5433/mem"
    kv = parse_location("--from", "host=db user=lambo password='a b' dbname=mem")
    assert kv.dsn is not None and "a b" not in kv.shown and "password=***" in kv.shown
    assert mask_dsn("postgresql://u@/d?host=/tmp&password=x") == (
        "postgresql://u@/d?host=/tmp&password=***"
    )
    other = parse_location("--from", "postgresql://lambo:other@db.example:5433/mem")
    assert uri.same_as(other)
    path = parse_location("--from", "~/lambo.db")
    assert path.path == Path(os.path.expanduser("~/lambo.db")) and not path.same_as(uri)


def test_dsn_password_is_never_shown(
    source: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    code, out, err = run("--from", str(tmp_path / "none.db"), "--to", "postgresql://u:hunter2@h/d")
    assert code == 2 and "hunter2" not in out + err
    caplog.set_level("DEBUG")
    nobody = "postgresql://lambo:hunter2@127.0.0.1:9/mem?connect_timeout=2"  # nothing listens
    code, out, err = run("--from", str(source), "--to", nobody)
    assert code == 1 and "store error" in err
    assert "hunter2" not in out + err + caplog.text
    assert "--to postgresql://lambo:***@127.0.0.1:9/mem" in err


def _late_interaction(store: Store) -> None:
    late = Interaction("late", "beta", "a", InteractionKind.ACTION, T0 + 99, T0, "late")
    store.apply(WriteBatch("beta", interaction=late))


def _late_forget_event(store: Store) -> None:
    store.add_forget_event(
        ForgetEvent("beta", "op-late", T0 + 99, ("beta-x",), ("e" * 64,), 0, False, None)
    )


class _WriterMeanwhile:
    """Progress that, as the copy starts writing, has another process's write land in
    --from (a writer that holds no lease): what the count check is there to catch."""

    def __init__(self, path: Path, write: Callable[[Store], None]) -> None:
        self.path, self.write = path, write

    def start(self, label: str, total: int) -> None:
        other = SqliteStore(self.path)
        try:
            self.write(other)
        finally:
            other.close()

    def advance(self, rows: int) -> None:
        pass

    def finish(self) -> None:
        pass


@pytest.mark.parametrize(
    ("write", "table", "counts"),
    [(_late_interaction, "interactions", (3, 4)), (_late_forget_event, "forget_events", (2, 3))],
)
def test_a_count_that_differs_fails_naming_the_table(
    write: Callable[[Store], None],
    table: str,
    counts: tuple[int, int],
    source: Path,
    tmp_path: Path,
) -> None:
    from lambo_core.cli.store import count_lines
    from lambo_core.store.copy import copy_sessions

    reader, target = SqliteStore(source), SqliteStore(tmp_path / "to.db")
    try:
        report = copy_sessions(
            reader, target, ["beta"], target_shown="to.db", progress=_WriterMeanwhile(source, write)
        )
    finally:
        reader.close()
        target.close()
    assert report.mismatched == [("beta", table)]
    out, err = count_lines(report)
    here, there = counts
    assert f"{table} {here}/{there}" in out[0] and out[0].endswith(f"MISMATCH in {table}")
    assert err == [
        f"lambo: count check failed: session 'beta', table {table}: --from has {here} row(s), "
        f"--to {there}"
    ]


def test_the_copy_holds_the_session_lease_in_to_while_it_writes(
    source: Path, tmp_path: Path
) -> None:
    from lambo_core.store.copy import copy_sessions
    from lambo_core.store.sqlite import read_lease

    target_path = tmp_path / "to.db"
    seen: list[Lease | None] = []

    class Watch:
        def start(self, label: str, total: int) -> None:
            pass

        def advance(self, rows: int) -> None:
            seen.append(read_lease(target_path, "beta"))

        def finish(self) -> None:
            pass

    reader, target = SqliteStore(source), SqliteStore(target_path)
    try:
        copy_sessions(reader, target, ["beta"], target_shown="to.db", progress=Watch())
        after = target.get_lease("beta")
    finally:
        reader.close()
        target.close()
    assert seen and all(
        lease is not None
        and lease.holder.startswith("store-copy@")
        and lease.holder.endswith(f"#{os.getpid()}")
        and lease.pid == os.getpid()
        and lease.expires_at > T0
        and lease.socket == ""
        for lease in seen
    )
    assert after is not None and after.expires_at == 0  # released: a serve may take it now


def test_a_copy_stopped_part_way_says_so_and_a_rerun_finishes_it(
    source: Path, tmp_path: Path
) -> None:
    from lambo_core.errors import StoreError
    from lambo_core.store.copy import copy_sessions
    from tests.flaky_store import FlakyStore

    target_path = tmp_path / "to.db"
    reader, inner = SqliteStore(source), SqliteStore(target_path)
    flaky = FlakyStore(inner)
    flaky.refuse.add("add_forget_event")  # as a full disk would, at the session's last table
    try:
        with pytest.raises(StoreError) as stopped:
            copy_sessions(reader, flaky, ["alpha", "beta"], target_shown="to.db")
        assert count_rows(inner, "alpha")["concepts"] == 12
        assert count_rows(inner, "alpha")["canonization_events"] == 3
        assert count_rows(inner, "alpha")["forget_events"] == 0
        lease = inner.get_lease("alpha")
        assert lease is not None and lease.expires_at == 0  # released on the way out
    finally:
        reader.close()
        inner.close()
    assert "the copy stopped at session 'alpha'" in stopped.value.message
    assert "run again continues" in stopped.value.message
    code, out, err = run("--from", str(source), "--to", str(target_path))
    assert code == 0, err
    assert read(target_path, "alpha") == read(source, "alpha")
    assert read(target_path, "beta") == read(source, "beta")
    assert "canonization_events 3/3, forget_events 2/2 (--from/--to): ok" in out


def test_from_with_an_older_schema_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    import sqlite3

    from lambo_core.store import migrations

    old = tmp_path / "old.db"
    conn = sqlite3.connect(old, isolation_level=None)
    migrations.migrate(conn, upto=migrations.LATEST_VERSION - 1)
    conn.close()
    before = old.read_bytes()
    code, _, err = run("--from", str(old), "--to", str(tmp_path / "to.db"))
    assert code == 2
    assert f"older than this lambo's {migrations.LATEST_VERSION}" in err
    assert f"`lambo provision --store {old}`" in err
    assert old.read_bytes() == before and not (tmp_path / "to.db").exists()


@pytest.mark.parametrize(
    "bad",
    ["postgresql+psycopg://alice:S3cretPW@db.internal/lambo", "postgressql://alice:S3cretPW@db/x"],
)
def test_a_location_of_another_scheme_is_refused_unechoed(bad: str) -> None:
    for flag in ("--from", "--to"):
        with pytest.raises(ParameterError) as refused:
            parse_location(flag, bad)
        message = refused.value.render()
        assert message.startswith(f"{flag} ") and "postgresql:// or postgres://" in message
        assert "S3cretPW" not in message and "alice" not in message
