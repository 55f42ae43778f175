"""Capability markers in one place: ``cuda``, ``triton``, ``slow``.

Without a GPU the Triton kernels run under the interpreter, which Triton reads when a
kernel is defined: set it here, before any test module can import a kernel.
"""

import os

import pytest

from gnndist.testing import HAS_CUDA, HAS_TRITON

if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"


def pytest_collection_modifyitems(config, items):
    skip_cuda = pytest.mark.skip(reason="needs a CUDA device")
    skip_triton = pytest.mark.skip(reason="needs the triton package")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_cuda)
        if "triton" in item.keywords and not HAS_TRITON:
            item.add_marker(skip_triton)
