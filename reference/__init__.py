"""verispec reference: pure-NumPy, readable; the executable meaning of every step."""

if __name__ != "verispec.reference":  # pragma: no cover - a guard, not a feature
    # The one import root is `verispec`; `import reference` from a checkout would load a second copy
    # of every module (two registries, two exception classes) and shadow a user's own `reference`.
    raise ImportError(f"import verispec.reference, not {__name__}: verispec installs no top-level 'reference' package")
