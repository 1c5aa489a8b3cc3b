"""verispec proofs: z3 obligations about the math the code relies on (`python -m proofs`)."""
