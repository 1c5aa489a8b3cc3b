"""The decoder gate's spec: ``verispec check-decoder`` judges a whole speculative decoder by the
law of the tokens it emits (``docs/checking-decoders.md``). The way down is one way:
verispec/decoder/ (the API and the CLI's objects) -> this package -> spec/ (statistics, the wire).

- :mod:`.types`: the shared types (``Prefix``, ``LogitsOf``, ``ForcedRows``).
- :mod:`.check`: the engines under test (a Python object or a JSON-lines program), the reference
  rows, the greedy check and the modes' outcomes.
- :mod:`.first_tokens`: the law of a decoder's first m <= 3 tokens and its powered test
  (``--depth 0``).
- :mod:`.two_sample`: the first tokens with speculation off vs on (``--target-law two-sample``).
- :mod:`.prefix_rows`: next-token rows after a prefix through one KV cache that follows the path.
- :mod:`.mutants`: a small decode loop with named pipeline bugs, each rejected by the gate.
- :mod:`.laws`: each ecosystem's target law as a profile (``--law``).
- :mod:`.depth`: the law at depth, every token of whole generations (the default mode).
"""
