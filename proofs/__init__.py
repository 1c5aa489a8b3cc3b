"""verispec proofs: z3 obligations about the math the code relies on (`python -m verispec.proofs`).

- :mod:`proofs.core`      Obligation, the runner (Solver on the negation, rlimit, unsat required)
- :mod:`proofs.lossless`  speculative sampling emits exactly p (lemmas + composition, n = 2..6)
- :mod:`proofs.argmax`    argmax invariance under the 2 tau <= gamma certificate, and its tightness
- :mod:`proofs.tukey`     Tukey's bisquare with c = gamma/2: the bowl is the certificate
- :mod:`proofs.conformal` the order-statistic index ceil((n+1) q) and its level
- :mod:`proofs.union`     several exit layers: Boole's inequality and Bonferroni
- :mod:`proofs.float32`   float rounding in the gates: a counterexample without slack, a slack proved
- :mod:`proofs.sparse_head` an exact sparse head: a row pruned by the certified bound is in no top-k
- :mod:`proofs.catalog`   every obligation, in print order


The modules:

- :mod:`.tree`: Token trees (recursive rejection sampling): the token leaving a node has the node's target law.
"""

if __name__ != "verispec.proofs":  # pragma: no cover - a guard, not a feature
    # The one import root is `verispec`; `import proofs` from a checkout would load a second copy
    # of every module (two registries, two exception classes) and shadow a user's own `proofs`.
    raise ImportError(f"import verispec.proofs, not {__name__}: verispec installs no top-level 'proofs' package")
