"""Partition-invariant hash dropout: reference.py (the hash masks, plain PyTorch), triton.py (one fused pass)."""
