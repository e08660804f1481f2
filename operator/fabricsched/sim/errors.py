"""The simulator's one exception: an input file says something the simulator cannot run."""

from __future__ import annotations

from pathlib import Path


class SimInputError(Exception):
    """A bad input, located as ``file:line: message`` so an editor can jump to it.

    ``line`` is 1-based; 0 means the file as a whole (e.g. it cannot be read).
    """

    def __init__(self, path: str | Path, line: int, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"
