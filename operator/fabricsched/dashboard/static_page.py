"""The fabric page as one self-contained HTML file (``fabricsched simulate --report``).

The same page, style and script as the live one, inlined, with the document embedded as JSON
in a ``<script type="application/json">`` block the script reads instead of polling. The JSON
has ``<``, ``>`` and ``&`` escaped, so no name in it can close that block.
"""

from __future__ import annotations

from typing import Any

from fabricsched.dashboard import assets, document, fragments, view

_STYLE_LINK = '<link rel="stylesheet" href="/static/style.css">'
_SCRIPT_TAG = '<script src="/static/app.js"></script>'


def embed(doc: Any) -> str:
    """``doc`` as JSON safe inside a script element."""
    text = fragments.compact(doc)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(snap: view.PageSnapshot, selection: document.Selection = document.EVERYTHING) -> str:
    page = assets.read("index.html")
    style, script = assets.read("style.css"), assets.read("app.js")
    if _STYLE_LINK not in page or _SCRIPT_TAG not in page:
        raise RuntimeError("the page's style link or script tag moved: update static_page")
    for inlined in (style, script):
        if "</" in inlined:
            raise RuntimeError("an inlined asset holds '</', which would end its element early")
    doc = document.build(snap, selection)
    doc["version"] = 0
    page = page.replace(_STYLE_LINK, f"<style>\n{style}</style>")
    data = f'<script id="fabricsched-data" type="application/json">{embed(doc)}</script>'
    return page.replace(_SCRIPT_TAG, f"{data}\n<script>\n{script}</script>")
