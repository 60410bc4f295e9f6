"""Measured memory and time of real training steps (torch), on the shared runtime (:mod:`memfit.runtime`).

- :mod:`memfit.measure.point`: :func:`~memfit.measure.point.measure_point`, one (batch, seq, checkpointing)
  point in this process (torch).
- :mod:`memfit.measure.isolation`: the same point in a fresh subprocess, and that subprocess's server.
- :mod:`memfit.measure.sweep`: :func:`~memfit.measure.sweep.run_sweep` over batches, sequence lengths and
  checkpointing, with :mod:`~memfit.measure.regression` (peak against batch, the checkpointing trade) and
  :mod:`~memfit.measure.bisect` (the largest batch that fits).
- :mod:`memfit.measure.result`: :class:`~memfit.measure.result.PointResult`.

Only ``point`` imports torch, so reports read the results without it.
"""
