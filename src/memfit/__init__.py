"""memfit: will this fine-tuning run fit in GPU memory, where does every byte go, and what makes it fit.

Layers import one way: ``cli -> report -> {advise, measure, trace, data, configs} -> estimate``.
``memfit.estimate`` is pure Python and never imports torch; importing ``memfit`` imports nothing heavy.

From Python::

    import memfit
    est = memfit.estimate("meta-llama/Llama-3.1-8B", method="qlora", rank=16, batch=4, seq=2048)
    plan = memfit.fit("llama-3.1-8b", gpu="24GiB", config="axolotl.yml")
    memfit.Target.resolve("24GiB").judge(est.peak_bytes, est.spec.device, reserved=est.reserved_bytes).fits
    spec = memfit.RunSpec.from_config("axolotl.yml")
    spec = memfit.RunSpec.from_training_args(training_args, model.config, peft_config)

``memfit.estimate`` is both the analytic package and, called, :func:`memfit.api.estimate`.
"""

from typing import Any

from memfit.errors import MemfitError

__all__ = ["MemfitError", "MemoryEstimate", "RunSpec", "Target", "__version__", "estimate", "fit"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Lazy public names: nothing below is imported until it is used."""
    if name == "fit":
        from memfit.api import fit

        return fit
    if name in ("RunSpec", "MemoryEstimate", "Target"):
        import memfit.estimate as estimate_package

        return getattr(estimate_package, name)
    if name == "estimate":
        import importlib

        return importlib.import_module("memfit.estimate")
    raise AttributeError(f"module 'memfit' has no attribute {name!r}")
