"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), on only with ``TEPAT_API_DOCS``.

FastAPI's own pages load ``swagger-ui-dist@5`` and ``redoc@2`` from a CDN, unpinned and
without integrity: whatever the CDN serves next runs on the dashboard's origin. Here
each asset is pinned to one release and carries its Subresource Integrity hash (of the
file in the npm package, which jsDelivr serves byte for byte), so a changed file is
refused by the browser. To upgrade: ``npm pack swagger-ui-dist@X redoc@Y`` and
``openssl dgst -sha384 -binary FILE | base64`` for each file below.
"""

from __future__ import annotations

from html import escape

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

CDN = "https://cdn.jsdelivr.net/npm"


def _tag(url: str, integrity: str) -> str:
    """The HTML that loads ``url``, refused by the browser unless it hashes to ``integrity``."""
    attrs = f'integrity="{integrity}" crossorigin="anonymous" referrerpolicy="no-referrer"'
    if url.endswith(".css"):
        return f'<link rel="stylesheet" href="{escape(url)}" {attrs}>'
    return f'<script src="{escape(url)}" {attrs}></script>'


SWAGGER_JS = _tag(
    f"{CDN}/swagger-ui-dist@5.35.0/swagger-ui-bundle.js",
    "sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9",
)
SWAGGER_CSS = _tag(
    f"{CDN}/swagger-ui-dist@5.35.0/swagger-ui.css",
    "sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I",
)
REDOC_JS = _tag(
    f"{CDN}/redoc@2.5.2/bundles/redoc.standalone.js",
    "sha384-70P5pmIdaQdVbxvjhrcTDv1uKcKqalZ3OHi7S2J+uzDl0PW8dO6L+pHOpm9EEjGJ",
)

_SWAGGER_INIT = (
    'SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui",'
    " presets: [SwaggerUIBundle.presets.apis], layout: 'BaseLayout'});"
)
_REDOC_INIT = 'Redoc.init("/openapi.json", {}, document.getElementById("redoc"));'


def _page(assets: str, element: str, init: str) -> HTMLResponse:
    body = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Tepat API</title>"
        + assets
        + f"</head><body><div id='{element}'></div><script>{init}</script></body></html>"
    )
    return HTMLResponse(body)


router = APIRouter(include_in_schema=False)


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    return _page(SWAGGER_CSS + SWAGGER_JS, "swagger-ui", _SWAGGER_INIT)


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    return _page(REDOC_JS, "redoc", _REDOC_INIT)
