"""memfit: will this fine-tuning run fit in GPU memory, where does every byte go, and what makes it fit.

Layers import one way: ``cli -> report -> {advise, measure, trace, data} -> estimate``.
``memfit.estimate`` is pure Python and never imports torch.
"""

from memfit.errors import MemfitError

__all__ = ["MemfitError", "__version__"]
__version__ = "0.1.0"
