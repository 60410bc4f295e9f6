"""The torch half of the data layer: collating packed rows for a transformers model, and proving a packing.

Needs the ``torch`` extra; importing this package without torch is a MemfitError naming it. Import the
modules directly (``memfit.data.torch.collator``, ``memfit.data.torch.verify``).
"""

from memfit.errors import require_extra

require_extra("torch", "torch")
