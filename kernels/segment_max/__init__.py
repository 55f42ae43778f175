"""Segment max kernels: reference.py (plain PyTorch), triton.py."""
