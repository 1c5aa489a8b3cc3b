"""Measurements of the decoder gate that docs pages quote, each re-run from the repository root
as ``python -m lab.measure.NAME`` (minutes; never collected by pytest):

- :mod:`.decoder_depth`: the depth test at its full design: the design deviation fails, the
  bug-free loop passes; ``ratio`` times the two row providers on the same work.
- :mod:`.decoder_depth_two_sample`: two-sample mode at depth at its full design.
- :mod:`.depth_mutants`: the mutant table of docs/checking-decoders.md (law and two-sample).
- :mod:`.engine_depth`: ``check-decoder --ours --weights MODE --depth 64`` on a real model.
- :mod:`.batched_decoding`: batched decoding's CPU a token at several lockstep widths.
- :mod:`.batch_mutants`: the batch test's reference engine and its mutants at a stated design.
- :mod:`.ours_depth`: ``--ours`` at depth on SmolLM2, timed in a given source tree (before/after).
- :mod:`.cpu_profile`: the test suite's CPU per test, file and fixture setup (a pytest plugin, and
  its ranking): where the gate's time goes.
- :mod:`.fuzz_fat_process`: the model-fuzz corpus's CPU in a process holding many file mappings
  (a late test worker), timed in a given source tree (before/after).

The rule these scripts keep (tests/test_layering.py enforces it): they measure the tests' own
cases at full scale, so besides the product they may import the tests' support package
(:mod:`tests.support`: the tiny depth model, its loop and mutant runner) and nothing else of
tests/; the rest of lab/ imports only the product.
"""
