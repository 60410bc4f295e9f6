"""memfit inside other frameworks' training loops.

- :mod:`memfit.integrations.transformers`: :class:`~memfit.integrations.transformers.MemfitCallback`, a
  ``transformers.TrainerCallback`` (the Trainer, TRL's ``SFTTrainer``, and what builds on them).

Nothing is imported here: ``import memfit`` (and ``import memfit.integrations``) never imports transformers
or torch; importing :mod:`memfit.integrations.transformers` does.
"""
