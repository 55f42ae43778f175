"""SDDMM kernels: reference.py (plain PyTorch), triton.py."""
