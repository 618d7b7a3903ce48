"""check_image: every refusal of the spec's image rows, and what a good image gives.

The images are made by Pillow here (real PNG, JPEG, WebP and GIF bytes); a few headers are
written by hand to declare sizes no test should allocate. Every refusal is checked to name
its field and rule and to carry no part of what was sent.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import struct
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from PIL import Image

from lambo_core.errors import ParameterError
from lambo_core.image_input import (
    DIGEST_CHARS,
    MAX_SIDE,
    ImageInput,
    check_image,
)
from lambo_core.limits import MAX_BASE64_CHARS, MAX_IMAGE_BYTES

IMAGE_ID = re.compile(r"^[a-z0-9]{1,64}$")


def encoded(width: int, height: int, fmt: str = "PNG", colour: Any = (200, 30, 90)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buf, fmt)
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` and whose pixels are not there."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


def webp_header(width: int, height: int) -> bytes:
    """An extended (VP8X) WebP declaring a ``width`` x ``height`` canvas and holding nothing."""
    vp8x = bytes([0x02, 0, 0, 0]) + (width - 1).to_bytes(3, "little")
    vp8x += (height - 1).to_bytes(3, "little")
    body = b"WEBP" + b"VP8X" + struct.pack("<I", len(vp8x)) + vp8x
    return b"RIFF" + struct.pack("<I", len(body)) + body


PNG = encoded(6, 4)
JPEG = encoded(6, 4, "JPEG")
WEBP = encoded(6, 4, "WEBP")
GIF = encoded(6, 4, "GIF")
PNG64 = b64(PNG)
assert PNG64.endswith("="), "the padding cases need a padded encoding"


def refused(value: object) -> str:
    with pytest.raises(ParameterError) as info:
        check_image("image", value)
    return info.value.render()


def assert_no_payload(message: str, *sent: str) -> None:
    """No run of 12 characters of what was sent appears in the message (a base64 string has
    no spaces, so any 12-character window of the message that it holds would be a leak)."""
    for payload in sent:
        windows = {payload[i : i + 12] for i in range(0, max(1, len(payload) - 11), 1)}
        if len(payload) < 12:
            windows = {payload}
        for window in windows:
            assert window not in message, (window, message)
    assert "\\x" not in message and "b'" not in message  # no bytes' repr either


# (case, the value sent, the refusal's start); each case's message names its field.
def data(text: str, mime: str = "image/png") -> dict[str, object]:
    return {"mime": mime, "data": text}


URL_SAFE = b64(b"\xfb\xff\xbf" * 8).replace("+", "-").replace("/", "_")
REFUSALS: list[tuple[str, object, str]] = [
    ("not an object", PNG64, "image must be an object {mime, data}"),
    ("an array", [PNG64], "image must be an object {mime, data}"),
    ("no mime", {"data": PNG64}, "image.mime is required"),
    ("no data", {"mime": "image/png"}, "image.data is required"),
    ("null data", {"mime": "image/png", "data": None}, "image.data is required"),
    (
        "an extra key",
        {"mime": "image/png", "data": PNG64, "name": "x.png"},
        "image.name is not a field of image; it takes mime, data",
    ),
    ("unknown mime", data(PNG64, "image/gif"), "image.mime must be one of image/png, image/jpeg"),
    ("mime in capitals", data(PNG64, "IMAGE/PNG"), "image.mime must be one of"),
    ("mime not a string", data(PNG64, 7), "image.mime must be one of"),  # type: ignore[arg-type]
    ("data not a string", {"mime": "image/png", "data": 12}, "image.data must be a string"),
    ("empty data", data(""), "image.data must not be empty"),
    (
        "a data: URI prefix",
        data("data:image/png;base64," + PNG64),
        "image.data starts with a data: URI prefix",
    ),
    ("a DATA: prefix", data("DATA:image/png;base64," + PNG64), "image.data starts with a data:"),
    (
        "a newline inside",
        data(PNG64[:40] + "\n" + PNG64[40:]),
        "image.data is not valid base64: it must be one line with no whitespace or newlines "
        "(found one at character 40)",
    ),
    ("a trailing CRLF", data(PNG64 + "\r\n"), "image.data is not valid base64: it must be one"),
    ("a space inside", data(PNG64[:8] + " " + PNG64[8:]), "image.data is not valid base64: it"),
    (
        "a character outside the alphabet",
        data(PNG64[:20] + "!" + PNG64[21:]),
        "image.data is not valid base64: only A-Z, a-z, 0-9, + and / are allowed",
    ),
    ("the URL-safe alphabet", data(URL_SAFE), "image.data is not valid base64: only A-Z"),
    ("padding in the middle", data("iVBO==" + PNG64), "image.data is not valid base64: only A-Z"),
    ("three padding characters", data(PNG64[:-4] + "Q==="), "image.data is not valid base64"),
    (
        "missing padding",
        data(PNG64.rstrip("=")),
        "image.data is not valid base64: its length",
    ),
    (
        "declared jpeg, bytes png",
        data(PNG64, "image/jpeg"),
        "image: declared image/jpeg but the bytes are image/png",
    ),
    (
        "declared png, bytes jpeg",
        data(b64(JPEG)),
        "image: declared image/png but the bytes are image/jpeg",
    ),
    (
        "declared png, bytes webp",
        data(b64(WEBP)),
        "image: declared image/png but the bytes are image/webp",
    ),
    ("gif bytes", data(b64(GIF)), "image.data is not a PNG, JPEG or WebP image (declared"),
    ("bytes of no image", data(b64(b"not an image at all, " * 4)), "image.data is not a PNG"),
    ("4097 pixels wide", data(b64(encoded(4097, 10))), "image is 4097x10 pixels; at most 4096"),
    ("4097 pixels high", data(b64(encoded(10, 4097))), "image is 10x4097 pixels; at most 4096"),
    (
        "a header declaring 100000 x 100000",
        data(b64(png_header(100_000, 100_000))),
        "image is 100000x100000 pixels; at most 4096 a side",
    ),
    (
        "a WebP canvas past Pillow's own bomb limit",
        data(b64(webp_header(16_384, 16_384)), "image/webp"),
        "image declares a size over 4096 pixels a side",
    ),
    (
        "a truncated PNG",
        data(b64(encoded(300, 200)[:-60])),
        "image is not a readable image/png image: it is truncated or corrupt",
    ),
    (
        "a truncated JPEG",
        data(b64(encoded(300, 200, "JPEG", (10, 200, 30))[:300]), "image/jpeg"),
        "image is not a readable image/jpeg image",
    ),
]


@pytest.mark.parametrize(
    ("value", "start"), [(v, s) for _, v, s in REFUSALS], ids=[c for c, *_ in REFUSALS]
)
def test_every_refusal_names_the_field_and_rule_and_never_the_payload(
    value: object, start: str
) -> None:
    message = refused(value)
    assert message.startswith(start), message
    assert message.startswith("image")
    sent = value.get("data") if isinstance(value, dict) else value
    if isinstance(sent, str) and sent:
        assert_no_payload(message, sent)
    if isinstance(value, dict) and isinstance(value.get("mime"), str):
        mime = value["mime"]
        if mime not in ("image/png", "image/jpeg", "image/webp"):
            assert mime not in message and mime.lower() not in message.split("one of")[0]


def test_a_string_over_the_character_limit_is_refused_before_it_is_read() -> None:
    # one character over, and not base64 at all: only the count is looked at
    over = "!" * (MAX_BASE64_CHARS + 1)
    message = refused(data(over))
    assert message == (
        f"image.data is {MAX_BASE64_CHARS + 1} characters of base64; at most 2796204 "
        "(2097152 bytes, 2 MiB decoded) are accepted"
    )
    assert MAX_BASE64_CHARS == 2_796_204 and MAX_IMAGE_BYTES == 2 * 1024 * 1024
    assert MAX_BASE64_CHARS == 4 * -(-MAX_IMAGE_BYTES // 3)


def test_two_mib_and_one_byte_is_refused_by_its_decoded_size() -> None:
    # exactly the character limit, unpadded: 2,097,153 bytes once decoded
    payload = PNG + b"\0" * (MAX_IMAGE_BYTES + 1 - len(PNG))
    text = b64(payload)
    assert len(text) == MAX_BASE64_CHARS and not text.endswith("=")
    message = refused(data(text))
    assert message == "image.data decodes to 2097153 bytes; at most 2097152 (2 MiB)"
    assert_no_payload(message, text[:4096], text[-4096:])


def test_exactly_two_mib_is_read_as_an_image() -> None:
    # a PNG padded to 2 MiB with a trailing chunk Pillow skips: within every limit
    filler = MAX_IMAGE_BYTES - len(PNG) - 12
    body = PNG[:-12] + chunk(b"tEXt", b"c\0" + b"x" * (filler - 2)) + PNG[-12:]
    assert len(body) == MAX_IMAGE_BYTES
    image = check_image("image", data(b64(body)))
    assert (image.width, image.height, len(image.data)) == (6, 4, MAX_IMAGE_BYTES)


@pytest.mark.parametrize(
    ("mime", "make"),
    [
        ("image/png", lambda: encoded(MAX_SIDE, 3)),
        ("image/jpeg", lambda: encoded(3, MAX_SIDE, "JPEG")),
        ("image/webp", lambda: encoded(MAX_SIDE, 2, "WEBP")),
    ],
)
def test_each_type_at_4096_a_side_is_accepted(mime: str, make: Callable[[], bytes]) -> None:
    raw = make()
    image = check_image("image", data(b64(raw), mime))
    assert isinstance(image, ImageInput)
    assert image.mime == mime and image.data == raw
    assert max(image.width, image.height) == MAX_SIDE


def test_the_digest_is_the_default_image_id() -> None:
    image = check_image("image", data(PNG64))
    again = check_image("image", data(PNG64))
    other = check_image("image", data(b64(encoded(6, 4, colour=(1, 2, 3)))))
    assert image.digest() == again.digest() != other.digest()
    assert image.digest() == hashlib.sha256(PNG).hexdigest()[:DIGEST_CHARS]
    assert len(image.digest()) == DIGEST_CHARS == 16
    assert IMAGE_ID.match(image.digest())


def test_the_repr_never_carries_the_bytes() -> None:
    image = check_image("image", data(PNG64))
    shown = repr(image)
    assert shown == f"ImageInput(image/png, {len(PNG)} bytes, 6x4)"
    assert_no_payload(shown, PNG64)


def test_the_field_name_is_the_callers() -> None:
    with pytest.raises(ParameterError) as info:
        check_image("concepts[0].image", {"mime": "image/png"})
    assert info.value.render() == "concepts[0].image.data is required"
