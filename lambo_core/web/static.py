"""The page's files, served from the package (so from a wheel or the .pyz alike): one HTML
page, its script and style, and the vendored graph library with its licence. Only these
names are served; nothing is fetched from elsewhere at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

PACKAGE = "lambo_core.web"
FOLDER = "static"

# name -> media type; the page's own files and cytoscape (MIT, from npm: cytoscape@3)
FILES: dict[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "cytoscape.min.js": "text/javascript; charset=utf-8",
    "cytoscape.LICENSE": "text/plain; charset=utf-8",
}

# The page runs only its own scripts and talks only to this window.
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)

Gate = Callable[[Request], Response | None]


def read_file(name: str) -> bytes:
    return files(PACKAGE).joinpath(FOLDER, name).read_bytes()


def static_routes(gate: Gate) -> list[Route]:
    """``/`` (the page) and ``/static/<name>`` for each of ``FILES``."""

    def serve(name: str) -> Response:
        return Response(
            read_file(name),
            media_type=FILES[name],
            headers={
                "content-security-policy": POLICY,
                "x-content-type-options": "nosniff",
                "cache-control": "no-cache",
            },
        )

    async def page(request: Request) -> Response:
        return gate(request) or serve("index.html")

    async def asset(request: Request) -> Response:
        refused = gate(request)
        if refused is not None:
            return refused
        name = request.path_params["name"]
        if name not in FILES:
            return JSONResponse(
                {"error": "not_found", "message": "no such file; the page's files are fixed"},
                status_code=404,
            )
        return serve(name)

    return [Route("/", page, methods=["GET"]), Route("/static/{name}", asset, methods=["GET"])]
