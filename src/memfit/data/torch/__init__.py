"""The torch half of the data layer: collating packed rows for a transformers model, and proving a packing.

Needs the ``torch`` extra. Import the modules directly (``memfit.data.torch.collator``,
``memfit.data.torch.verify``).
"""
