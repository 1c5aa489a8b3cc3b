"""The lab: experiments, microbenchmarks and their saved measurements, never installed.

verispec's wheel holds the product only (pyproject's ``packages.find`` includes ``verispec*``);
this folder stays in the repository and runs from its root, ``python -m lab.NAME``:

- ``measure_early_exit``: held-out measurement of certified early exit (writes its JSON to
  lab/measurements/), with ``bounded_mean`` (betting confidence bounds) for its statistics;
- ``early_exit_shift``: generated vs hand-written prompts on a saved early-exit run (no model work);
- ``fused_bench``: the int8 mode's fused vs per-matrix layers, one process, interleaved;
- ``workload_tables``: markdown tables of a saved ``verispec bench --workload --json`` measurement;
- ``workload_by_request``: the bench's workload measurement one JSON line per request;
- ``sampled_verify_ab``: sampled speculation with the eager verifier against the lazy one (only the
  rows it reads), each beside plain decoding, in one process.

``measurements/`` holds the saved runs the docs' results pages are generated from. The lab
imports verispec; nothing in verispec imports the lab (tests/test_lab_layout.py).

- :mod:`.measure`: the decoder gate's measurements the docs quote (``python -m lab.measure.NAME``);
  the one part of the lab that may import the tests' support package, :mod:`tests.support`
  (tests/test_layering.py).


Also here:

- :mod:`.bind_ab`: The int8 chain's graphs through IO binding against plain runs, on ONE loaded model, step by step.
- :mod:`.chain_ab`: The int8 layer chain against the two graphs a layer it fuses, in ONE process, step by step.
- :mod:`.build_real_rows`: Rebuild ``spec/data/real_rows.npz``: real target/draft row pairs from the two real models.
- :mod:`.exit_chain_ab`: Early-exit decoding on the int8 layer chain cut at its candidate depths against the uncut chain, in ONE process.
- :mod:`.gguf_kernel_probe`: A kernel on the file's own Q4_1 blocks (compiled here, a probe) against MLAS's ``MatMulNBits``, 1 to 8 rows.
- :mod:`.gguf_head_probe`: The same 16-row tile on Q8_0 blocks (the heads, Gemma 3's size) against MLAS's 8-bit ``MatMulNBits``.
- :mod:`.head_kernel_ab`: The int8 engine's two head kernels, ``mlas`` and ``tile`` (engine/tile_head.py): whole decode steps, the k-row pass, greedy speculation and peak RSS, fresh processes taking turns.
- :mod:`.exit_prefill_ab`: Early exit's prompt pass with the head on its last row (what the deferred decoder runs) against the head on every row.
- :mod:`.draft_cache_load`: How fast ``--draft-cache FILE`` loads: MB/s for caches of about 1, 6 and 60 MB.
- :mod:`.link_ab`: CPU of the int8 layer graphs alone: a link against the two graphs it fuses, and the cost by rows.
- :mod:`.layer_ab`: CPU of the int8 mode's layer pass, for an A/B of two checkouts (SmolLM2, fused layers).
- :mod:`.load_memory`: Where an int8 load's resident memory is, stage by stage: a table from /proc/self/smaps.
- :mod:`.load_time_ab`: Two source trees, the same int8 load, interleaved: the load's CPU time before / after in one run.
- :mod:`.huge_pages_ab`: A load's memory on 2 MiB pages or on 4 KiB pages: the int8 decode step, fresh processes taking turns.
- :mod:`.hand_back_step_ab`: Does handing a load's memory back change the decode step? Both loads in one process, interleaved.
- :mod:`.kv_pages_ab`: The engine's KV cache on 4 KiB pages or on NumPy's 2 MiB pages: resident memory, first prompt pass, step; fresh processes taking turns.
- :mod:`.llama_plain_ab`: The int8 engine's plain decode step against llama.cpp's, interleaved in one process, with the bytes-streamed bound beside them.
- :mod:`.lookup_ceiling`: How far lookup drafts can go on a model's own text: the ceiling no draft controller can pass.
- :mod:`.reference_logits_memory`: Peak RSS of a long run of ``ReferenceLogits`` (spec/decoder/check.py) on the prefixes of a depth run.
- :mod:`.provenance`: The commit a saved measurement ran at, read one way for every script.
- :mod:`.read_bandwidth`: How fast this machine reads memory on 1 and on 2 threads: the ceiling of a decode step's stream.
- :mod:`.results`: The results pages, generated from the saved measurements: ``python -m lab.results``.
- :mod:`.source_ab`: Two source trees of verispec, the same int8 decode, interleaved: a before / after ratio in one run.
- :mod:`.verifier_at_cost`: A batched verifier of a fixed CPU cost a verification: the gate's full-power default for a real implementation of that speed.
- :mod:`.sparse_head_cost`: What a sparse head's pieces cost against the full int8 head, interleaved in one process.
- :mod:`.sparse_head_decode`: The int8 engine's sparse head against its full head in plain decoding, in one process.
- :mod:`.sparse_head_bounds`: How many head rows a certified per-row bound leaves to compute exactly (a lab study).
- :mod:`.spec_bench_fresh`: Plain vs speculative decoding (``--draft auto``) on a Spec-Bench-style workload written apart from the bench's own (``lab/data/workload_fresh.jsonl``), greedy and T = 0.8, interleaved.
- :mod:`.step_profile`: Where one int8 decode step goes: wall time per component, accumulated over greedy 1-row steps.
"""
