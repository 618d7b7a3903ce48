"""lambo_core/transfer: the JSONL parser's refusals, server-memory's mapping, the exporter's
order, and `lambo import` / `lambo export` in-process on a real SQLite store (keyword-only:
these tests are about lines and edges; tests/e2e/test_import_export.py embeds with MiniLM)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from lambo_core.cli import cli
from lambo_core.model import Concept, ConceptType, WriteBatch, new_id
from lambo_core.store import SqliteStore
from lambo_core.transfer.export import export_lines
from lambo_core.transfer.jobs import OURS, SERVER_MEMORY, read_jobs
from lambo_core.transfer.lines import Refusal
from lambo_core.transfer.server_memory import CALL_TEXT_BUDGET, check_memory_line, entity_calls


def jsonl(*lines: object) -> bytes:
    return ("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n").encode()


class NoIds:
    def node(self, ref: str) -> str:
        return ref

    def text(self, ref: str) -> str:
        return ref

    def landed_type(self, ref: str) -> str | None:
        return None


# --- the line format ---------------------------------------------------------------------


def test_each_bad_line_is_refused_with_its_number_and_rule_never_its_bytes() -> None:
    secret = "sk-live-0123456789"
    data = jsonl(
        {"id": "a", "content": "first fact", "type": "logic"},
        '{"content": "' + secret,  # cut off
        {"content": secret, "type": "Fact"},
        {"content": "no type"},
        {"content": "x", "type": "logic", secret: 1},
        {"content": "y", "type": "logic", "event_time": secret},
        {"id": "a", "content": "again", "type": "logic"},
        {"content": "z", "type": "logic", "depends_on": ["b"]},
        {"id": "b", "content": "later", "type": "logic"},
        {"kind": "nonsense"},
        [1, 2],
        "",
        {"content": "bad\u0007bell", "type": "logic"},
    )
    data += b"\xff\xfe\n"
    read = read_jobs(data, "cli")
    assert read.format == OURS
    assert [j.number for j in read.jobs] == [1, 9]
    assert read.refused == [
        Refusal(2, "is not JSON: each line must be one JSON object"),
        Refusal(
            3,
            "type: unknown variant Fact, expected one of entity, logic, constraint, "
            "resource, observation",
        ),
        Refusal(
            4,
            "type is missing; a concept line needs one of entity, logic, constraint, "
            "resource, observation",
        ),
        Refusal(
            5,
            f"{secret} is not a field of a concept line; its fields are kind, id, "
            "content, type, event_time, depends_on, against, status, vector",
        ),
        Refusal(6, "event_time must be an RFC3339 timestamp such as 2024-06-12T14:30:00Z"),
        Refusal(7, "id is already the id of line 1"),
        Refusal(
            8, "depends_on[0] names the id of line 9; a line may refer only to the lines before it"
        ),
        Refusal(
            10, "kind: unknown variant nonsense, expected one of header, concept, parent_of, action"
        ),
        Refusal(11, "must be a JSON object"),
        Refusal(
            13,
            "content contains a disallowed control character (U+0007); only tab and "
            "newline are accepted, so control sequences cannot reach stored content",
        ),
        Refusal(14, "is not UTF-8 text"),
    ]
    assert read.total == 13  # the blank line is no line


def test_a_field_name_is_shown_safely() -> None:
    read = read_jobs(jsonl({"content": "x", "type": "logic", "a\nb" + "k" * 100: 1}), "cli")
    reason = read.refused[0].reason
    assert "\n" not in reason and reason.startswith("a b" + "k" * 61 + "…")


def test_lines_become_the_calls_of_lambo_derive_and_record_action() -> None:
    read = read_jobs(
        jsonl(
            {"kind": "header", "format": "lambo-jsonl", "version": 1},
            {"id": "c1", "content": "A", "type": "entity", "event_time": "2024-01-01T00:00:00Z"},
            {"content": "B", "type": "logic", "depends_on": ["c1"], "against": ["old text"]},
            {"parent": "c1", "child": "B"},
            {"action": "deployed", "produces": ["v2"], "modifies": ["c1"], "depends_on": ["B"]},
        ),
        "me",
    )
    calls = [j.build(NoIds()) for j in read.jobs]
    assert calls[0] == [
        (
            "lambo_derive",
            {
                "agent_id": "me",
                "concepts": [
                    {"content": "A", "concept_type": "entity", "depends_on": [], "against": []}
                ],
                "event_time": "2024-01-01T00:00:00Z",
            },
            calls[0][0][2],
        )
    ]
    assert calls[1][0][1]["concepts"][0]["against"] == ["old text"]
    _, parent_of, names = calls[2][0]
    assert parent_of["parent_of"] == [{"parent": "c1", "child": "B"}]
    assert names["parent_of[0].parent"] == "parent"
    assert calls[3][0][0] == "lambo_record_action"
    assert calls[3][0][1]["modifies"] == ["c1"] and calls[3][0][1]["produces"] == ["v2"]
    assert read.jobs[3].refs == [
        ("produces[0]", "v2"),
        ("modifies[0]", "c1"),
        ("depends_on[0]", "B"),
    ]


# --- server-memory -------------------------------------------------------------------------


def test_a_server_memory_file_is_detected_and_mapped() -> None:
    read = read_jobs(
        jsonl(
            {
                "type": "entity",
                "name": "Ann",
                "entityType": "person",
                "observations": ["likes tea", "runs"],
            },
            {"type": "relation", "from": "Ann", "to": "Bo", "relationType": "knows"},
            {"type": "entity", "name": "Bo", "extra": 1},
            {"kind": "concept", "content": "ours", "type": "logic"},
            {"type": "relation", "from": "Ann"},
        ),
        "cli",
    )
    assert read.format == SERVER_MEMORY
    [(_, entity, _)] = read.jobs[0].build(NoIds())
    assert entity["concepts"] == [
        {"content": "Ann", "concept_type": "entity"},
        {"content": "likes tea", "concept_type": "observation"},
        {"content": "runs", "concept_type": "observation"},
    ]
    assert entity["parent_of"] == [
        {"parent": "person", "child": "Ann"},
        {"parent": "Ann", "child": "likes tea"},
        {"parent": "Ann", "child": "runs"},
    ]
    [(_, relation, _)] = read.jobs[1].build(NoIds())
    assert relation["concepts"] == [
        {"content": "Ann knows Bo", "concept_type": "logic", "depends_on": ["Ann", "Bo"]}
    ]
    assert read.jobs[1].refs == [("from", "Ann"), ("to", "Bo")]
    assert read.refused == [
        Refusal(
            3,
            "extra is not a field of a server-memory entity line; its fields are type, "
            "name, entityType, observations",
        ),
        Refusal(
            4,
            "type must be entity or relation: this file is in server-memory's format "
            "(its first line said so)",
        ),
        Refusal(5, "to is missing; a relation line needs from, to and relationType"),
    ]


def test_an_entity_with_many_observations_is_split_within_the_call_limits() -> None:
    observations = [f"observation number {i} " + "x" * 200 for i in range(100)]
    line = check_memory_line(1, {"type": "entity", "name": "E", "observations": observations})
    calls = entity_calls(line, "cli")
    assert len(calls) > 1
    sent = [c["content"] for args, _ in calls for c in args["concepts"][1:]]
    assert sent == observations
    for args, _ in calls:
        assert args["concepts"][0] == {"content": "E", "concept_type": "entity"}
        assert len(args["concepts"]) <= 64
        assert len("; ".join(c["content"] for c in args["concepts"]).encode()) <= CALL_TEXT_BUDGET
    # a refusal of the second call's first observation names the file's field
    _, names = calls[1]
    first = int(names["concepts[1].content"].split("[")[1].rstrip("]"))
    assert first == len(calls[0][0]["concepts"]) - 1


# --- the CLI on a real store ---------------------------------------------------------------


@pytest.fixture
def keyword_only(lambo_home: Path) -> Path:
    config = lambo_home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[embedder]\nmatch_strategy = "canonical"\n')
    return lambo_home


def run(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin, prog_name="lambo")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result.exit_code, result.stdout, result.stderr


def test_import_lands_the_good_lines_and_lists_the_refused(
    keyword_only: Path, tmp_path: Path
) -> None:
    store = str(tmp_path / "s.db")
    data = jsonl(
        {"id": "db", "content": "the orders database", "type": "entity"},
        {"content": "orders are kept 7 years", "type": "constraint", "depends_on": ["db"]},
        {"content": "x", "type": "logic", "depends_on": ["nothing of the kind"]},
        {"content": "y", "type": "logic", "depends_on": ["db"], "against": ["db"]},
        {"kind": "parent_of", "parent": "db", "child": "orders are kept 7 years"},
        {"action": "archived 2019", "modifies": ["db"], "depends_on": ["orders are kept 7 years"]},
    )
    code, out, err = run("import", "-", "--session", "s", "--store", store, stdin=data)
    assert code == 1, err
    assert out.strip().endswith("3 concept(s) created, 3 matched existing, 2 line(s) refused"), err
    refused = [line for line in err.splitlines() if line.startswith("lambo: line")]
    assert refused[0].startswith("lambo: line 3: reference refused: depends_on[0] ")
    assert "matches nothing" in refused[0]
    assert refused[1] == (
        'lambo: line 4: reference refused: against[0] "db" is both cited and contradicted by '
        "one concept of the call; nothing was written"
    )
    assert "importing: 6/6 lines in " in err  # progress, plain off a terminal

    db = SqliteStore(Path(store))
    try:
        lines = list(export_lines(db, "s"))
    finally:
        db.close()
    by_id = {line["id"]: line for line in lines if "id" in line}
    content = {i: line.get("content") or line.get("action") for i, line in by_id.items()}
    kinds = [line["kind"] for line in lines]
    assert kinds == ["header", "concept", "concept", "action", "parent_of"]
    fact = next(line for line in lines if line.get("content") == "orders are kept 7 years")
    assert [content[t] for t in fact["depends_on"]] == ["the orders database"]
    action = by_id[next(i for i, c in content.items() if c == "archived 2019")]
    assert [content[t] for t in action["modifies"]] == ["the orders database"]
    assert "vector" not in fact and fact["status"] == "none"
    # every reference points to an earlier line
    seen: set[str] = set()
    for line in lines[1:]:
        for key in ("depends_on", "against", "produces", "modifies"):
            assert set(line.get(key, [])) <= seen
        if line["kind"] == "parent_of":
            assert {line["parent"], line["child"]} <= seen
        seen.add(line.get("id", ""))


def test_a_contradiction_cycle_is_cut_into_a_repeat_line(
    keyword_only: Path, tmp_path: Path
) -> None:
    store = str(tmp_path / "c.db")
    data = jsonl(
        {"id": "a", "content": "the bridge is open", "type": "logic"},
        {"id": "b", "content": "the bridge is closed", "type": "logic", "against": ["a"]},
        {"content": "the bridge is open", "type": "logic", "against": ["b"]},
    )
    code, _, err = run("import", "-", "--session", "c", "--store", store, stdin=data)
    assert code == 0, err
    code, first, err = run("export", "--session", "c", "--store", store)
    assert code == 0, err
    lines = [json.loads(x) for x in first.splitlines()]
    assert [line.get("id") is None for line in lines[1:]] == [False, False, True]
    assert lines[3]["content"] == "the bridge is closed" and len(lines[3]["against"]) == 1
    # and it imports back into the same graph
    other = str(tmp_path / "d.db")
    code, _, err = run("import", "-", "--session", "c", "--store", other, stdin=first.encode())
    assert code == 0, err
    code, second, err = run("export", "--session", "c", "--store", other)

    def strip(text: str) -> list[dict[str, object]]:
        return [
            {k: v for k, v in json.loads(x).items() if k not in ("id", "against", "event_time")}
            for x in text.splitlines()[1:]
        ]

    assert strip(first) == strip(second)


def test_refusals_name_the_flag(keyword_only: Path, tmp_path: Path) -> None:
    code, _, err = run("import", str(tmp_path / "nope.jsonl"), "--session", "s")
    assert code == 2 and "lambo: FILE " in err and "does not exist" in err
    code, _, err = run("import", "-", "--session", "s", stdin=b"\n")
    assert code == 2 and "FILE - reads standard input, which was empty" in err
    code, _, err = run("export", "--session", "nobody", "--store", str(tmp_path / "none.db"))
    assert code == 2 and "--session: the store" in err
    run(
        "import",
        "-",
        "--session",
        "here",
        "--store",
        str(tmp_path / "h.db"),
        stdin=jsonl({"content": "a", "type": "logic"}),
    )
    code, _, err = run("export", "--session", "nobody", "--store", str(tmp_path / "h.db"))
    assert code == 2 and "--session: no session named 'nobody'" in err


def test_an_image_concept_exports_as_its_text_and_never_imports_as_an_image(
    keyword_only: Path, tmp_path: Path
) -> None:
    source = tmp_path / "img.db"
    db = SqliteStore(source)
    try:
        db.ensure_session("s", 1.0)
        made = [
            Concept(new_id(), "s", text, text, ConceptType.RESOURCE, 1.0, 1.0, "a",
                    vector=np.array([0.6, 0.8], dtype=np.float32), vector_source=origin)
            for text, origin in (("a chart [image:r17]", "image/png"), ("a plain note", None))
        ]  # fmt: skip
        db.apply(WriteBatch("s", concepts=made))
    finally:
        db.close()
    code, out, err = run("export", "--session", "s", "--store", str(source), "--vectors")
    assert code == 0, err
    lines = [json.loads(x) for x in out.splitlines()]
    image = next(line for line in lines if line.get("content") == "a chart [image:r17]")
    # the line format has no field for a vector's source: the image is its caption's text
    assert set(image) == {"kind", "id", "content", "type", "status", "event_time", "vector"}
    other = str(tmp_path / "back.db")
    code, out, err = run("import", "-", "--session", "s", "--store", other, stdin=out.encode())
    assert code == 1, err
    assert out.strip().endswith("1 concept(s) created, 0 matched existing, 1 line(s) refused")
    (refused,) = [line for line in err.splitlines() if line.startswith("lambo: line")]
    assert "image suffix" in refused and "[image:r17]" not in refused
    back = SqliteStore(Path(other))
    try:
        (only,) = list(back.concepts("s"))
    finally:
        back.close()
    assert only.content == "a plain note" and only.vector_source is None and not only.is_image
