"""verispec reference: pure-NumPy, readable; the executable meaning of every step.


The modules:

- :mod:`.atomic`: All-or-nothing outputs, the project's one atomic writer: a file or a set of files is built beside the target, then renamed into place (reference/ holds it ...
- :mod:`.calibration`: Early-exit calibration: records along the full model's greedy trajectories, and the artifact (a package,
  one concept a module).
- :mod:`.calibration_records`: The calibration scores an artifact carries, so that its thresholds can be RECOMPUTED on load.
- :mod:`.calibration_seal`: The seal of an early-exit calibration: one digest over the CONTENTS of the artifact and its lens.
- :mod:`.certificate`: The early-exit certificate: top-2 margin, residual scores, and the gates that admit an exit.
- :mod:`.chat`: Chat formats: wrap a conversation in the turn markers a chat model was trained on.
- :mod:`.config`: Model hyperparameters read from GGUF metadata, one reader per architecture.
- :mod:`.conformal`: Conformal calibration for early exit: exact order-statistic quantiles and conformal risk control.
- :mod:`.decode`: Speculative decoding: a draft proposes, the target verifies k+1 positions in ONE pass, we commit.
- :mod:`.draft_cache_file`: The ``--draft-cache`` file: untrusted input, read in time linear in its size at NumPy speed.
- :mod:`.draft_choice`: ``--draft auto``: every lookup proposer at once, kept by what the target accepts as it decodes.
- :mod:`.draft_control`: Cost-model control: how many of the proposed tokens to verify this cycle, or none at all.
- :mod:`.drafts`: Draft sources for speculative decoding: who proposes the tokens the target then verifies.
- :mod:`.early_exit`: Certified layer early exit: exit heads, gates, and exact KV by deferred catch-up.
- :mod:`.errors`: Every exception class of verispec, in one module, each with the exit category the CLI maps it to.
- :mod:`.evidence`: Evidence for a speculative run: what was drafted, what was kept, and what it bought.
- :mod:`.exit_head`: The exit head at a depth: the model's own head, optionally after a tuned-lens affine map, and the names of the gates that decide whether a token may exit there.
- :mod:`.generate`: Plain autoregressive decoding: prompt in, a stream of tokens out, with the stats to compare by.
- :mod:`.gguf`: The GGUF container: header, metadata, tensor table and zero-copy tensor views.
- :mod:`.int8_layer_law`: The int8 layer law: a decoder layer's two halves, every step an IEEE float32 operation.
- :mod:`.json_input`: The one reader for every JSON document the gate takes: wire lines, shard reports, draft caches, calibrations, workloads, vector directories and manifests.
- :mod:`.kvcache`: The key/value cache: what every layer has already computed for the committed positions.
- :mod:`.layers`: The blocks a decoder layer is made of, one function each: norm, RoPE, attention, FFN, softcap.
- :mod:`.model`: The reference forward pass of a quantized GGUF decoder (llama, phi3, gemma3, gemma4), readable first.
- :mod:`.pretokenize`: Pre-tokenization for byte-level BPE: cut text into words before any merge happens.
- :mod:`.prompt_kind`: The prompt-kind rule: a deterministic function of a prompt's text, for per-kind calibration.
- :mod:`.q8_block_dot`: The Q8 block-dot law: a Q8_0 matrix times float32 rows, every step an IEEE float32 operation.
- :mod:`.quants`: ggml tensor types and their codecs: raw GGUF bytes <-> float32.
- :mod:`.sampling`: The target law: ONE function turns a logits row and a history into the distribution we sample.
- :mod:`.seams`: The seams: what a decode loop may ask of a model, its KV cache, a draft source and a verifier.
- :mod:`.session`: One decode session: a request from validation to its result, whatever loop produces the tokens.
- :mod:`.speculative`: Lossless speculative verification (model-free), and the random-draw protocol it follows.
- :mod:`.suffix_draft`: Suffix drafting: propose the most frequent observed continuation of the longest matching suffix.
- :mod:`.suffix_index`: The cross-request draft cache's suffix structure: a depth-bounded suffix trie built lazily.
- :mod:`.tokenizer`: The tokenizer of a GGUF model, built from its metadata, token for token as llama.cpp.
- :mod:`.tokenizer_bpe`: Byte-level BPE (``tokenizer.ggml.model == "gpt2"``): merge adjacent symbols by merge rank.
- :mod:`.tokenizer_spm`: SentencePiece-style BPE (``tokenizer.ggml.model == "llama"``): merge adjacent symbols by score.
- :mod:`.tree_attention`: Tree attention: the candidates of a token tree scored in ONE forward pass.
- :mod:`.tree_decode`: One token-tree cycle of speculative decoding: propose a tree, score it in ONE pass, keep a path.
- :mod:`.tree_speculative`: Token-tree verification: several candidate continuations, one verdict, still the target's law.
"""

if __name__ != "verispec.reference":  # pragma: no cover - a guard, not a feature
    # The one import root is `verispec`; `import reference` from a checkout would load a second copy
    # of every module (two registries, two exception classes) and shadow a user's own `reference`.
    raise ImportError(f"import verispec.reference, not {__name__}: verispec installs no top-level 'reference' package")
