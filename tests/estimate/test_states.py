"""Optimizer states and the optimizer step's temporaries against the real optimizers (issue 21 #2: Adafactor).

The Adafactor memfit models is transformers' (``transformers.optimization.Adafactor``, what the HF Trainer's
``optim="adafactor"`` builds and what ``memfit measure`` runs). Two independent checks:

- its state, allocated by a real ``step()`` on the meta device (no memory), summed tensor by tensor, equals
  ``model_states(...).optimizer`` to the byte, for every architecture and for LoRA adapters;
- the bytes its update of one tensor allocates, tracked by a TorchDispatchMode over a real CPU ``step()``,
  equal :func:`memfit.estimate.states.adafactor_step_bytes`.
"""

from __future__ import annotations

from typing import Any

import pytest

from memfit.estimate import ModelShape, RunSpec, model_states

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.runtime.build import build_model, tiny_config  # noqa: E402
from memfit.runtime.step import make_optimizer  # noqa: E402
from memfit.runtime.tracker import LiveTensorTracker  # noqa: E402
from memfit.validate.agreement import scaled_config  # noqa: E402

STATE_CASES: list[tuple[str, dict[str, Any], RunSpec]] = [
    ("llama-tied-gqa full fp32", scaled_config("llama-3.2-1b", 256, 2), RunSpec(method="full", precision="fp32")),
    ("llama-tied-gqa full bf16", scaled_config("llama-3.2-1b", 256, 2), RunSpec(method="full", precision="bf16")),
    ("gpt2 conv1d+positions full", scaled_config("gpt2", 256, 2), RunSpec(method="full", precision="bf16")),
    ("opt projections full", tiny_config("opt", layers=2, ffn_dim=128, word_embed_proj_dim=32),
     RunSpec(method="full", precision="fp32")),
    ("pythia full", scaled_config("pythia-1.4b", 256, 2), RunSpec(method="full", precision="mixed-bf16")),
    ("mixtral experts full", scaled_config("mixtral-8x7b", 256, 2), RunSpec(method="full", precision="bf16")),
    ("qwen3 qk-norm full", scaled_config("qwen3-8b", 256, 2), RunSpec(method="full", precision="fp32")),
    ("gemma2 sandwich full", scaled_config("gemma-2-2b", 256, 2), RunSpec(method="full", precision="fp32",
                                                                           attention="eager")),
    ("phi3 fused full", scaled_config("phi-3-mini", 256, 2), RunSpec(method="full", precision="fp32")),
    ("mixtral lora all-linear", scaled_config("mixtral-8x7b", 256, 2),
     RunSpec(method="lora", precision="bf16", targets=("all-linear",))),
    ("gpt2 lora + wte copy", scaled_config("gpt2", 256, 2), RunSpec(method="lora", precision="bf16",
                                                                     modules_to_save=("wte",))),
]


@pytest.mark.parametrize(("name", "config", "spec"), STATE_CASES, ids=[c[0] for c in STATE_CASES])
def test_adafactor_state_equals_the_real_optimizers(name: str, config: dict[str, Any], spec: RunSpec) -> None:
    """Before: a full second moment for every non-square matrix (the embedding: V x h x bytes, e.g. 131 MB on the
    scaled Llama instead of 0.5 MB), in the parameter's dtype instead of fp32, and no RMS scalar."""
    spec = spec.with_(optimizer="adafactor", device="cpu")
    model = build_model(config, spec, device="meta")
    optimizer = make_optimizer(model, spec)
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    optimizer.step()
    real = sum(t.untyped_storage().nbytes() for state in optimizer.state.values() for t in state.values()
               if isinstance(t, torch.Tensor))
    assert model_states(ModelShape.from_hf_config(config), spec).optimizer == real


@pytest.mark.parametrize(("shape", "dtype"), [((300, 64), torch.float32), ((300, 64), torch.bfloat16),
                                              ((4, 96, 64), torch.bfloat16), ((64,), torch.float32),
                                              ((64,), torch.bfloat16)],
                         ids=["matrix-fp32", "matrix-bf16", "experts-bf16", "vector-fp32", "vector-bf16"])
def test_adafactor_step_temporaries_are_measured(shape: tuple[int, ...], dtype: Any) -> None:
    """The peak of live bytes during a real step, above the parameter, its gradient and its state (alive before
    the step), is what the estimate says one tensor's update allocates.

    Worked for the (300, 64) bf16 matrix: fp32 grad and parameter copies 2 x 4 x 19,200 + two updates
    2 x 4 x 19,200 + row and column factors 4 x (300 + 64) = 153,600 + 153,600 + 1,456 = 308,656 B.
    """
    from transformers.optimization import Adafactor

    from memfit.estimate.states import adafactor_step_bytes

    p = torch.nn.Parameter(torch.randn(shape).to(dtype))
    opt = Adafactor([p], lr=1e-4, scale_parameter=False, relative_step=False, warmup_init=False)
    p.grad = torch.randn(shape).to(dtype)
    opt.step()  # allocates the state
    tracker = LiveTensorTracker()
    tracker.track_tensors(t for t in [p, p.grad, *opt.state[p].values()] if isinstance(t, torch.Tensor))
    before = tracker.live_bytes  # alive before the step: the baseline (the old 0-d RMS is replaced by the step)
    with tracker:
        opt.step()
    numel = p.numel()
    # rows + cols: prod(shape[:-1]) + prod(shape[:-2]) * shape[-1]
    factored = (numel // shape[-1] + numel // (shape[-2] * shape[-1]) * shape[-1]) if len(shape) >= 2 else 0
    assert tracker.peak_bytes - before == adafactor_step_bytes(numel, p.element_size(), factored)
    if shape == (300, 64) and dtype == torch.bfloat16:
        assert adafactor_step_bytes(numel, 2, 364) == 308_656
