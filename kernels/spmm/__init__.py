"""SpMM kernels: reference.py (plain PyTorch), triton.py, sparse.py (torch.sparse.mm)."""
