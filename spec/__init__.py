"""verispec spec: the executable specification, shipped (``verispec check``, ``vectors`` and
``witness`` import it; it needs only the runtime dependencies). Its tests are in tests/spec/.

- ``protocol.md``: the random-draw protocol, the one normative text.
- :mod:`spec.exact`: exact laws in Fraction arithmetic (one verification, first tokens of toys).
- :mod:`spec.statistics`: chi-square tests, power analysis and the suite's alpha budget.
- :mod:`spec.pipeline`: the rows request and the pipeline seam (logits -> p, q rows).
- :mod:`spec.properties`: the properties, runnable against any verifier (``run_properties``); a
  package: cases, deterministic, processors, statistical, runner.
- :mod:`spec.llm_rows`, :mod:`spec.real_rows`: LLM-shaped rows (V = 9 .. 262,144) and stored
  real-model row pairs (``data/real_rows.npz``).
- :mod:`spec.full_vocab`: exact probes at full V, two verdicts (protocol, law);
  :mod:`spec.strata`: stratified statistics at LLM vocabulary sizes; :mod:`spec.llm_properties`
  registers both as properties.
- :mod:`spec.mutants`: broken verifiers and pipelines named after real bug classes.
- :mod:`spec.vectors`: portable test vectors (format: ``VECTORS.md``).
- :mod:`spec.external`: the JSON-lines wire protocol to a program under test, both ends (a package:
  json_values, transport, implementation, server).
- :mod:`spec.check`: ``verispec check``: vectors + properties against an implementation.
- :mod:`spec.law_only`: ``check --law-only``: verifiers that draw their own randomness.
- :mod:`spec.sequential`: group-sequential statistics (early rejection, ``--budget``, shards).
- :mod:`spec.workers`: ``check --workers N``: the statistics drawn in N verifier processes.
- :mod:`spec.decoder.first_tokens`, :mod:`spec.decoder.check`: ``check-decoder``: the law of a whole
  decoder's first m tokens on a real GGUF, greedy divergences vs batch-shape noise.
- :mod:`spec.decoder.mutants`: mutant decode loops (pipeline bugs) that ``check-decoder`` rejects.
- :mod:`spec.witness`: the speculative decoding station of ``verispec witness`` (toy target, draft,
  evidence).
- :mod:`spec.tree_exact`: token trees (``protocol.md``, "Token trees"): exact laws over small
  trees, the known flaws, a float verifier integrated over the cells of its uniforms.
- :mod:`spec.tree_mutants`: broken tree verifiers (each a known failure mode).


Also here:

- :mod:`.answers`: Answers from a program under test, validated before anything counts them.
- :mod:`.merge`: ``verispec check --merge``: shard reports -> the report of the whole run, or a clear refusal.
- :mod:`.property_names`: The names of everything ``verispec check`` can run, in its order: vector replays, then the properties.
- :mod:`.report`: The report of ``verispec check``: per-property outcomes, the claim, the exit status, the JSON.
- :mod:`.report_seal`: What binds a shard report to its run: verifier identity, run id, content digest, HMAC.
- :mod:`.sequential_state`: The three outcomes of a sequential test with a budget, and their exit statuses.
- :mod:`.shards`: Shards: block ownership, each shard's own looks, and the alpha they spend.
- :mod:`.signals`: Ctrl-C and SIGTERM in a checker with threads: waits that a signal always ends, and a section that a signal cannot split.
- :mod:`.stream_probe`: The same-stream probe: does each shard / worker draw its own randomness?
- :mod:`.subject`: What a property is: its verdict (:class:`PropertyResult`) on the implementation under test (:class:`Subject`), and the adapters between a verifier's single ...
- :mod:`.version`: The version of verispec this spec ships in: a report names it, a merge refuses another's shards.
"""

if __name__ != "verispec.spec":  # pragma: no cover - a guard, not a feature
    # The one import root is `verispec`; `import spec` from a checkout would load a second copy
    # of every module (two registries, two exception classes) and shadow a user's own `spec`.
    raise ImportError(f"import verispec.spec, not {__name__}: verispec installs no top-level 'spec' package")
