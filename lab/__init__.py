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
"""
