"""The one error family lambo raises on purpose.

Every refusal a caller can see is a ``LamboError``. It carries the class of
failure the spec names (parameter error, reference refused, store error, ...)
and a message written for the caller; anything internal (paths, SQL, driver
text, tracebacks) goes into ``detail``, which is logged and never rendered.
Errors are turned into text in exactly two places: the CLI and the MCP layer,
both through ``render``.
"""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    """The classes of failure a caller can be told about."""

    PARAMETER = "parameter error"
    REFERENCE = "reference refused"
    STORE = "store error"
    CONFIGURATION = "configuration error"
    CONFLICT = "conflict"
    INTERNAL = "internal error"
    FORBIDDEN = "forbidden"
    #: lambo_derive_image's receipt: a text concept already holds the image's content
    IMAGE_ID_TAKEN = "image id taken"
    #: `lambo model pull` only (no tool raises it): the hub could not be reached, or a
    #: transfer failed or did not verify
    DOWNLOAD = "download error"


class LamboError(Exception):
    """A refusal with a caller-facing message and an optional logged detail."""

    kind: ErrorKind = ErrorKind.INTERNAL

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def render(self) -> str:
        """The text a caller sees.

        Parameter errors read as the rule itself ("top_k must be in 1..=100");
        every other class is prefixed with its name ("store error: ...").
        """
        if self.kind is ErrorKind.PARAMETER:
            return self.message
        return f"{self.kind.value}: {self.message}"


class ParameterError(LamboError):
    """A missing, unknown, malformed or out-of-range argument."""

    kind = ErrorKind.PARAMETER


class ReferenceRefused(LamboError):
    """A depends_on / against / focus reference that does not name exactly one concept."""

    kind = ErrorKind.REFERENCE


class StoreError(LamboError):
    """The store failed or refused; the caller sees the class, the log sees why."""

    kind = ErrorKind.STORE


class ConfigError(LamboError):
    """A setting is wrong, or a call needs a setting this server does not have."""

    kind = ErrorKind.CONFIGURATION


class ConflictError(LamboError):
    """A lock another agent holds, or a lease this process lost."""

    kind = ErrorKind.CONFLICT


class InternalError(LamboError):
    """A handler fault: the caller learns only that the call had no further effect."""

    kind = ErrorKind.INTERNAL


class ImageIdTaken(LamboError):
    """An image whose caption and image_id a text concept already holds."""

    kind = ErrorKind.IMAGE_ID_TAKEN


class ForbiddenError(LamboError):
    """Asking for something scoped to another agent or session (a receipt)."""

    kind = ErrorKind.FORBIDDEN


class DownloadError(LamboError):
    """A model download that could not be made or did not verify: the hub unreachable, an
    HTTP error status, a cut transfer, a size or checksum mismatch. Nothing was installed.

    Raised by `lambo model pull` only; a tool never raises it (the spec's error classes
    for tools are unchanged). A hub URL or model name that is wrong is a ``ConfigError``.
    """

    kind = ErrorKind.DOWNLOAD


def internal_fault(detail: str) -> InternalError:
    """The caller-facing error for an unexpected exception; ``detail`` is only logged."""
    return InternalError(
        "the call failed inside lambo and had no effect beyond anything already written; "
        "the detail was logged",
        detail=detail,
    )
