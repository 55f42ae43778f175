"""Where datasets live: the data root, :func:`gnndist.machine.data_root` (``$GNNDIST_DATA``, else
``~/.cache/gnndist``), and a registered dataset's file under a root."""

from __future__ import annotations

import os.path as osp

from gnndist.errors import UserError
from gnndist.machine import data_root


def default_root() -> str:
    """Dataset root: ``$GNNDIST_DATA``, else ``~/.cache/gnndist`` (:func:`gnndist.machine.data_root`)."""
    return data_root()


def registered_file(name: str, root: str, rel: str, url: str, what: str = "it") -> str:
    """``root/rel``, the file of the registered dataset ``name``; where it is missing, a :class:`UserError` saying
    where to get ``what`` (``url``)."""
    path = osp.join(root, rel)
    if not osp.isfile(path):
        raise UserError(f"{name}: no file at {path}; get {what} from {url}")
    return path
