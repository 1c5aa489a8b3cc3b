"""``verispec check-decoder`` as a library: the Python API, the CLI's objects, the worker process.

- :mod:`.api`: ``verispec.check_decoder(...)``: the arguments checked once, the engine built, the
  mode run (the spec of each mode is :mod:`verispec.spec.decoder`).
- :mod:`.options`: the options as objects (``DecoderUnderTest``, ``SamplingFlags``, ``DepthDesign``,
  ...), built alike from the CLI's flags, the API's keywords and the pytest plugin's.
- :mod:`.report`: the typed report (``DecoderReport``) and its JSON.
- :mod:`.recipe`: how a ``--workers`` worker builds its engine (the recipe the checker hands it).
- :mod:`.worker`: one ``--workers`` worker process (``python -m verispec.decoder.worker``).
- :mod:`.ours`: ``--ours``: the fast engine's own speculative decoder under the depth test.
"""
