"""lambo_derive_image through the service: listing, the image concept, references, refusals.

Client vectors here are real MiniLM embeddings of words, sent as the client's own vector in
the session's contract; a real SQLite file holds the session.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from lambo_core.config import load_config
from lambo_core.embed.loader import LoadedModels
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.model import EdgeType
from lambo_core.receipts import ReceiptState, ReceiptView
from lambo_core.serve import Serve
from lambo_core.service import MemoryService, ToolResult
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline

AGENT = "dresscode"


def _service(tmp_path: Path, embedder: OnnxEmbedder | None, **flags: Any) -> MemoryService:
    """A service on a SQLite file with ``embedder`` (None: the plan ``flags`` configure)."""
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path, flags=flags)
    store = SqliteStore(tmp_path / "lambo.db")
    plan = (
        EmbedderPlan.ready(embedder)
        if embedder is not None
        else EmbedderPlan.from_config(config, LoadedModels())
    )
    session = Session.open(store, "s", plan)
    return MemoryService(session, WritePipeline(session).start(), config)


@pytest.fixture
def service(tmp_path: Path, minilm: OnnxEmbedder) -> Iterator[MemoryService]:
    svc = _service(tmp_path, minilm, **{"embedder.accept_client_vectors": True})
    yield svc
    svc.pipeline.close()


def call(service: MemoryService, tool: str, **args: Any) -> ToolResult:
    async def go() -> ToolResult:
        return await service.call(tool, args)

    return anyio.run(go)


def settled(service: MemoryService, result: ToolResult) -> ReceiptView:
    assert not result.is_error, result.texts
    assert result.structured is not None
    receipt = str(result.structured["receipt"])
    return service.session.receipts.wait(receipt, AGENT, "s", 30_000)


def vector_of(service: MemoryService, text: str, scale: float = 3.0) -> dict[str, Any]:
    """A client vector: the model's own embedding of ``text``, scaled (lambo normalizes)."""
    embedder = service.session.embedder(10)
    values = (embedder.embed([text])[0] * scale).astype(float).tolist()
    return {"values": values, "contract": dict(service.session.contract)}


def derive_image(service: MemoryService, caption: str, text: str, **kw: Any) -> ReceiptView:
    result = call(
        service,
        "lambo_derive_image",
        agent_id=AGENT,
        caption=caption,
        concept_type=kw.pop("concept_type", "resource"),
        vector=vector_of(service, text, kw.pop("scale", 3.0)),
        **kw,
    )
    return settled(service, result)


def test_listed_after_lambo_derive_only_where_it_can_work(
    tmp_path: Path, minilm: OnnxEmbedder, service: MemoryService
) -> None:
    assert service.tool_names()[:3] == ["lambo_recall", "lambo_derive", "lambo_derive_image"]
    plain = _service(tmp_path / "plain", minilm)
    try:
        assert "lambo_derive_image" not in plain.tool_names()
        assert len(plain.tool_names()) == 8
    finally:
        plain.pipeline.close()


def test_an_image_by_vector_is_one_concept_with_its_vector_and_source(
    service: MemoryService,
) -> None:
    view = derive_image(service, "red silk saree, gold border", "red silk saree", image_id="r17")
    assert view.state is ReceiptState.APPLIED, view.detail
    (node_id,) = view.data["created"]
    concept = service.session.store.get_concept("s", node_id)
    assert concept is not None
    assert concept.content == "red silk saree, gold border [image:r17]"
    assert concept.vector_source == "client" and concept.is_image
    expected = service.session.embedder(10).embed(["red silk saree"])[0]
    assert concept.vector is not None
    assert np.allclose(concept.vector, expected, atol=1e-6)
    assert abs(float(np.linalg.norm(concept.vector)) - 1.0) < 1e-5


def test_the_same_caption_and_id_is_the_same_concept_and_other_ids_stay_apart(
    service: MemoryService,
) -> None:
    first = derive_image(service, "blue kurta", "blue kurta", image_id="k1")
    again = derive_image(service, "blue kurta", "blue kurta", image_id="k1")
    other = derive_image(service, "blue kurta", "blue kurta", image_id="k2")
    assert again.data["matched"] == first.data["created"]
    assert other.data["created_count"] == 1
    assert other.data["created"] != first.data["created"]


def test_the_default_id_is_a_digest_of_the_normalized_vector(service: MemoryService) -> None:
    first = derive_image(service, "green dupatta", "green dupatta", scale=2.0)
    # The same direction at another length (by a power of two, so no bit of it rounds
    # differently) normalizes to the same vector: the same id.
    again = derive_image(service, "green dupatta", "green dupatta", scale=0.25)
    assert again.data["matched"] == first.data["created"]
    concept = service.session.store.get_concept("s", first.data["created"][0])
    assert concept is not None
    suffix = concept.content.rsplit("[image:", 1)[1].rstrip("]")
    assert len(suffix) == 16 and all(ch in "0123456789abcdef" for ch in suffix)


def test_an_image_never_merges_and_no_text_merges_into_it(service: MemoryService) -> None:
    image = derive_image(service, "photo", "red silk saree", image_id="p1")
    image_id = image.data["created"][0]
    # The text's own embedding is all but the image's vector: it would merge into a text.
    result = call(
        service,
        "lambo_derive",
        agent_id=AGENT,
        concepts=[{"content": "red silk saree", "concept_type": "resource"}],
    )
    text = settled(service, result)
    assert text.data["created_count"] == 1 and text.data["semantic_merged"] == 0
    assert "replacement_candidates" not in text.data
    # ... and the image, derived after the text, does not merge into the text either.
    later = derive_image(service, "another photo", "red silk saree", image_id="p2")
    assert later.data["created_count"] == 1
    assert image_id not in later.data["created"]


def test_a_text_concept_holding_the_content_makes_the_image_id_taken(
    service: MemoryService,
) -> None:
    named = call(
        service,
        "lambo_derive",
        agent_id=AGENT,
        concepts=[{"content": "the festival outfits", "concept_type": "entity"}],
        parent_of=[{"parent": "the festival outfits", "child": "onam saree [image:o1]"}],
    )
    assert settled(service, named).state is ReceiptState.APPLIED
    view = derive_image(service, "onam saree", "onam saree", image_id="o1")
    assert view.state is ReceiptState.FAILED
    assert view.detail.startswith("image id taken: o1: a text concept already holds")
    assert "choose another image id" in view.detail


def test_parent_of_and_an_action_name_the_image_concept_by_its_content(
    service: MemoryService,
) -> None:
    image = derive_image(service, "logo draft", "logo draft", image_id="l1")
    node = image.data["created"][0]
    derived = call(
        service,
        "lambo_derive",
        agent_id=AGENT,
        concepts=[{"content": "brand assets", "concept_type": "entity"}],
        parent_of=[{"parent": "brand assets", "child": "logo draft [image:l1]"}],
    )
    assert settled(service, derived).data["created_count"] == 1
    acted = call(
        service,
        "lambo_record_action",
        agent_id=AGENT,
        action="exported the logo",
        produces=["logo draft [image:l1]"],
    )
    assert settled(service, acted).state is ReceiptState.APPLIED
    graph = service.session.index.graph
    incoming = {(e.src, e.edge_type) for e in graph.edges_in(node)}
    kinds = {etype for _src, etype in incoming}
    assert EdgeType.HIERARCHICAL in kinds and EdgeType.PRODUCES in kinds


def test_an_image_with_parent_of_names_itself_there(service: MemoryService) -> None:
    view = derive_image(
        service,
        "sketch",
        "pencil sketch",
        image_id="s1",
        parent_of=[{"parent": "sketch [image:s1]", "child": "the shading study"}],
    )
    assert view.state is ReceiptState.APPLIED, view.detail
    image = view.data["created"][0]
    graph = service.session.index.graph
    assert any(e.edge_type is EdgeType.HIERARCHICAL for e in graph.edges_out(image))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"caption": "x [image:a1]"}, "caption may not contain an image suffix"),
        ({"concept_type": "observation"}, "an image cannot be an observation"),
        ({"image_id": "R17"}, "image_id must be 1 to 64 lowercase letters and digits"),
        ({"image_id": "a" * 65}, "image_id must be 1 to 64 lowercase letters and digits"),
        ({"vector": None}, "send exactly one of image, vector"),
        (
            {"image": {"mime": "image/png", "data": "iVBORw0KGgo="}},
            "send exactly one of image, vector",
        ),
        ({"caption": "c" * 16_373, "image_id": "r17"}, "at most 16372 bytes"),
        ({"caption": "c" * 16_360}, "at most 16359 bytes"),
        (
            {"parent_of": [{"parent": "a [IMAGE:R1] b", "child": "c"}]},
            "parent_of[0].parent may hold an image suffix ([image:<id>]) only to name",
        ),
    ],
)
def test_refusals_name_the_field_and_the_rule(
    service: MemoryService, args: dict[str, Any], expected: str
) -> None:
    base: dict[str, Any] = {
        "agent_id": AGENT,
        "caption": "a photo",
        "concept_type": "resource",
        "vector": vector_of(service, "a photo"),
    }
    base.update(args)
    sent = {k: v for k, v in base.items() if v is not None}
    result = call(service, "lambo_derive_image", **sent)
    assert result.is_error
    assert expected in result.texts[0], result.texts[0]
    assert len(service.session.index.graph) == 0


def test_a_text_write_may_not_build_an_image_suffix(service: MemoryService) -> None:
    for content in ("look at [image:r17], nice", "[IMAGE:R17]", "x [image:abc]s"):
        result = call(
            service,
            "lambo_derive",
            agent_id=AGENT,
            concepts=[{"content": content, "concept_type": "logic"}],
        )
        assert result.is_error and "may not contain an image suffix" in result.texts[0]
    ordinary = call(
        service,
        "lambo_derive",
        agent_id=AGENT,
        concepts=[{"content": "[image:r17]s and see [image: diagram]", "concept_type": "logic"}],
    )
    assert not ordinary.is_error


def test_without_client_vectors_or_vector_search_every_call_is_a_configuration_error(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    off = _service(tmp_path / "off", minilm)
    try:
        result = call(
            off,
            "lambo_derive_image",
            agent_id=AGENT,
            caption="a photo",
            concept_type="entity",
            vector={"values": [1.0], "contract": {"kind": "onnx", "model": "x", "dim": 1}},
        )
        assert result.is_error
        assert result.texts[0].startswith("configuration error:")
        assert "[embedder] accept_client_vectors = true" in result.texts[0]
        image = call(
            off,
            "lambo_derive_image",
            agent_id=AGENT,
            caption="a photo",
            concept_type="entity",
            image={"mime": "image/png", "data": "iVBORw0KGgo="},
        )
        assert "needs an embedder that embeds images" in image.texts[0]
    finally:
        off.pipeline.close()
    canonical = _service(
        tmp_path / "canonical",
        None,
        **{"embedder.accept_client_vectors": True, "embedder.match_strategy": "canonical"},
    )
    try:
        result = call(
            canonical,
            "lambo_derive_image",
            agent_id=AGENT,
            caption="a photo",
            concept_type="entity",
            vector={"values": [1.0], "contract": {"kind": "onnx", "model": "x", "dim": 1}},
        )
        assert result.texts[0].startswith("configuration error:")
        assert 'match_strategy = "hybrid"' in result.texts[0]
    finally:
        canonical.pipeline.close()


def test_a_scoped_image_write_lands_in_the_layer(tmp_path: Path, minilm: OnnxEmbedder) -> None:
    """scope = "general" sends the image to the layer, acked there (spec: "Writing to a
    layer": lambo_derive_image takes the same scope)."""
    from lambo_core.embed.importer import import_model
    from tests.embed_fixtures import minilm_source_dir
    from tests.layered_serve import serving, wait

    home = tmp_path / "home"
    import_model(
        minilm_source_dir(tmp_path / "src"), "minilm", home / "cache" / "models", pooling="mean"
    )
    (tmp_path / "lambo.toml").write_text(
        '[embedder]\nmodel = "minilm"\nthreads = 1\naccept_client_vectors = true\n'
        f'[store]\npath = "{tmp_path / "lambo.db"}"\n'
    )
    config = load_config(env={"LAMBO_HOME": str(home)}, cwd=tmp_path)
    values = [float(x) for x in minilm.embed(["a shared logo"])[0]]

    async def main() -> None:
        async with serving(config) as serve:
            stats = await serve("lambo_stats", {"agent_id": AGENT})
            contract = stats["structuredContent"]["embedding_contract"]
            ack = await serve(
                "lambo_derive_image",
                {
                    "agent_id": AGENT,
                    "caption": "the shared logo",
                    "concept_type": "resource",
                    "image_id": "logo",
                    "vector": {"values": values, "contract": contract},
                    "scope": "general",
                },
            )
            assert not ack["isError"], ack["content"]
            assert ack["structuredContent"]["session"] == "general"
            receipt = await wait(serve, ack["structuredContent"]["receipt"], AGENT)
            assert receipt["state"] == "applied", receipt
            layer = serve.layers[0].serve
            assert isinstance(layer, Serve)
            assert layer.service is not None and serve.service is not None
            held = [c for c in layer.service.session.index.graph.iter_concepts() if c.is_image]
            assert [c.content for c in held] == ["the shared logo [image:logo]"]
            assert not any(c.is_image for c in serve.service.session.index.graph.iter_concepts())
            # into a layer, a bare relative path in parent_of is refused, as on lambo_derive
            pathy = await serve(
                "lambo_derive_image",
                {
                    "agent_id": AGENT,
                    "caption": "the module map",
                    "concept_type": "resource",
                    "vector": {"values": values, "contract": contract},
                    "parent_of": [{"parent": "src/main.rs", "child": "the module map"}],
                    "scope": "general",
                },
            )
            assert pathy["isError"], pathy
            assert "parent_of[0].parent" in pathy["content"][0]["text"]
            assert "relative path" in pathy["content"][0]["text"]

    anyio.run(main)


def test_a_stored_vector_from_another_contract_is_not_applied() -> None:
    """A derive_image intent replayed under another model of the same width is refused on
    its receipt rather than filing its vector in the wrong space."""
    from lambo_core.derive_image import payload_vector
    from lambo_core.errors import StoreError

    vector = np.ones(4, dtype="<f4") / 2.0
    payload = {
        "vector": base64.b64encode(vector.tobytes()).decode("ascii"),
        "contract": {"kind": "onnx", "model": "old", "dim": 4},
    }
    assert np.allclose(payload_vector(payload, {"kind": "onnx", "model": "old", "dim": 4}), 0.5)
    with pytest.raises(StoreError, match="another embedding contract than the session's now"):
        payload_vector(payload, {"kind": "onnx", "model": "new", "dim": 4})
    with pytest.raises(StoreError, match="does not fit the session's embedding contract"):
        payload_vector({**payload, "vector": "AAAA"}, {"kind": "onnx", "model": "old", "dim": 4})


def test_the_configuration_error_comes_before_the_payload_is_read(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    off = _service(tmp_path / "off", minilm)
    try:
        bad = {"values": ["x"], "contract": {"kind": 1, "model": [], "dim": "384"}}
        for tool, field in (("lambo_derive_image", "vector"), ("lambo_recall", "query_vector")):
            args: dict[str, Any] = {"agent_id": AGENT, field: bad}
            if tool == "lambo_derive_image":
                args.update(caption="a photo", concept_type="entity")
            result = call(off, tool, **args)
            assert result.texts[0].startswith("configuration error:"), result.texts
    finally:
        off.pipeline.close()
