"""Segment softmax kernels: reference.py (plain PyTorch), triton.py."""
