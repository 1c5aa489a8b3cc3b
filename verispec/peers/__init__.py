"""Adapters that drive other people's speculative decoders under ``verispec check-decoder``.

Each adapter loads a GGUF file with the peer's own loader and exposes the engine interface of
:mod:`verispec.spec.decoder.depth.law` (``generate``) and :mod:`verispec.spec.decoder.check`
(``greedy``). The peer is imported lazily, when an engine is built: verispec itself never needs it.
"""
