"""memfit from Python: ``memfit.estimate(model, **spec)``, ``memfit.fit(model, gpu=..., **spec)``.

``model`` is a catalogue name, a ``config.json`` path (or a folder holding one) or a Hub id (from the local
Hugging Face cache); ``spec`` holds :class:`~memfit.estimate.spec.RunSpec` fields (``method``, ``rank``,
``batch``, ``seq``, ``checkpointing``, ...; ``targets`` as a tuple or ``"q_proj,v_proj"``); ``config`` is the
user's training config file(s) (:mod:`memfit.configs`), read first, with ``spec`` winning over it; a
config that names its base model makes ``model`` optional.

>>> import memfit
>>> est = memfit.estimate("llama-3.1-8b", rank=16, batch=4, seq=2048)
>>> est.peak_bytes > est.model_states.weights_frozen
True

The GPU is not part of the run: ``memfit.Target.resolve("24GiB").judge(est.peak_bytes, est.spec.device,
reserved=est.reserved_bytes)`` says whether it fits, by the rule ``memfit estimate --gpu`` prints (without
``reserved``, the stated peak + 5% + 256 MiB + 512 MiB stands in for the allocator replay).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memfit.errors import MemfitError

if TYPE_CHECKING:
    from memfit.advise import FitReport
    from memfit.configs import SpecImport
    from memfit.estimate import MemoryEstimate, RunSpec

ConfigPaths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def run_spec(model: str | None = None, *, config: ConfigPaths | None = None,
             **spec: Any) -> tuple[str, RunSpec, SpecImport | None]:
    """(model, RunSpec, the config import or None) for the API functions."""
    from memfit.configs.convert import spec_from_files, spec_overrides
    from memfit.estimate import RunSpec

    imported = None
    if config is not None:
        paths = [config] if isinstance(config, str | os.PathLike) else list(config)
        imported = spec_from_files(paths, spec, model=model)
        run = imported.spec
        model = model or imported.model
    else:
        run = RunSpec().with_(**spec_overrides(spec))
    if model is None:
        raise MemfitError("pass a model: a catalogue name (memfit models), a config.json path or a Hub id, or a "
                          "config that names its base model")
    return model, run, imported


def estimate(model: str | None = None, /, *, config: ConfigPaths | None = None, **spec: Any) -> MemoryEstimate:
    """The peak memory of one training step and every component of it (:class:`MemoryEstimate`).

    >>> import memfit
    >>> memfit.estimate("llama-3.1-8b", method="qlora", rank=16, checkpointing="full").peak_moment
    'backward: loss'
    """
    from memfit.estimate import estimate_memory, resolve_model

    name, run, _ = run_spec(model, config=config, **spec)
    return estimate_memory(resolve_model(name), run)


def fit(model: str | None = None, /, *, gpu: str, headroom: str | float = "10%", config: ConfigPaths | None = None,
        search: bool = True, **spec: Any) -> FitReport:
    """What to change for the run to fit ``gpu`` (a name from ``memfit gpus`` or a size such as ``"24GiB"``):
    the lesson's ordered remedies and the cheapest fitting configuration (:class:`~memfit.advise.FitReport`).
    ``gpus`` > 1 (a RunSpec field, or the world size a config names) weighs ZeRO / FSDP sharding.

    >>> import memfit
    >>> memfit.fit("llama-3.1-8b", gpu="24GiB", batch=4, seq=2048, search=False).fits
    True
    """
    from memfit.advise import fit as advise_fit
    from memfit.estimate import Target, resolve_model

    name, run, _ = run_spec(model, config=config, **spec)
    return advise_fit(resolve_model(name), run, Target.resolve(gpu, headroom), search=search)
