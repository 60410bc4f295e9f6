"""bitsandbytes bases and optimizers (issue 14): the estimate's storage bytes against bitsandbytes' own tensors, and
QLoRA / LLM.int8 / AdamW8bit / the AdamW kernels measured on real CPU steps against the estimate and the trace."""

from __future__ import annotations

import statistics

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
bnb = pytest.importorskip("bitsandbytes")

from memfit.estimate import RunSpec  # noqa: E402
from memfit.estimate.states import int8_bytes, nf4_bytes  # noqa: E402
from memfit.runtime.quantise import quant_state_tensors  # noqa: E402


def _storage_bytes(tensors: list[torch.Tensor]) -> int:
    return sum({id(t.untyped_storage()): t.untyped_storage().nbytes() for t in tensors}.values())


@pytest.mark.parametrize("out_features,in_features", [(512, 256), (30, 100), (4096 // 8, 4096 // 8 + 64)])
@pytest.mark.parametrize("double_quant", [False, True])
def test_nf4_bytes_are_bitsandbytes_tensors(out_features: int, in_features: int, double_quant: bool) -> None:
    """A Linear4bit quantised by bitsandbytes 0.50 on the CPU: its packed weight plus every QuantState tensor
    (absmax, the layer's NF4 code; with double quantisation the offset, state2.absmax and state2.code) is what
    nf4_bytes says, including sizes whose blocks do not divide evenly (30 x 100 = 3,000: 1,500 packed bytes,
    47 blocks)."""
    lin = bnb.nn.Linear4bit(in_features, out_features, bias=False, compute_dtype=torch.float32,
                            compress_statistics=double_quant, quant_type="nf4").to("cpu")
    module = torch.nn.Sequential(lin)
    real = _storage_bytes([lin.weight, *quant_state_tensors(module)])
    assert real == nf4_bytes(out_features * in_features, double_quant)
    names = {"absmax", "code"} | ({"offset"} if double_quant else set())
    assert names <= {k for k, v in vars(lin.weight.quant_state).items() if isinstance(v, torch.Tensor)}


def test_int8_bytes_are_bitsandbytes_tensors() -> None:
    """Linear8bitLt (LLM.int8, has_fp16_weights=False): the int8 weight (CB) and its fp32 row scales (SCB)."""
    lin = bnb.nn.Linear8bitLt(256, 96, bias=False, has_fp16_weights=False).to("cpu")
    real = _storage_bytes([lin.weight, *quant_state_tensors(torch.nn.Sequential(lin))])
    assert lin.weight.dtype == torch.int8 and real == int8_bytes(96, 256) == 96 * 256 + 4 * 96


def test_quantised_base_is_built_as_transformers_quantizes() -> None:
    """The builder replaces the block linears (not lm_head) with bitsandbytes modules, marks the model loaded in
    4 bits, upcasts the rest to fp32 (prepare_model_for_kbit_training) and adapts with LoRA."""
    from memfit.runtime.build import build_model, tiny_config

    cfg = tiny_config("llama", layers=1, hidden=64, heads=4, vocab=128)
    model = build_model(cfg, RunSpec(method="qlora", precision="bf16", batch=1, seq=8), device="cpu")
    base = model.get_base_model()
    assert base.is_loaded_in_4bit and base.config.quantization_config.bnb_4bit_use_double_quant
    kinds = {type(m).__name__ for m in base.model.layers[0].modules()}
    assert "Linear4bit" in kinds and type(base.lm_head).__name__ == "Linear"
    floats = [p for p in base.parameters() if p.dtype.is_floating_point]
    assert floats and all(p.dtype == torch.float32 for p in floats)
    assert all(p.requires_grad == ("lora_" in n) for n, p in model.named_parameters())


@pytest.mark.slow
def test_quant_rows_agree_with_measured() -> None:
    """The fast quant rows (memfit.validate.rows_quant.FAST_QUANT_ROWS): QLoRA, LLM.int8, AdamW8bit over a plain-NF4
    QLoRA base, and a for-each full fine-tune, each a real CPU step; the estimate within 2% (max 5%), the trace
    within 1% (before issue 14 measure and trace refused every one of them but the last). Each estimate within
    0.5%: the int8 row with checkpointing was 1.74% low while the estimate let checkpointing drop the inputs that
    bitsandbytes' int8 matmul holds on its autograd ctx (ctx.A)."""
    from memfit.validate.agreement import quant_matrix, run_matrix

    results = run_matrix(quant_matrix(fast=True))
    report = "\n".join(f"{r.row.label}: measured {r.measured_bytes:,} estimate {r.estimate_error:+.3%} "
                       f"trace {r.trace_error}" for r in results)
    assert len(results) == 4 and {r.row.spec.method for r in results} >= {"qlora", "int8-lora", "full"}, report
    trace = [abs(e) for r in results if (e := r.trace_error) is not None]
    assert len(trace) == len(results), report
    assert statistics.median(abs(r.estimate_error) for r in results) <= 0.02, report
    assert max(abs(r.estimate_error) for r in results) <= 0.05, report
    assert max(trace) <= 0.01, report
    assert max(abs(r.estimate_error) for r in results) <= 0.005, report
