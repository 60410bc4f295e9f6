"""DeepSpeed's ZeRO model-state estimators (deepspeed 0.19.8, CPU accelerator, ``DS_BUILD_OPS=0``).

``estimate_zero2_model_states_mem_needs_all_live(model)`` and the ZeRO-3 one count the model's
parameters (``model_to_params``: shared ones once, keyed by ``data_ptr()``; ZeRO-3 also the largest
layer) and print, per option, the bytes per GPU; the no-offload line on one GPU is
``estimate_zero2_model_states_mem_needs(total, 1, 1, cpu_offload=False)`` = 2 + 18 = 20 B per parameter
(fp16 weights, fp16 + fp32 gradients, fp32 master weights, two fp32 Adam moments) and for ZeRO-3
``4 x largest_layer + 18 B per parameter``: model states only, every parameter trained, whatever the
precision; no activations. Those functions are called for the exact bytes (the printed table rounds to
0.01 GB), after the ``_all_live`` / ``_all_cold`` function itself ran on the same model.

``options["mode"]``: ``live`` builds the model for real on the CPU (random weights; the scaled rows), as
``_all_live`` expects; ``cold`` (the full-size rows, too big to build) builds it on the meta device,
counts its parameters (shared ones once, by identity) and calls ``_all_cold``. ``_all_live`` is not
used on a meta model: every meta tensor has ``data_ptr() == 0``, so ``model_to_params`` would count one
parameter tensor for the whole model (recorded in ``detail["all_live_on_meta_params"]``).
"""

from __future__ import annotations

import warnings
from typing import Any

from _protocol import serve


def _model(config: dict[str, Any], meta: bool) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(config)
    model_type = cfg.pop("model_type")
    for key in ("architectures", "auto_map", "transformers_version", "_name_or_path", "torch_dtype", "dtype"):
        cfg.pop(key, None)
    hf = AutoConfig.for_model(model_type, **cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta" if meta else "cpu"):
            return AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)


def one_row(row: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    from deepspeed.runtime.zero import stage3
    from deepspeed.runtime.zero import stage_1_and_2 as stage2

    meta = row["options"]["mode"] == "cold"
    model = _model(row["config"], meta)
    detail: dict[str, Any] = {"mode": row["options"]["mode"]}
    if meta:
        total = sum({id(p): p.numel() for p in model.parameters()}.values())
        largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
        detail["all_live_on_meta_params"] = stage2.model_to_params(model)
        stage2.estimate_zero2_model_states_mem_needs_all_cold(total, num_gpus_per_node=1, num_nodes=1)
        stage3.estimate_zero3_model_states_mem_needs_all_cold(total, largest, num_gpus_per_node=1, num_nodes=1)
    else:
        stage2.estimate_zero2_model_states_mem_needs_all_live(model, num_gpus_per_node=1, num_nodes=1)
        stage3.estimate_zero3_model_states_mem_needs_all_live(model, num_gpus_per_node=1, num_nodes=1)
        total, largest = stage3.model_to_params(model)
    _, zero2 = stage2.estimate_zero2_model_states_mem_needs(total, 1, 1, cpu_offload=False)
    _, zero3, _ = stage3.estimate_zero3_model_states_mem_needs(total, largest, 1, 1, cpu_offload=False,
                                                               cpu_offload_params=False)
    detail.update(total_params=total, largest_layer_params=largest, zero3_bytes=int(zero3))
    return int(zero2), detail


def warm() -> None:
    import deepspeed.runtime.zero.stage3  # noqa: F401
    import deepspeed.runtime.zero.stage_1_and_2  # noqa: F401
    import transformers  # noqa: F401


if __name__ == "__main__":
    serve(("deepspeed", "torch", "transformers"), one_row, warm)
