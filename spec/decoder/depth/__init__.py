"""The law at depth: every emitted token of whole generations (``check-decoder``'s default mode).

- :mod:`.law`: the test itself: teacher-forced target rows, PIT, log-score and end-token tests per
  position bin, sequential looks.
- :mod:`.power`: the deviation the design must detect and N from it.
- :mod:`.ties`: cut-edge near-ties under ``--target-law engine-logits``.
- :mod:`.two_sample`: whole generations with speculation on vs the same engine's plain ones.
- :mod:`.blocks`: the blocks of generations a test asks for, decoded ahead.
- :mod:`.forcing`: the teacher-forced passes computed ahead on threads.
- :mod:`.pool`: ``--workers N``: generations decoded by N engine processes.
"""
