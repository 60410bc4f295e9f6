"""A small real-training harness for checking the analytic estimate (torch; never imported by memfit.estimate).

It runs training steps of a transformers model built from a config with random weights the way the HF
Trainer does (forward with labels under autocast for ``mixed-*``, keep only the loss, backward, optimizer
step, ``zero_grad(set_to_none=True)``) and records:

- ``peak_bytes``: the maximum over the steps of the bytes held by live tensor storages (each storage
  counted once), tracked with a TorchDispatchMode and weak references; the phase of the peak;
- ``saved_bytes``: the bytes saved for backward by the forward of the *last* step (unique storages, not
  counting parameters), attributed to the innermost module running when each tensor was saved.

The model trains with the dropout its config has (transformers' defaults where the config names none,
e.g. GPT-2's 0.1); :func:`without_dropout` gives the config with every dropout field at 0.

Used by the fast agreement tests in this folder and by ``bench/bench_estimate.py``.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from memfit.estimate import RunSpec

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
           "mixed-bf16": torch.float32, "mixed-fp16": torch.float32}


@dataclass
class Measured:
    peak_bytes: int
    peak_phase: str
    saved_bytes: int
    saved_by_module: dict[str, int] = field(default_factory=dict)
    weights_bytes: int = 0
    at_peak: dict[str, int] = field(default_factory=dict)


class _LiveTracker(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.phase = "setup"
        self.peak_phase = "setup"
        self._seen: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.on_peak: Any = None

    def track(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        st = t.untyped_storage()
        if st in self._seen:
            return
        n = st.nbytes()
        self._seen[st] = n
        self.live += n
        weakref.finalize(st, self._free, n)
        if self.live > self.peak:
            self.peak = self.live
            self.peak_phase = self.phase
            if self.on_peak is not None:
                self.on_peak()

    def _free(self, n: int) -> None:
        self.live -= n

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self.track(t)
        return out


def _pop(stack: list[str]) -> None:
    stack.pop()


def without_dropout(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with every dropout field its architecture trains with set to 0.0 explicitly
    (:data:`memfit.estimate.shape.DROPOUT_FIELDS`), so the real model and the estimate read the same values.

    >>> without_dropout({"model_type": "gpt2"})["attn_pdrop"]
    0.0
    """
    from memfit.estimate.shape import DROPOUT_FIELDS

    out = dict(config)
    for key, _default in DROPOUT_FIELDS.get(str(config.get("model_type")), {}).values():
        out[key] = 0.0
    return out


def hf_config(config: dict[str, Any], spec: RunSpec) -> Any:
    import transformers

    cfg = dict(config)
    model_type = cfg.pop("model_type")
    for k in ("torch_dtype", "dtype"):
        cfg.pop(k, None)
    c = transformers.AutoConfig.for_model(model_type, **cfg)
    c.use_cache = False
    c._attn_implementation = spec.attention if spec.attention != "flash" else "sdpa"
    return c


def build_model(config: dict[str, Any], spec: RunSpec) -> Any:
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config(config, spec),
                                                          attn_implementation=spec.attention)
    model.to(_DTYPES[spec.precision])
    if spec.checkpointing == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    if spec.method == "lora":
        import peft

        targets: Any = list(spec.targets) if spec.targets else None
        if targets == ["all-linear"]:
            targets = "all-linear"
        lcfg = peft.LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.lora_dropout,
                               target_modules=targets, task_type="CAUSAL_LM",
                               modules_to_save=list(spec.modules_to_save) or None)
        model = peft.get_peft_model(model, lcfg)
    model.train()
    return model


def run_steps_cuda(config: dict[str, Any], spec: RunSpec, *, steps: int = 2) -> Measured:
    """The same step on CUDA; the peak is ``torch.cuda.max_memory_allocated`` (phase not tracked)."""
    model = build_model(config, spec).to("cuda")
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (spec.batch, spec.seq), device="cuda")
    labels = ids.clone()
    mask = torch.ones_like(ids)
    if spec.padding_mask:
        mask[0, : spec.seq // 4] = 0
    amp = {"mixed-bf16": torch.bfloat16, "mixed-fp16": torch.float16}.get(spec.precision)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            loss = model(input_ids=ids, attention_mask=mask if spec.padding_mask else None, labels=labels).loss
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return Measured(peak_bytes=torch.cuda.max_memory_allocated(), peak_phase="unknown", saved_bytes=0)


def run_steps(config: dict[str, Any], spec: RunSpec, *, steps: int = 2, per_module: bool = False,
              detail: list[Any] | None = None) -> Measured:
    """Build the model and run ``steps`` training steps on CPU; see the module docstring."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = build_model(config, spec)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4)
    vocab = model.config.vocab_size if hasattr(model, "config") else config["vocab_size"]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (spec.batch, spec.seq), generator=g)
    labels = ids.clone()
    mask = torch.ones_like(ids)
    if spec.padding_mask:
        mask[0, : spec.seq // 4] = 0
    tracker = _LiveTracker()
    for p in params:
        tracker.track(p)
    for b in model.buffers():
        tracker.track(b)
    tracker.track(ids)
    tracker.track(labels)
    if spec.padding_mask:
        tracker.track(mask)
    weights = tracker.live

    saved: dict[int, tuple[int, str]] = {}
    stack: list[str] = [""]
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in param_ptrs and ptr not in saved and t.device.type != "meta":
            saved[ptr] = (st.nbytes(), stack[-1])
            if detail is not None:
                detail.append((stack[-1], tuple(t.shape), str(t.dtype).replace("torch.", ""), st.nbytes(),
                               t.requires_grad))
        return t

    handles = []
    if per_module:
        for name, mod in model.named_modules():
            handles.append(mod.register_forward_pre_hook(lambda m, a, n=name: stack.append(n)))
            handles.append(mod.register_forward_hook(lambda m, a, o: _pop(stack)))

    autocast_dtype = {"mixed-bf16": torch.bfloat16, "mixed-fp16": torch.float16}.get(spec.precision)
    with tracker:
        for _step in range(steps):
            saved.clear()
            if detail is not None:
                detail.clear()
            tracker.phase = "forward"
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                if autocast_dtype is not None:
                    with torch.autocast("cpu", dtype=autocast_dtype):
                        loss = model(input_ids=ids, attention_mask=mask if spec.padding_mask else None,
                                     labels=labels).loss
                else:
                    loss = model(input_ids=ids, attention_mask=mask if spec.padding_mask else None,
                                 labels=labels).loss
            tracker.phase = "backward"
            loss.backward()
            del loss
            tracker.phase = "optimizer"
            opt.step()
            opt.zero_grad(set_to_none=True)
    for h in handles:
        h.remove()
    by_module: dict[str, int] = {}
    for n, mod in saved.values():
        by_module[mod] = by_module.get(mod, 0) + n
    return Measured(peak_bytes=tracker.peak, peak_phase=tracker.peak_phase,
                    saved_bytes=sum(n for n, _ in saved.values()), saved_by_module=by_module,
                    weights_bytes=weights)
