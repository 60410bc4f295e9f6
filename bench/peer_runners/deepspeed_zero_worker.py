"""One rank of a real DeepSpeed ZeRO step on CPU (``bench/deepspeed_cpu.py`` launches it with torchrun).

Runs in DeepSpeed's own venv (``bench/.peers/deepspeed``: torch 2.13.0, transformers 5.24.0, deepspeed 0.19.8),
with memfit's ``src`` on ``PYTHONPATH`` for the model build and the live-storage tracker, so the bytes are counted
exactly as ``memfit measure`` counts them (every live tensor storage, once). DeepSpeed picks its CPU accelerator
(``DS_ACCELERATOR=cpu``) and its CPU communication backend (gloo, plus the shared-memory op
``deepspeed_shm_comm_op`` it JIT-compiles with torch's cpp_extension on first use: minutes, once per machine).

    torchrun --nproc-per-node N bench/peer_runners/deepspeed_zero_worker.py REQUEST.json OUT.json

REQUEST: {"config": HF config, "stages": [1, 2, 3], "buckets": [false, true], "batch": b, "seq": s, "steps": k,
"seed": n}; ``buckets`` true = the HF Trainer's "auto" bucket sizes (:func:`ds_config`).
The DeepSpeed config is the plainest a user writes: ``train_micro_batch_size_per_gpu`` b, ``zero_optimization.stage``
and DeepSpeed's defaults for everything else (bucket sizes, contiguous gradients, overlap), fp32 (no fp16/bf16
section), ``optimizer: AdamW`` with ``torch_adam: true`` (torch's AdamW: the for-loop kernel on CPU tensors).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback
import warnings
from typing import Any

import torch
import torch.distributed as dist


def ds_config(stage: int, batch: int, hidden: int | None) -> dict[str, Any]:
    """DeepSpeed's defaults, or (``hidden`` given) the bucket sizes the HF Trainer fills in for ``"auto"``
    (transformers 5.24.0 ``integrations/deepspeed.py``): reduce_bucket_size h*h, stage3_prefetch_bucket_size
    0.9*h*h, stage3_param_persistence_threshold 10*h."""
    zero: dict[str, Any] = {"stage": stage}
    if hidden is not None:
        zero.update(reduce_bucket_size=hidden * hidden, stage3_prefetch_bucket_size=int(0.9 * hidden * hidden),
                    stage3_param_persistence_threshold=10 * hidden)
    return {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
            "zero_optimization": zero,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0, "torch_adam": True}}}


def measure_stage(config: dict[str, Any], stage: int, *, batch: int, seq: int, steps: int,
                  seed: int, auto_buckets: bool) -> dict[str, Any]:
    import deepspeed

    from memfit.estimate.spec import RunSpec
    from memfit.runtime.build import build_model
    from memfit.runtime.tracker import LiveTensorTracker

    vocab = int(config["vocab_size"])
    hidden = int(config["hidden_size"]) if auto_buckets else None
    torch.manual_seed(seed)
    spec = RunSpec(method="full", precision="fp32", batch=batch, seq=seq, device="cpu", adamw_impl="forloop")
    model = build_model(config, spec, device="cpu")
    tracker = LiveTensorTracker(vocab=vocab)
    gen = torch.Generator().manual_seed(seed + dist.get_rank())
    with tracker:
        tracker.track_model(model)
        engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                       config=ds_config(stage, batch, hidden))
        for _ in range(steps):
            ids = torch.randint(0, vocab, (batch, seq), generator=gen)
            with tracker.phase("forward"):
                loss = engine(input_ids=ids, labels=ids).loss
            with tracker.phase("backward"):
                engine.backward(loss)
            with tracker.phase("optimizer"):
                engine.step()
            del loss
    summary = tracker.summary()
    out = {"rank": dist.get_rank(), "stage": stage, "auto_buckets": auto_buckets,
           "peak_bytes": int(summary["peak_bytes"]),
           "peak_phase": str(summary["peak_phase"]),
           "phase_peaks": {k: int(v) for k, v in summary["phase_peaks"].items()}}
    engine.destroy()
    del engine, optimizer, model
    gc.collect()
    return out


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore")
    with open(argv[1], encoding="utf-8") as f:
        request = json.load(f)
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    reply: dict[str, Any] = {"ok": True, "deepspeed": deepspeed.__version__, "torch": torch.__version__,
                             "results": []}
    try:
        for auto in request["buckets"]:
            for stage in request["stages"]:
                mine = measure_stage(request["config"], int(stage), batch=int(request["batch"]),
                                     seq=int(request["seq"]), steps=int(request["steps"]), seed=int(request["seed"]),
                                     auto_buckets=bool(auto))
                ranks: list[Any] = [None] * dist.get_world_size()
                dist.all_gather_object(ranks, mine)
                reply["results"].append({"stage": stage, "auto_buckets": bool(auto), "ranks": ranks})
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if dist.get_rank() == 0:
        with open(argv[2], "w", encoding="utf-8") as f:
            json.dump(reply, f)
    return 0 if reply["ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    sys.exit(main(sys.argv))
