"""The trace engine: one training step of the real transformers/PEFT model on fake tensors.

Exact accounting of every storage the real code allocates (the same builder, step and tracker as
``memfit measure``, from :mod:`memfit.runtime`) with no memory behind it, so a 70B step traces on a laptop.

- :mod:`memfit.trace.engine`: :func:`~memfit.trace.engine.trace_step` traces one steady-state step (torch).
- :mod:`memfit.trace.result`: :class:`~memfit.trace.result.TraceResult`, in the estimate's JSON shape plus
  per-module detail (plain data, no torch).
- :mod:`memfit.trace.cuda`: the CPU-to-CUDA corrections (attention kernel, for-each optimizer, allocator
  rounding, host-side step counters).
- :mod:`memfit.trace.fake`: what a fake tensor cannot answer by itself (the optimizer's lazy state, the
  packed-sequence check).
"""
