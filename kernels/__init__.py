"""Aggregation kernels for message passing on a CSR graph: Triton, torch.sparse and plain-PyTorch paths.

    csr.py          CSR (rowptr, col) with cached row index, transpose, degree order, mean scaling (degree_divisor)
    settings.py     KernelSettings (impl, tune), settings_from_env() and settings_from_config(): the user's choice
    dispatch.py     capability-based choice of implementation; ``impl=`` forces one
    ops.py          the public functions below (shape checks, then dispatch)
    <op>/reference.py   plain PyTorch, the ground truth
    <op>/triton.py      Triton kernel, launchers, autograd.Function (spmm: split in triton_*.py)
    <op>/sparse.py      torch.sparse.mm path (spmm): the CPU default

The ops decide from their arguments: ``spmm(csr, x, impl=s.impl, tune=s.tune)`` with
``s = settings_from_env()`` read once by the entry point.
"""

# The op subpackages share their names with the op functions. Importing a subpackage for the
# first time binds its name in this package, so they are imported here, before the functions:
# a later `import gnndist.kernels.spmm.triton` (dispatch does that) must not rebind `spmm`.
from . import dropout as _dropout_pkg  # noqa: F401
from . import sddmm as _sddmm_pkg  # noqa: F401
from . import segment_max as _segment_max_pkg  # noqa: F401
from . import segment_softmax as _segment_softmax_pkg  # noqa: F401
from . import spmm as _spmm_pkg  # noqa: F401
from .csr import CSR
from .dispatch import NoKernelError
from .ops import dropout, sddmm, segment_max, segment_softmax, spmm
from .settings import DTYPES, KernelSettings, settings_from_config, settings_from_env

__all__ = ["CSR", "DTYPES", "KernelSettings", "NoKernelError", "dropout", "sddmm", "segment_max", "segment_softmax",
           "settings_from_config", "settings_from_env", "spmm"]
