"""The law at depth: every emitted token of whole generations (``check-decoder``'s default mode).

- :mod:`.law`: the test itself: teacher-forced target rows, PIT, log-score and end-token tests per
  position bin, sequential looks.
- :mod:`.power`: the deviation the design must detect and N from it.
- :mod:`.ties`: cut-edge near-ties under ``--target-law engine-logits``.
- :mod:`.two_sample`: whole generations with speculation on vs the same engine's plain ones.
- :mod:`.generation`: the case a test judges and the generations an engine answers it with.
- :mod:`.sizing`: the cost up front: the pilot's rate, the projected time, the budget-led TV.
- :mod:`.first_m`: the first-m test run first inside the default mode, on a share of the alpha.
- :mod:`.blocks`: the blocks of generations a test asks for, decoded ahead.
- :mod:`.forcing`: the teacher-forced passes computed ahead on threads.
- :mod:`.pool`: ``--workers N``: generations decoded by N engine processes.
- :mod:`.batch`: ``--batch``: requests of other params and seeds in one ``generate_batch`` call, each
  against its own law, plus cross-request independence.
- :mod:`.batch_mutants`: batched engines with the catalogued batch-only defects, and a lossless control.
"""
