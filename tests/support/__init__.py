"""The tests' support package: the helpers shared by the tests (and by lab/measure/, the one part of
the lab allowed to import it). Not tests: nothing here is collected by pytest.

- :mod:`.tiny_gguf`: tiny random GGUF models written with gguf-py (the oracle writer).
- :mod:`.depth`: the depth test's tiny case, its decode loop and mutant runner.
"""
