"""CPU kernels for what the BLAS that torch ships does slowly on some hosts."""
