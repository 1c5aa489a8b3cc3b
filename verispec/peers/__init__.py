"""Adapters that drive other people's speculative decoders under ``verispec check-decoder``.

Each adapter loads a GGUF file with the peer's own loader and exposes the engine interface of
:mod:`verispec.spec.decoder.depth.law` (``generate``) and :mod:`verispec.spec.decoder.check`
(``greedy``). The peer is imported lazily, when an engine is built: verispec itself never needs it.


The modules:

- :mod:`.hf_export`: A llama-architecture GGUF written out as a Hugging Face checkpoint folder, for peers that cannot read GGUF (mlx-lm loads ``config.json`` + ...
- :mod:`.llama_cpp_peer`: llama-cpp-python's prompt lookup decoding as an engine for ``verispec check-decoder``.
- :mod:`.transformers_peer`: Hugging Face transformers' speculative paths as engines for ``verispec check-decoder``.
"""
