"""Fused hash dropout (Triton): the mask of ``gnndist.dropout`` computed in the kernel, never stored."""
