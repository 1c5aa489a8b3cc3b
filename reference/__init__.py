"""verispec reference: pure-NumPy, readable; the executable meaning of every step."""
