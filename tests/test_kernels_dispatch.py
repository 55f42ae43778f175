"""Dispatch: capability reasons, CPU defaults, forcing a path with impl=; the settings read from the environment."""

import pytest
import torch
from gnndist.kernels import KernelSettings, NoKernelError, dispatch, settings_from_config, settings_from_env, spmm
from gnndist.kernels.testing import graph


def _args(dtype=torch.float32):
    csr = graph("empty-rows-int64")
    return csr, torch.randn(csr.num_cols, 4).to(dtype)


def test_cpu_default_is_torch_sparse_for_fp32_and_half(monkeypatch):
    """Half rows take the sparse path too (multiplied in fp32, ``kernels/spmm/sparse.py``); an integer dtype does
    not."""
    monkeypatch.setenv("GNNDIST_KERNEL", "reference")  # the dispatcher decides from its arguments, not from this
    csr, x = _args()
    assert dispatch.select("spmm", csr, x, None, "sum")[0] == "sparse"
    assert dispatch.select("spmm", csr, x.bfloat16(), None, "sum")[0] == "sparse"
    assert dispatch.select("spmm", csr, x.half(), None, "sum")[0] == "sparse"
    assert "torch.int32" in dispatch.why_not("spmm", "sparse", csr, x.int(), None, "sum")
    assert dispatch.select("segment_max", csr, x)[0] == "reference"


def test_impl_forces_a_path():
    csr, x = _args()
    assert dispatch.select("spmm", csr, x, None, "sum", impl="reference")[0] == "reference"
    assert spmm(csr, x.requires_grad_(), impl="reference").grad_fn.name() == "IndexAddBackward0"


def test_settings_from_env():
    assert settings_from_env({}) == KernelSettings(impl=None, tune=True)
    assert settings_from_env({"GNNDIST_KERNEL": "auto"}) == KernelSettings()
    assert settings_from_env({"GNNDIST_KERNEL": ""}) == KernelSettings()
    assert settings_from_env({"GNNDIST_KERNEL": "triton", "GNNDIST_SPMM_TUNE": "0"}) == KernelSettings("triton", False)
    with pytest.raises(NoKernelError, match="GNNDIST_KERNEL=cuda-magic: unknown implementation"):
        settings_from_env({"GNNDIST_KERNEL": "cuda-magic"})
    with pytest.raises(NoKernelError, match="unknown kernel 'cuda-magic'"):
        KernelSettings(impl="cuda-magic")


def test_the_cli_reads_the_kernel_variables_once_and_passes_a_value(monkeypatch):
    """GNNDIST_KERNEL / GNNDIST_SPMM_TUNE are the defaults of --kernel / --spmm-tune, read at the entry point."""
    from gnndist.cli import _train_config, build_parser

    def cfg(*argv):
        return _train_config(build_parser().parse_args(["train", "DIR", *argv]), None)

    def choice(*argv):
        return settings_from_config(cfg(*argv).kernel)

    monkeypatch.setenv("GNNDIST_KERNEL", "reference")
    monkeypatch.setenv("GNNDIST_SPMM_TUNE", "0")
    assert choice() == KernelSettings("reference", False)
    assert choice("--kernel", "sparse", "--spmm-tune") == KernelSettings("sparse", True)  # flags win
    monkeypatch.setenv("GNNDIST_KERNEL", "cuda-magic")
    with pytest.raises(NoKernelError, match="GNNDIST_KERNEL=cuda-magic: unknown implementation"):
        cfg()
    monkeypatch.delenv("GNNDIST_KERNEL")
    monkeypatch.delenv("GNNDIST_SPMM_TUNE")
    assert choice() == KernelSettings()


def test_forcing_triton_on_cpu_without_interpreter_says_why(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    csr, x = _args()
    with pytest.raises(NoKernelError, match="triton: .*TRITON_INTERPRET is not set"):
        spmm(csr, x, impl="triton")


def test_no_fitting_kernel_lists_every_reason(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setitem(dispatch.ORDER, "cpu", ("triton", "sparse"))
    csr, x = _args(torch.int32)  # half rows fit the sparse path (multiplied in fp32); integer rows fit nothing
    with pytest.raises(NoKernelError) as info:
        spmm(csr, x)
    message = str(info.value)
    assert "triton: " in message and "sparse: torch.sparse.mm has no torch.int32 kernel" in message


def test_unknown_or_missing_implementation():
    csr, x = _args()
    with pytest.raises(NoKernelError, match="unknown implementation"):
        spmm(csr, x, impl="cuda-magic")
    with pytest.raises(NoKernelError, match="no sparse implementation of segment_max"):
        dispatch.run("segment_max", csr, x, impl="sparse")


def test_shape_errors_name_the_argument():
    csr, x = _args()
    with pytest.raises(ValueError, match="x has 3 rows"):
        spmm(csr, x[:3])
    with pytest.raises(ValueError, match="reduce"):
        spmm(csr, x, reduce="max")


def test_op_names_stay_functions_after_their_subpackages_load():
    import importlib

    import gnndist.kernels as kernels

    for op in ("spmm", "sddmm", "segment_max", "segment_softmax"):
        importlib.import_module(f"gnndist.kernels.{op}.reference")  # what dispatch does on first use
        assert callable(getattr(kernels, op)) and not isinstance(getattr(kernels, op), type(importlib)), op
