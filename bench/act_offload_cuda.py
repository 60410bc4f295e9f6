"""``--offload-activations`` on a real GPU: TRL 1.16's own ``OffloadActivations`` against memfit's figures.

memfit models TRL's ``activation_offloading`` (every saved tensor of >= 1,024 B but parameters' and lm_head's on
the host) with one stream and no pinning: on a CPU-only torch TRL's class cannot run, so memfit measures its copy of
the pack rule (``memfit.runtime.act_offload``). On CUDA, TRL's default ``use_streams=True`` keeps up to
``max_fwd_stash_size`` (5) offloaded tensors on the device until their copy is done, which memfit does not model.
This script runs, for each row, two training steps on CUDA three ways and writes the device peaks
(``torch.cuda.max_memory_allocated`` over the second step) to ``OUT_JSON``:

- ``trl_streams``: TRL's ``get_act_offloading_ctx_manager(model)`` (its defaults: pinned memory, streams);
- ``trl_single``: the same with ``use_streams=False`` (the rule memfit models);
- ``memfit``: ``memfit.runtime.step.run_step`` with ``--offload-activations`` (memfit's copy of the rule);

beside ``memfit estimate``'s device peak and host bytes. Run by ``bench/gpu_run.sh``; on a machine without CUDA it
says so and exits 0 (no figure exists until a GPU session runs it).

    python bench/act_offload_cuda.py OUT_JSON
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama-3.2-1b", {"method": "lora", "precision": "bf16", "batch": 2, "seq": 1024}),
    ("llama-3.2-1b", {"method": "lora", "precision": "bf16", "batch": 2, "seq": 1024, "checkpointing": "full"}),
    ("qwen2.5-0.5b", {"method": "full", "precision": "mixed-bf16", "batch": 1, "seq": 1024,
                      "checkpointing": "full"}),
)


def _peak(model: Any, spec: Any, ctx: Any, vocab: int) -> int:
    """Two steps under ``ctx`` (a context-manager factory or None); the second step's max allocated bytes."""
    import torch

    from memfit.runtime.step import make_optimizer, make_scaler, run_step

    optimizer, scaler = make_optimizer(model, spec), make_scaler(spec, "cuda")
    for step in range(2):
        if step == 1:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with ctx(model) if ctx is not None else contextlib.nullcontext():
            run_step(model, spec, optimizer=optimizer, batch=spec.batch, seq=spec.seq, vocab=vocab, device="cuda",
                     scaler=scaler)
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def run_row(model_name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """One row's three device peaks and memfit's estimate (module docstring)."""
    import gc

    import torch

    from memfit.estimate import RunSpec, estimate_memory, lookup
    from memfit.runtime.build import build_model

    entry = lookup(model_name)
    spec = RunSpec(device="cuda", attention="sdpa", offload_activations=True, **fields)
    est = estimate_memory(entry.shape, spec)
    out: dict[str, Any] = {"model": model_name, "spec": spec.to_dict(), "estimate_bytes": est.peak_bytes,
                           "estimate_host_bytes": est.host_bytes}
    config, vocab = dict(entry.config), entry.shape.vocab
    try:
        from trl.models.activation_offloading import get_act_offloading_ctx_manager
    except ImportError as exc:  # the GPU image may lack TRL: memfit's own rule still runs
        get_act_offloading_ctx_manager = None
        out["trl"] = f"not installed ({exc})"
    plain = spec.with_(offload_activations=False)  # TRL's manager wraps the step instead
    runs: list[tuple[str, Any, Any]] = [("memfit", spec, None)]
    if get_act_offloading_ctx_manager is not None:
        runs += [("trl_streams", plain, get_act_offloading_ctx_manager),
                 ("trl_single", plain, lambda m: get_act_offloading_ctx_manager(m, use_streams=False))]
    for name, run_spec, ctx in runs:
        torch.manual_seed(0)
        model = build_model(config, run_spec, device="cuda")
        try:
            out[name] = _peak(model, run_spec, ctx, vocab)
            out[f"{name}_vs_estimate"] = (est.peak_bytes - out[name]) / out[name]
        except Exception as exc:  # noqa: BLE001 - one row's failure is a figure to report, not the end of the run
            out[name] = f"failed: {type(exc).__name__}: {exc}"
        del model
        gc.collect()
        torch.cuda.empty_cache()
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    try:
        import torch
    except ImportError:
        print("act_offload_cuda: no torch here; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("act_offload_cuda: no CUDA device here; nothing to measure (bench/gpu_run.sh runs it on a GPU)")
        return 0
    results = []
    for model_name, fields in ROWS:
        row = run_row(model_name, fields)
        print(json.dumps(row), flush=True)
        results.append(row)
        with open(sys.argv[1], "w") as f:  # after every row: a timeout keeps what finished
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
