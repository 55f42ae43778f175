"""Where datasets live: the data root, :func:`gnndist.machine.data_root` (``$GNNDIST_DATA``, else
``~/.cache/gnndist``), a registered dataset's file under a root, and `MissingFiles`, a loader's word that it is not
there."""

from __future__ import annotations

import os.path as osp

from gnndist.errors import UserError
from gnndist.machine import data_root


def default_root() -> str:
    """Dataset root: ``$GNNDIST_DATA``, else ``~/.cache/gnndist`` (:func:`gnndist.machine.data_root`)."""
    return data_root()


class MissingFiles(UserError):
    """A registered dataset's files are not under the root: the message names where they go and where to get them.

    A loader raises it; the registry then downloads the dataset (:func:`.download.fetch`) and loads again. Under
    ``GNNDIST_OFFLINE=1`` the user sees this message, with the URL it would have fetched.
    """


def registered_file(name: str, root: str, rel: str, url: str, what: str = "it") -> str:
    """``root/rel``, the file of the registered dataset ``name``; where it is missing, `MissingFiles` saying
    where to get ``what`` (``url``)."""
    path = osp.join(root, rel)
    if not osp.isfile(path):
        raise MissingFiles(f"{name}: no file at {path}; get {what} from {url}")
    return path
