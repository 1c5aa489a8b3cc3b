"""verispec engine: the fast production path (NumPy + BLAS), same contracts as reference/."""
