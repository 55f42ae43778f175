"""Fused hash dropout (Triton): the mask of ``gnndist.kernels.dropout.reference`` computed in the kernel, never stored."""
