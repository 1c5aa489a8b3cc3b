"""`verispec bench`: every speed that matters, measured in ONE process so the ratios are comparable.

On a shared 2-core machine absolute tok/s swing with load; ratios taken within one run do not
(much). Everything is measured on the same loaded :class:`~engine.model.FastModel`, the headline
model, in the default weights mode (``--weights auto``: int8 where onnxruntime is installed,
else exact; ``engine_kernel`` names its kernels and row modes):

- ``matmul_bound``: the model's own float32 matrices (fused QKV, out, fused gate/up, down, head)
  streamed once with one activation row each, no other work: the cost floor of a decode step.
- ``rows``: the cost of that same stream with 1..8 activation rows, relative to 1 row (what a
  verification pass of k+1 positions costs; pick k by it).
- ``plain``: engine greedy decode tok/s (1 / time per output token after the first).
- ``prefill``: one forward over a prompt (head on the last row), prompt tok/s.
- ``speculative``: for each draft source and each prompt of a mixed set, lossless speculative decode
  (:func:`reference.decode.speculative_generate` on the engine, with the engine's bit-identical law)
  against plain decode of the same request: speedup, alpha, tokens per target pass, acceptance per
  draft position; geometric mean over the set; and one sampled run at temperature 0.8.
- ``early_exit`` (with ``--early-exit CAL.json``): certified early exit (greedy, the artifact's gate)
  against plain decode of the same request on the same engine, alternating runs, best of each:
  speedup, mean exit depth, admitted fraction, exit-head evaluations per token.
- ``reference``: the reference engine's tok/s on a short run (loads a second copy of the weights).
- ``llama_cpp``: llama.cpp plain and prompt-lookup decoding on the same prompt ids and file, the
  same number of tokens (end of generation ignored on both sides), with the engine's thread count,
  when the optional ``llama_cpp`` package is importable (:mod:`verispec.bench.llama`), in a child
  process (:mod:`verispec.bench.llama_child`, :mod:`verispec.bench.peer`): a crash there is that
  section's result (``status``, ``crash``), never the bench's end; the ratios compare the int8
  mode's plain and ngram runs with them, prompt by prompt.
- ``workload`` (with ``--workload``): the chat workload of :mod:`verispec.workload` per draft,
  greedy and sampled, per category and over the categories; ``workload_llama_cpp``: llama.cpp
  plain and prompt lookup on the same greedy requests (same prompt ids, GGUF, max tokens, the
  engine's thread count), interleaved request by request with the engine's runs: llama.cpp
  plain / prompt lookup / engine ratios per category and over the categories, and how many
  leading tokens the two engines' greedy outputs share (information: their numerics differ).
- ``backends``: every matmul backend and weights mode (f32/numpy, f32/ort, int8/ort-q), interleaved
  in this run: matmul bound, k-row cost curve, plain decode over bound, 2 threads over 1, peak RSS
  of a child per mode against file + KV (:mod:`verispec.bench.backends`); ``speculative_int8``: the
  speculative section on the int8 mode (lossless relative to it: same greedy tokens).
- ``machine``: CPU model, its vector instruction sets (``isa``: AVX2, AVX-512, VNNI, AMX flags),
  cores, BLAS (threadpoolctl: library, version, active kernel, threads), OPENBLAS_CORETYPE,
  onnxruntime's version, the load average at the start and the end; ``peak_rss_mib`` (of this
  process: every mode loaded).

The package, one section or concern a module: :mod:`~verispec.bench.options` (what to measure),
:mod:`~verispec.bench.run` (:func:`run_bench`, the order), :mod:`~verispec.bench.report` (the typed
report and its JSON, ``schema_version``), :mod:`~verispec.bench.timing`,
:mod:`~verispec.bench.means`, :mod:`~verispec.bench.machine`, :mod:`~verispec.bench.speculative`,
:mod:`~verispec.bench.backends`, :mod:`~verispec.bench.kernels`, :mod:`~verispec.bench.llama` and
:mod:`~verispec.bench.llama_section`, :mod:`~verispec.bench.llama_child`,
:mod:`~verispec.bench.peer`, :mod:`~verispec.bench.kernel_info`, :mod:`~verispec.bench.workload`,
:mod:`~verispec.bench.early_exit`, :mod:`~verispec.bench.head` (``--head sparse``: the sparse head beside
the full one), :mod:`~verispec.bench.ratios`, :mod:`~verispec.bench.text`
(the printed lines), :mod:`~verispec.bench.plot`. Child processes run ``python -m
verispec.bench.backends``, ``python -m verispec.bench.kernels`` and ``python -m
verispec.bench.llama_child``, so this file imports nothing:
a child's baseline memory is the interpreter's and NumPy's, not the whole bench's.
"""
