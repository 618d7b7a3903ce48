"""What an ``.onnx`` file holds, read without onnx or onnxruntime: ops, int8, external data.

A minimal walk of the protobuf, enough to tell how a model was quantized (what
`lambo model list` shows) and which external weight files an import must copy.
"""

from __future__ import annotations

import mmap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

# Ops that mean real int8 arithmetic (activations quantized at run time) versus
# int8 storage that is turned back into float before a float MatMul.
_INT8_COMPUTE_OPS = frozenset(
    {
        "MatMulInteger",
        "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat",
        "QLinearMatMul",
        "QAttention",
        "QGemm",
        "DynamicQuantizeLinear",
    }
)
_WEIGHT_ONLY_OPS = frozenset({"MatMulNBits", "DequantizeLinear", "GatherBlockQuantized"})


@dataclass(frozen=True)
class GraphScan:
    """What a protobuf walk of an ``.onnx`` file found, without loading it."""

    op_types: Counter[str]
    int8_initializers: int
    external_data: frozenset[str]

    @property
    def quantization(self) -> str:
        """``int8-dynamic`` (int8 MatMuls), ``int8-weight-only``, or ``float``."""
        ops = set(self.op_types)
        if ops & _INT8_COMPUTE_OPS:
            return "int8-dynamic"
        if ops & _WEIGHT_ONLY_OPS or self.int8_initializers:
            return "int8-weight-only"
        return "float"


def _varint(buf: Any, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


def _fields(buf: Any, start: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of one protobuf message; length-delimited values
    are (start, end) offsets so large tensors are skipped, never copied."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 1:
            yield number, wire, None
            pos += 8
        elif wire == 5:
            yield number, wire, None
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos)
            yield number, wire, (pos, pos + length)
            pos += length
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def scan_onnx(path: Path) -> GraphScan:
    """Op types, int8 initializers and external data files of an ONNX model.

    A minimal walk of the protobuf (ModelProto.graph=7; GraphProto.node=1,
    initializer=5; NodeProto.op_type=4; TensorProto.data_type=2,
    external_data=13 with key/value 1/2), so lambo needs no ``onnx`` package.
    """
    ops: Counter[str] = Counter()
    int8 = 0
    external: set[str] = set()
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        for number, wire, value in _fields(buf, 0, len(buf)):
            if number != 7 or wire != 2:
                continue
            for g_num, g_wire, g_val in _fields(buf, *value):
                if g_wire != 2:
                    continue
                if g_num == 1:
                    for n_num, n_wire, n_val in _fields(buf, *g_val):
                        if n_num == 4 and n_wire == 2:
                            ops[bytes(buf[n_val[0] : n_val[1]]).decode("utf-8", "replace")] += 1
                elif g_num == 5:
                    for t_num, t_wire, t_val in _fields(buf, *g_val):
                        if t_num == 2 and t_wire == 0 and t_val in (2, 3):  # UINT8, INT8
                            int8 += 1
                        elif t_num == 13 and t_wire == 2:
                            entry = dict(
                                (k, bytes(buf[v[0] : v[1]]).decode("utf-8", "replace"))
                                for k, w, v in _fields(buf, *t_val)
                                if w == 2
                            )
                            if entry.get(1) == "location" and 2 in entry:
                                external.add(entry[2])
    return GraphScan(ops, int8, frozenset(external))


def scan_local_model(path: Path, where: str) -> GraphScan:
    """``scan_onnx`` of a graph an import reads from ``where``: refused when it is not ONNX,
    or when it keeps weights in a file that is not beside it inside the directory."""
    try:
        scan = scan_onnx(path)
    except (OSError, ValueError, IndexError) as exc:
        raise ConfigError(
            f"{path.name} in {where} is not an ONNX model", detail=repr(exc)
        ) from None
    for location in sorted(scan.external_data):
        extra = path.parent / location
        if ".." in Path(location).parts or Path(location).is_absolute() or not extra.is_file():
            raise ConfigError(f"{path.name} keeps weights in {location}, which is not in {where}")
    return scan
