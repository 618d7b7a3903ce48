"""``python tests/bench/images.py``: what checking an image costs before the ack, and what a
lambo_derive_image ack costs beside a lambo_derive ack, in one run.

1. ``check_image`` (strict base64, signature, header, a full Pillow decode) on generated
   images: a 256x256 noise PNG, a 1024x768 noise JPEG, a noise PNG just under 2 MiB and a
   4096x4096 solid PNG (the largest side allowed). Median of ``--repeats`` runs each.
2. Acks through ``MemoryService`` on a SQLite file with the real MiniLM: a one-concept
   ``lambo_derive`` (embedded after the ack) beside a ``lambo_derive_image`` by client vector
   (checked before the ack, nothing to embed) and by image with the tests' tiny two-tower
   model (checked and embedded before the ack). Median ack ms, and applied writes/s.

Prints tables and asserts nothing.
"""

from __future__ import annotations

import argparse
import base64
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run as a script, tests/bench is sys.path[0] and its http.py would shadow the standard
# library's; the checkout's root instead (as embed_batch.py does).
sys.path[0] = str(Path(__file__).resolve().parents[2])

import anyio  # noqa: E402
import numpy as np  # noqa: E402

from lambo_core.config import load_config  # noqa: E402
from lambo_core.embed.loader import open_embedder  # noqa: E402
from lambo_core.embed.onnx import OnnxEmbedder  # noqa: E402
from lambo_core.image_input import check_image  # noqa: E402
from lambo_core.service import MemoryService  # noqa: E402
from lambo_core.session import EmbedderPlan, Session  # noqa: E402
from lambo_core.store import SqliteStore  # noqa: E402
from lambo_core.writes import WritePipeline  # noqa: E402


def _encode(array: np.ndarray, fmt: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(array, "RGB").save(out, format=fmt)
    return out.getvalue()


def images() -> dict[str, dict[str, str]]:
    rng = np.random.default_rng(7)
    noise_small = rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)
    noise_jpeg = rng.integers(0, 256, (768, 1024, 3), dtype=np.uint8)
    noise_big = rng.integers(0, 256, (800, 870, 3), dtype=np.uint8)  # ~2.09 MB as PNG
    solid = np.full((4096, 4096, 3), (200, 30, 40), dtype=np.uint8)
    made = {
        "png 256x256 noise": ("image/png", _encode(noise_small, "PNG")),
        "jpeg 1024x768 noise": ("image/jpeg", _encode(noise_jpeg, "JPEG")),
        "png 870x800 noise": ("image/png", _encode(noise_big, "PNG")),
        "png 4096x4096 solid": ("image/png", _encode(solid, "PNG")),
    }
    return {
        name: {"mime": mime, "data": base64.b64encode(data).decode("ascii")}
        for name, (mime, data) in made.items()
    }


def median_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def check_table(repeats: int) -> None:
    print(f"{'image':<22} {'bytes':>10} {'check_image ms (p50)':>21}")
    for name, image in images().items():
        size = len(base64.b64decode(image["data"]))
        ms = median_ms(lambda image=image: check_image("image", image), repeats)  # type: ignore[misc]
        print(f"{name:<22} {size:>10,} {ms:>21.1f}")


def _service(root: Path, embedder: Any) -> MemoryService:
    config = load_config(
        env={"LAMBO_HOME": str(root)}, cwd=root, flags={"embedder.accept_client_vectors": True}
    )
    session = Session.open(SqliteStore(root / "lambo.db"), "bench", EmbedderPlan.ready(embedder))
    return MemoryService(session, WritePipeline(session).start(), config)


def acks(service: MemoryService, tool: str, make: Callable[[int], dict[str, Any]], n: int) -> str:
    async def go() -> list[float]:
        times = []
        for i in range(n):
            started = time.perf_counter()
            result = await service.call(tool, make(i))
            times.append((time.perf_counter() - started) * 1000)
            assert not result.is_error, result.texts
        return times

    started = time.perf_counter()
    times = anyio.run(go)
    assert service.pipeline.wait_idle(120)
    rate = n / (time.perf_counter() - started)
    return f"{statistics.median(times):>12.2f} {rate:>12.1f}"


def ack_table(writes: int) -> None:
    from tests.embed_fixtures import minilm_source_dir
    from tests.two_tower import install_tiny_clip, png

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        from lambo_core.embed.importer import import_model

        model_dir = import_model(
            minilm_source_dir(root / "src"), "minilm", root / "models", pooling="mean"
        )
        minilm = OnnxEmbedder(model_dir, threads=1)
        text = _service(root / "text", minilm)
        contract: dict[str, Any] = dict(text.session.contract)
        dim = int(contract["dim"])
        rng = np.random.default_rng(3)
        print(f"{'write':<34} {'ack ms p50':>12} {'applied/s':>12}")

        def derive(i: int) -> dict[str, Any]:
            fact = f"service {i} reads queue q{i % 7} through gateway g{i % 5}"
            return {"agent_id": "a", "concepts": [{"content": fact, "concept_type": "logic"}]}

        def by_vector(i: int) -> dict[str, Any]:
            values = [float(v) for v in rng.standard_normal(dim)]
            return {
                "agent_id": "a",
                "caption": f"photo {i}",
                "concept_type": "resource",
                "vector": {"values": values, "contract": contract},
            }

        print(f"{'lambo_derive (MiniLM)':<34} {acks(text, 'lambo_derive', derive, writes)}")
        print(f"{'lambo_derive_image by vector':<34} "
              f"{acks(text, 'lambo_derive_image', by_vector, writes)}")  # fmt: skip
        text.pipeline.close()

        tiny = install_tiny_clip(root / "clip", models_dir=root / "models")
        clip = _service(root / "clip-home", open_embedder(tiny.dir, threads=1))
        pictures = [
            base64.b64encode(png((int(c), 40, 200 - int(c)), (256, 192))).decode("ascii")
            for c in np.linspace(0, 200, 16)
        ]

        def by_image(i: int) -> dict[str, Any]:
            return {
                "agent_id": "a",
                "caption": f"photo {i}",
                "concept_type": "resource",
                "image": {"mime": "image/png", "data": pictures[i % len(pictures)]},
            }

        print(f"{'lambo_derive_image by image (tiny)':<34} "
              f"{acks(clip, 'lambo_derive_image', by_image, writes)}")  # fmt: skip
        clip.pipeline.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--writes", type=int, default=100)
    args = parser.parse_args()
    check_table(args.repeats)
    print()
    ack_table(args.writes)


if __name__ == "__main__":
    main()
