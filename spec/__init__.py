"""verispec spec: executable specifications (exact laws, powered statistics, mutants)."""
