"""Where datasets live: the data root, :func:`gnndist.machine.data_root` (``$GNNDIST_DATA``, else
``~/.cache/gnndist``)."""

from __future__ import annotations

from gnndist.machine import data_root


def default_root() -> str:
    """Dataset root: ``$GNNDIST_DATA``, else ``~/.cache/gnndist`` (:func:`gnndist.machine.data_root`)."""
    return data_root()
