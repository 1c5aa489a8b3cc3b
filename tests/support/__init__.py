"""The tests' one support package: every helper more than one test shares (and lab/measure/, the
one part of the lab allowed to import it). Nothing here is a test: pytest collects ``test_*.py``.

Models and writers:

- :mod:`.synthetic`, :mod:`.gguf_builder`: re-exports of the shipped :mod:`verispec.synth` (tiny
  seeded GGUF models, the independent writer).
- :mod:`.tiny_gguf`: tiny random GGUF models written with gguf-py (the oracle writer), and the
  decoder tests' one-layer model.
- :mod:`.model_corpus`: the hostile GGUF corpus and the pipeline each model is pushed through.

Oracles and tolerances:

- :mod:`.gguf_oracle`, :mod:`.hf_oracle`, :mod:`.llamacpp_numerics`: the outside oracles: gguf-py,
  transformers float32, llama.cpp's numerics.
- :mod:`.tolerances`: every float tolerance, each derived from an error model.
- :mod:`.profiles`: example counts that scale with the Hypothesis profile.

Engines and verifiers under test:

- :mod:`.depth`: the depth test's tiny case, its decode loop and mutant runner, the tiny model
  fixture and the correct decoders.
- :mod:`.fake_tokenizer`: a tokenizer with just what a decode loop needs.
- :mod:`.calibration_records`: synthetic calibration records (no model runs), a saved artifact, its edits.
- :mod:`.merge_shards`: small shard sets of check reports for the merge tests.
- :mod:`.equivalence`: speculative-equals-plain comparisons (near-ties derived) and the exact law of
  the first two sampled tokens.
- :mod:`.tree`: the tree tests' fixed draft tree, repetitive prompts and wide suffix draft.
- :mod:`.shared_decodes`: reference-model runs two test files repeat (plain greedy on the golden
  prompts, the first-two-tokens law's memo), computed once per test process.
- :mod:`.quant_blocks`: random block-quantized GGUF bytes for the engine's kernel tests.
- :mod:`.hostile_engines`, :mod:`.stalling_engine`, :mod:`.textbook_verifier`: hostile, hanging and
  textbook (the right law, not bit-exact) implementations.
- :mod:`.processes`: subprocess helpers (timeouts, process groups), a crashing stand-in peer child.
- :mod:`.import_graph`: the static import walk (every import, lazy and by name) that the import-graph
  and layering tests read.

Peers, users, CI:

- :mod:`.peer_verdicts`, :mod:`.peer_verdicts_llama`, :mod:`.peer_verdicts_cmd`,
  :mod:`.peer_verdicts_uag_patched`, :mod:`.peer_cost`: the peer verdict runs of docs/peers.md
  (``python -m tests.support.peer_verdicts ...``) and their cost.
- :mod:`.user_project`, :mod:`.workflow`: a scratch user project and the shipped CI workflow's steps,
  run as a user would.
"""
