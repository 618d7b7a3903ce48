"""Which admission a write tool's call goes through, against the session's graph.

The caller (the pipeline) holds the index lock. A lambo_derive_image call arrives already
read and embedded (``derive_image.read_image_call``, run with no lock held).
"""

from __future__ import annotations

from ..admission import Admitted, admit_action, admit_derive
from ..cross_refs import CrossSession
from ..derive_image import TOOL as IMAGE_TOOL
from ..derive_image import ImageCall, admit_derive_image
from ..errors import ParameterError
from ..forget import FORGET_TOOL
from ..session import Session
from .forget import admit_forget


def admit_write(
    session: Session,
    tool: str,
    args: object,
    cross: CrossSession | None,
    image_call: ImageCall | None = None,
) -> Admitted:
    """Admission of one write call against the graph (the caller holds its lock)."""
    graph = session.index.graph
    layer = session.name if session.shared_layer else None
    if tool == "lambo_derive":
        return admit_derive(
            args, session=session.name, graph=graph, embeds=session.embeds, layer=layer, cross=cross
        )
    if tool == "lambo_record_action":
        return admit_action(args, session=session.name, graph=graph, layer=layer, cross=cross)
    if tool == IMAGE_TOOL:
        if image_call is None:  # pragma: no cover - the service reads the call first
            raise ParameterError("lambo_derive_image was not read before admission")
        return admit_derive_image(image_call, graph, layer=layer)
    if tool == FORGET_TOOL:  # an admin write: ordered with the others (writes/forget.py)
        return admit_forget(args, graph)
    raise ValueError(f"not a write tool: {tool}")  # pragma: no cover - service routes
