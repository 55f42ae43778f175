"""Where datasets live: ``$GNNDIST_DATA``, else ``~/.cache/gnndist`` (the user's override, read where it is used)."""

from __future__ import annotations

import os
import os.path as osp


def default_root() -> str:
    """Dataset root: ``$GNNDIST_DATA``, else ``~/.cache/gnndist``."""
    return os.environ.get("GNNDIST_DATA") or osp.join(osp.expanduser("~"), ".cache", "gnndist")
