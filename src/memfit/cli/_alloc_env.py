"""``--alloc-conf`` read from the environment memfit runs in, when the flag is not given.

A CUDA run's caching allocator reads ``PYTORCH_CUDA_ALLOC_CONF`` from its process environment (torch 2.13.0
``c10/cuda/CUDAAllocatorConfig``, parsed once at the first CUDA allocation). A launch script that exports it for
training and runs ``memfit estimate`` from the same shell means that setting, so memfit takes it for
``--device cuda`` when neither ``--alloc-conf`` nor a ``--config`` file set one, and says where it came from. An
explicit ``--alloc-conf`` wins (``--alloc-conf ''`` for torch's defaults); ``--device cpu`` has no caching
allocator and ignores it. The environment is read here, in the CLI: :mod:`memfit.estimate` stays pure (the
setting reaches it as ``RunSpec.alloc_conf``, as the flag's does).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from memfit.errors import MemfitError
from memfit.estimate.spec import RunSpec

ENV_VAR = "PYTORCH_CUDA_ALLOC_CONF"


def alloc_conf_from_environment(spec: RunSpec, explicit: set[str],
                                environ: Mapping[str, str] | None = None) -> tuple[RunSpec, str | None]:
    """``spec`` with ``alloc_conf`` from ``PYTORCH_CUDA_ALLOC_CONF`` (module docstring), and the line that says so
    (None when the environment was not used). A value naming options the allocator replay does not model gets the
    flag's refusal, naming the variable as its source."""
    env = os.environ if environ is None else environ
    value = env.get(ENV_VAR, "").strip()
    if not value or spec.device != "cuda" or "alloc_conf" in explicit or spec.alloc_conf:
        return spec, None
    try:
        out = spec.with_(alloc_conf=value)
    except MemfitError as e:
        raise MemfitError(f"{ENV_VAR}={value} in this environment (memfit reads it for --device cuda when "
                          f"--alloc-conf is not given): {e}",
                          hint=f"unset {ENV_VAR}, or pass --alloc-conf with the options memfit models") from None
    return out, (f"{ENV_VAR}={value}: from the environment (no --alloc-conf given); the CUDA caching-allocator "
                 "replay behind the reserved figure uses it (--alloc-conf overrides it, --alloc-conf '' for "
                 "torch's defaults)")
