"""The page's static files, read from the package (``static/``: package data, no build step)."""

from __future__ import annotations

import importlib.resources

NAMES = ("index.html", "app.js", "style.css")


def read(name: str) -> str:
    if name not in NAMES:
        raise KeyError(name)
    return importlib.resources.files("fabricsched.dashboard").joinpath("static", name).read_text("utf-8")
