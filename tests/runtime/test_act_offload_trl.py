"""``--offload-activations``: TRL 1.16's OffloadActivations rule, checked against TRL's own class on a CPU step.

TRL's ``OffloadActivations`` needs an accelerator (``torch.accelerator.current_accelerator().type``); with the
accelerator reported as the CPU and ``use_streams=False, use_pin_memory=False`` it runs its real pack on a CPU step
(the tensors on the "accelerator" are then the CPU's), which is the independent source here: the same tensors must
go to the host under memfit's copy of the rule (:mod:`memfit.runtime.act_offload`), same count, same bytes.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.estimate import RunSpec  # noqa: E402
from memfit.runtime.act_offload import offloading_activations, output_head  # noqa: E402
from memfit.runtime.build import build_model  # noqa: E402
from memfit.runtime.offload import HostCopies, counting_host  # noqa: E402

# 2 layers, hidden 64, vocab 1000 (as tests/runtime/test_offload.py)
LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 176, "vocab_size": 1000, "max_position_embeddings": 256,
         "hidden_act": "silu", "tie_word_embeddings": False}


def _spec(**kw: Any) -> RunSpec:
    base: dict[str, Any] = {"device": "cpu", "method": "lora", "precision": "fp32", "attention": "sdpa", "batch": 2,
                            "seq": 32}
    return RunSpec(**{**base, **kw})


def _forward(model: Any, spec: RunSpec) -> Any:
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (spec.batch, spec.seq))
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if spec.is_mixed else torch.autocast("cpu", enabled=False)
    with amp:
        return model(input_ids=ids, labels=ids).loss


def _trl_offloaded(spec: RunSpec) -> tuple[int, int]:
    """(count, bytes) of the host copies TRL's own OffloadActivations holds at the end of the forward."""
    ao = pytest.importorskip("trl.models.activation_offloading")
    model = build_model(LLAMA, spec, device="cpu")
    # (bitsandbytes, imported by memfit, makes __enter__ call the device module's empty_cache: the CPU has none)
    with mock.patch.object(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cpu")), \
            mock.patch.object(torch.cpu, "empty_cache", lambda: None, create=True):
        ctx = ao.get_act_offloading_ctx_manager(model, use_pin_memory=False, use_streams=False)
        with ctx:
            loss = _forward(model, spec)
            copies = [entry[0] for entry in ctx.tracker.values() if entry[1]]
            loss.backward()
    return len(copies), sum(int(c.untyped_storage().nbytes()) for c in copies)


def _memfit_offloaded(spec: RunSpec) -> tuple[int, int]:
    model = build_model(LLAMA, spec, device="cpu")
    host = HostCopies()
    with counting_host(host), offloading_activations(model, device_type="cpu"):
        loss = _forward(model, spec)
        count, live = len(host._seen), host.live_bytes
        loss.backward()
    return count, live


@pytest.mark.parametrize("kw", [
    {},
    {"method": "full"},
    {"checkpointing": "full"},
    {"method": "full", "precision": "mixed-bf16", "checkpointing": "full"},
    {"precision": "mixed-bf16"},
], ids=["lora", "full", "lora-ckpt", "full-mixed-ckpt", "lora-mixed"])
def test_the_same_tensors_go_to_the_host_as_under_trls_class(kw: dict[str, Any]) -> None:
    """memfit's pack moves as many tensors, and as many bytes, as TRL 1.16's OffloadActivations on the same step."""
    spec = _spec(**kw)
    ours = _memfit_offloaded(spec)
    assert ours[1] > 0
    assert ours == _trl_offloaded(spec)


def test_the_head_kept_on_the_device_is_lm_head_also_under_peft() -> None:
    """get_act_offloading_ctx_manager unwraps a PeftModel to its base_model and finds ``lm_head``."""
    model = build_model(LLAMA, _spec(), device="cpu")
    assert type(model).__name__ == "PeftModelForCausalLM"
    assert output_head(model) is model.base_model.model.lm_head
