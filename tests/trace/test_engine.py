"""trace against real CPU steps (measure's point, the independent oracle: real tensors, real memory),
over every catalogue architecture and the spec grid, plus the CUDA corrections worked by hand."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memfit.errors import MemfitError  # noqa: E402
from memfit.estimate.arch import REGISTRY  # noqa: E402
from memfit.estimate.spec import RunSpec  # noqa: E402
from memfit.runtime.build import tiny_config  # noqa: E402
from memfit.trace.cuda import cuda_backend, round_cuda  # noqa: E402
from memfit.trace.engine import trace_step  # noqa: E402

measure_point = pytest.importorskip("memfit.measure.point").measure_point

VOCAB = 300  # not a multiple of anything in the configs, so no activation is mistaken for logits


def config(arch: str, **extra: object) -> dict[str, object]:
    """A tiny config of a registered architecture: 4 experts for MoE layouts; token id 0 for padding (Phi-3's
    default pad_token_id, 32000, is outside the tiny vocabulary)."""
    extra = {**REGISTRY[arch].keys.moe_sizes(4, 2), **extra}
    return tiny_config(arch, layers=2, hidden=64, heads=4, kv_heads=2, vocab=VOCAB, pad_token_id=0, **extra)


def measured(cfg: dict[str, object], spec: RunSpec) -> int:
    point = measure_point(cfg, spec, device="cpu", steps=1, warmup=0)
    assert point.fits and point.peak_bytes
    return int(point.peak_bytes)


ARCHS = list(REGISTRY)  # every registered architecture


@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_matches_a_real_cpu_step(arch: str) -> None:
    """LoRA on every linear, bf16: the traced peak is the real step's peak (target: within 1%)."""
    spec = REGISTRY[arch].runnable_spec(RunSpec(method="lora", targets=("all-linear",), precision="bf16", batch=2,
                                                seq=32, attention="sdpa", device="cpu"))  # gemma2: eager
    cfg = config(arch)
    traced = trace_step(cfg, spec)
    real = measured(cfg, spec)
    assert traced.peak_bytes == pytest.approx(real, rel=0.01)
    assert traced.components["activations"] > 0 and traced.components["weights_frozen"] > 0


GRID = [
    {"method": "full", "precision": "fp32", "checkpointing": "none", "attention": "sdpa"},
    {"method": "full", "precision": "mixed-bf16", "checkpointing": "full", "attention": "eager"},
    {"method": "lora", "precision": "fp32", "checkpointing": "full", "attention": "sdpa"},
    {"method": "lora", "precision": "mixed-bf16", "checkpointing": "none", "attention": "sdpa"},
    {"method": "lora", "precision": "bf16", "checkpointing": "full", "attention": "eager", "padding_mask": True},
    {"method": "lora", "precision": "bf16", "checkpointing": "none", "attention": "sdpa", "padding_mask": True},
]


@pytest.mark.parametrize("fields", GRID, ids=lambda f: "-".join(str(v) for v in f.values()))
def test_spec_grid_matches_a_real_cpu_step(fields: dict[str, object]) -> None:
    """Full/LoRA x checkpointing on/off x eager/sdpa x fp32/bf16/mixed-bf16 (pairwise), on Llama."""
    spec = RunSpec(batch=2, seq=48, device="cpu", **fields)  # type: ignore[arg-type]
    cfg = tiny_config("llama", layers=3, hidden=64, heads=4, kv_heads=2, vocab=VOCAB)
    traced = trace_step(cfg, spec)
    real = measure_point(cfg, spec, device="cpu", steps=1, warmup=0)
    assert traced.peak_bytes == pytest.approx(real.peak_bytes, rel=0.01)
    assert traced.peak_phase == real.peak_phase


def test_lora_adapters_are_fake_and_counted_as_peft_makes_them() -> None:
    """PEFT's adapters are built on meta and swapped for fakes like the base weights (no ``.to()`` of a
    fake module). Worked by hand, default targets q_proj, v_proj, r=16, hidden 64, 2 kv heads of 16:
    q_proj A 16x64 + B 64x16 = 2,048; v_proj A 16x64 + B 32x16 = 1,536; 2 layers: 7,168 parameters,
    fp32 adapters (PEFT's default): 28,672 B; AdamW keeps two fp32 moments: 57,344 B (+ step counters)."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    from memfit.runtime.build import fake_model

    cfg = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=VOCAB)
    spec = RunSpec(method="lora", precision="bf16", batch=1, seq=16, device="cpu")
    model = fake_model(cfg, spec, FakeTensorMode())
    params = list(model.parameters())
    assert params and all(isinstance(p, FakeTensor) and p.device.type == "cpu" for p in params)
    traced = trace_step(cfg, spec)
    assert traced.model_states["weights_trainable"] == 7_168 * 4
    assert 57_344 <= traced.model_states["optimizer"] < 57_344 + 64 * 4 * 8
    # on CUDA the for-each path keeps the 0-d "step" counters in host memory: exactly the two moments (each a
    # 512 B multiple); the fused kernel (the default) keeps them on the GPU, one 512 B block for each of the 8
    on_cuda = trace_step(cfg, spec.with_(device="cuda", adamw_impl="foreach"))
    assert on_cuda.model_states["optimizer"] == on_cuda.components["optimizer"] == 57_344
    assert trace_step(cfg, spec.with_(device="cuda")).model_states["optimizer"] == 57_344 + 8 * 512


def test_a_gpt2_sized_model_traces_without_allocating() -> None:
    """Full-size GPT-2 (124M parameters, 50,257-token vocabulary) at batch 8 x 1024: the traced step holds
    far more than this process's resident memory grows by, so nothing was materialised."""
    import resource

    from memfit.estimate.catalogue import resolve_config

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    traced = trace_step(resolve_config("gpt2"), RunSpec(method="full", precision="fp32", batch=8, seq=1024,
                                                         device="cpu"))
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    # fp32 logits alone: 8 x 1024 x 50,257 x 4 B = 1,646,821,376 B, kept for backward with their log-softmax
    logits = 8 * 1024 * 50257 * 4
    assert traced.peak_bytes > 2 * logits
    assert traced.model_states["weights_trainable"] == 124_439_808 * 4  # GPT-2's parameter count, fp32
    assert rss_growth < traced.peak_bytes / 10


def test_sdpa_keeps_no_score_matrix_while_eager_does() -> None:
    """CPU sdpa (flash kernel) keeps out + logsumexp; eager keeps the softmax probabilities (b, a, s, s).

    Worked for L=2 layers, b=2, a=4, s=128, d=16, fp32: eager's probabilities are
    2 x 2 x 4 x 128 x 128 x 4 B = 1,048,576 B; in their place sdpa saves out (b, a, s, d) and lse (b, a, s):
    2 x 2 x 4 x 128 x (16 + 1) x 4 B = 139,264 B. So eager saves at least 909,312 B more.
    """
    cfg = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=4, vocab=VOCAB)
    base = RunSpec(method="full", precision="fp32", batch=2, seq=128, device="cpu")
    sdpa = trace_step(cfg, base.with_(attention="sdpa"))
    eager = trace_step(cfg, base.with_(attention="eager"))
    scores = 2 * 2 * 4 * 128 * 128 * 4
    kernel = 2 * 2 * 4 * 128 * (16 + 1) * 4
    assert eager.saved_total - sdpa.saved_total >= scores - kernel
    assert eager.peak_bytes > sdpa.peak_bytes


def test_per_module_table_and_saved_bytes_name_the_layers() -> None:
    cfg = tiny_config("llama", layers=3, hidden=64, heads=4, kv_heads=2, vocab=VOCAB)
    traced = trace_step(cfg, RunSpec(method="lora", precision="bf16", batch=2, seq=32, device="cpu"))
    assert {f"layer {i}" for i in range(3)} <= set(traced.saved_by_layer)
    layers = [traced.saved_by_layer[f"layer {i}"] for i in range(3)]
    # blocks 1 and 2 are identical; block 0's input (the frozen embedding's output) needs no gradient
    assert 0 < layers[0] <= layers[1] == layers[2]
    assert any(m.module.startswith("model.layers.0.") for m in traced.per_module)
    # the table covers exactly the non-model-state bytes alive at the peak
    states = sum(traced.components[k] for k in ("weights_frozen", "weights_trainable", "gradients", "optimizer"))
    assert sum(m.bytes for m in traced.per_module) == traced.peak_bytes - states
    from memfit.report.trace import by_module_kind

    kinds = by_module_kind(traced)  # the table folds the 3 blocks into one row per module kind
    assert any(kind == "model.layers.*.mlp.act_fn" and count == 3 for kind, _, count, _ in kinds)
    d = traced.to_dict()
    for key in ("spec", "peak_bytes", "peak_phase", "components", "model_states", "reserved_bytes", "gpu_bytes",
                "fits"):
        assert key in d


def test_gpu_verdict() -> None:
    from dataclasses import replace

    from memfit.estimate import Target

    cfg = tiny_config("llama", layers=2, hidden=64, heads=4, vocab=VOCAB)
    traced = trace_step(cfg, RunSpec(batch=1, seq=16, device="cpu"))
    small = replace(traced, target=Target.resolve("16KiB"))
    big = replace(traced, target=Target.resolve("1GiB"))
    assert small.gpu_bytes == 16 * 1024 and small.fits is False
    assert big.fits is True
    assert big.reserved_bytes == big.peak_bytes  # on CPU nothing is reserved beyond the live tensors
    # on CUDA the traced allocations replayed through the caching allocator, + 512 MiB context: every storage of
    # this model is <= 1 MiB, so the small pool's 2 MiB segments hold them all; reserved >= the rounded peak
    cuda = replace(trace_step(cfg, RunSpec(batch=1, seq=16, device="cuda")), target=Target.resolve("1GiB"))
    replayed = cuda.allocator["default"]["reserved_peak_bytes"] if cuda.allocator else 0
    assert replayed % (2 * 1024**2) == 0 and replayed >= cuda.peak_bytes
    assert cuda.reserved_bytes == replayed + 512 * 1024**2
    assert cuda.verdict is not None and cuda.verdict.reserved_bytes == cuda.reserved_bytes
    assert cuda.fits is True  # 512 MiB + a few MiB < 1 GiB


def test_checkpointing_lowers_the_traced_peak_on_a_deep_narrow_model() -> None:
    cfg = tiny_config("llama", layers=6, hidden=64, heads=4, vocab=64)
    base = RunSpec(method="lora", precision="bf16", batch=2, seq=64, device="cpu")
    assert trace_step(cfg, base.with_(checkpointing="full")).peak_bytes < trace_step(cfg, base).peak_bytes


@pytest.mark.parametrize("fields, fix", [
    ({"loss": "chunked"}, "chunked"),
])
def test_unsupported_settings_name_the_alternative(fields: dict[str, object], fix: str) -> None:
    cfg = tiny_config("llama", layers=1, hidden=32, heads=2, vocab=VOCAB)
    with pytest.raises(MemfitError, match=fix):
        trace_step(cfg, RunSpec(**fields))  # type: ignore[arg-type]


# ---- CUDA corrections ------------------------------------------------------------------------------


def test_cuda_block_rounding() -> None:
    assert [round_cuda(n) for n in (0, 1, 511, 512, 513, 1_000_000)] == [0, 512, 512, 512, 1024, 1_000_448]


def test_cuda_blocks_hold_for_the_life_of_a_storage() -> None:
    """The CUDA prediction books each storage in 512-byte blocks for its whole life. Full fine-tune, fp32, a
    2-layer Llama (hidden 64, 2 kv heads of 16, intermediate 256, vocabulary 300): embedding and lm_head
    300 x 64 x 4 = 76,800 B each (150 blocks); per layer q and o 16,384 B, k and v 8,192 B, gate, up and down
    65,536 B (whole blocks) and two norms of 256 B booked as 512 B: 246,784 B; the final norm 512 B. All
    weights are alive at the peak: 647,680 B (raw sizes: 646,400 B). Before, a view or an in-place op that
    returned a norm weight's storage re-booked it at its raw 256 B."""
    cfg = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=VOCAB)
    spec = RunSpec(method="full", precision="fp32", batch=2, seq=48, checkpointing="full", attention="eager",
                   device="cuda")
    traced = trace_step(cfg, spec)
    assert traced.model_states["weights_trainable"] == 647_680
    assert traced.components["weights_trainable"] == 647_680


def test_cuda_kernel_choice_follows_torch_rules() -> None:
    def qkv(dtype: torch.dtype, heads: int = 8, kv: int = 8, d: int = 64) -> tuple[torch.Tensor, ...]:
        return (torch.empty(1, heads, 16, d, dtype=dtype, device="meta"),
                torch.empty(1, kv, 16, d, dtype=dtype, device="meta"),
                torch.empty(1, kv, 16, d, dtype=dtype, device="meta"))

    mask = torch.empty(1, 1, 16, 16, dtype=torch.bool, device="meta")
    assert cuda_backend(*qkv(torch.bfloat16, kv=2), None, True) == "flash"  # GQA is fine for flash
    assert cuda_backend(*qkv(torch.bfloat16), mask, False) == "efficient"  # a mask rules flash out
    assert cuda_backend(*qkv(torch.float32), None, False) == "efficient"  # flash is fp16/bf16 only
    assert cuda_backend(*qkv(torch.float32, kv=2), None, True) == "math"  # efficient has no GQA
    assert cuda_backend(*qkv(torch.bfloat16, d=512), None, False) == "efficient"  # flash stops at 256


def test_cuda_flash_saves_unexpanded_kv_and_cuda_adamw_is_foreach() -> None:
    """GQA under CUDA flash: k and v are saved with their kv heads, as on CPU flash (same saved bytes,
    apart from 512-byte rounding); the CUDA optimizer phase holds a for-each temporary as large as all
    second moments: full fine-tune, fp32, the sqrt(v) list is every trainable byte at once."""
    cfg = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=VOCAB)
    spec = RunSpec(method="full", precision="bf16", batch=2, seq=64, adamw_impl="foreach")
    cpu = trace_step(cfg, spec.with_(device="cpu", adamw_impl="forloop"))
    cuda = trace_step(cfg, spec.with_(device="cuda"))
    assert cuda.saved_total == pytest.approx(cpu.saved_total, rel=0.02)
    trainable = cpu.model_states["weights_trainable"]
    largest = VOCAB * 64 * 2  # the embedding (and the untied lm_head), bf16
    # CPU loops per parameter (a few temporaries of one parameter at a time, at most ~3x the largest);
    # CUDA's for-each holds sqrt(v) of every parameter at once
    assert cuda.phase_peaks["optimizer"] - cpu.phase_peaks["optimizer"] >= trainable - 3 * largest


@pytest.mark.cuda
def test_cuda_prediction_against_a_real_cuda_step() -> None:
    from memfit.estimate.catalogue import resolve_config

    cfg = resolve_config("qwen2.5-0.5b")
    spec = RunSpec(method="lora", precision="bf16", batch=1, seq=1024, device="cuda")
    real = measure_point(cfg, spec, device="cuda", steps=1, warmup=0)
    traced = trace_step(cfg, spec)
    assert traced.peak_bytes == pytest.approx(real.peak_bytes, rel=0.03)


def test_an_attention_transformers_refuses_is_one_clear_error() -> None:
    """Gemma 2's logit soft-capping has no sdpa path in transformers: say so and name --attention eager."""
    with pytest.raises(MemfitError, match="--attention eager"):
        trace_step(config("gemma2"), RunSpec(attention="sdpa", batch=1, seq=16))


def test_cuda_autocast_float32_ops_are_emulated() -> None:
    """CUDA autocast runs pow/exp/softmax... in float32 whatever the input; CPU autocast does not."""
    import torch.nn.functional as F

    from memfit.trace.cuda import CudaAutocastFloat32

    x = torch.ones(2, 4, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.pow(x, 3).dtype == torch.bfloat16  # CPU autocast leaves it in bf16
        with CudaAutocastFloat32():
            assert torch.pow(x, 3).dtype == torch.float32
            assert x.exp().dtype == torch.float32
            assert F.softmax(x, dim=-1).dtype == torch.float32
            assert F.softmax(x, dim=-1, dtype=torch.bfloat16).dtype == torch.bfloat16  # explicit dtype kept
            assert F.silu(x).dtype == torch.bfloat16  # not on CUDA's float32 list
    with CudaAutocastFloat32():
        assert torch.pow(x, 3).dtype == torch.bfloat16  # outside autocast nothing changes


def test_attention_dropout_takes_flash_on_cuda_but_math_on_cpu() -> None:
    """GPT-2 trains with attention dropout 0.1: the CPU flash kernel has no dropout, so CPU keeps the
    (b, a, s, s) probabilities and the dropout mask; CUDA's flash kernel does dropout itself. Per layer at
    b=2, a=4, s=64 the probabilities alone are 2 x 4 x 64 x 64 x 2 B = 65,536 B (bf16)."""
    cfg = tiny_config("gpt2", layers=1, hidden=64, heads=4, vocab=VOCAB)
    spec = RunSpec(method="full", precision="bf16", batch=2, seq=64)
    cpu = trace_step(cfg, spec.with_(device="cpu")).saved_by_module["transformer.h.0.attn"]
    cuda = trace_step(cfg, spec.with_(device="cuda")).saved_by_module["transformer.h.0.attn"]
    assert cpu - cuda >= 2 * 4 * 64 * 64 * 2


def test_cuda_trace_keeps_dropout_masks_as_bool() -> None:
    """CUDA's dropout is the fused native_dropout, which keeps a bool mask; CPU's keeps a noise tensor in the
    input dtype. GPT-2 (resid_pdrop 0.1), fp32, b=2, s=16, h=64: attn.resid_dropout keeps b*s*h = 2,048
    elements, 2,048 B on CUDA and 8,192 B on CPU; PEFT's lora_dropout on block 1's c_attn input (fp32, 2,048
    elements; block 0's input needs no gradient) the same. The CUDA estimate keeps the same masks."""
    from memfit.estimate import ModelShape, estimate_memory

    cfg = tiny_config("gpt2", layers=2, hidden=64, heads=4, vocab=VOCAB)
    spec = RunSpec(method="lora", precision="fp32", attention="eager", batch=2, seq=16, lora_dropout=0.1)
    cpu = trace_step(cfg, spec.with_(device="cpu")).saved_by_module
    cuda = trace_step(cfg, spec.with_(device="cuda")).saved_by_module
    assert cpu["transformer.h.0.attn.resid_dropout"] == 8_192
    assert cuda["transformer.h.0.attn.resid_dropout"] == 2_048
    assert cpu["transformer.h.1.attn.c_attn.lora_dropout.default"] == 8_192
    assert cuda["transformer.h.1.attn.c_attn.lora_dropout.default"] == 2_048
    est = estimate_memory(ModelShape.from_hf_config(cfg), spec.with_(device="cuda")).activations.by_component
    assert est["residual/dropout"] == cuda["transformer.h.1.attn.resid_dropout"] + cuda["transformer.h.1.mlp.dropout"]
    assert est["lora/dropout"] == cuda["transformer.h.1.attn.c_attn.lora_dropout.default"]


def test_cuda_sdpa_with_fewer_kv_heads_and_no_gqa_runs_the_math_path() -> None:
    """Falcon calls sdpa itself with its one key/value head and no enable_gqa: CUDA's flash and memory-efficient
    kernels both refuse differing head counts (torch's ``check_batch_size_and_num_heads_dense``), so the math
    composite runs, as on the CPU, where a real step keeps its O(s^2) fp32 probabilities (the estimate's model).
    The trace picked flash (no mask) or efficient (a mask) there: falcon-7b LoRA bf16 b1 s1024 traced 16.2 GiB
    against the estimate's 25.0 GiB."""
    q = torch.empty(1, 4, 8, 16, dtype=torch.bfloat16)
    kv = torch.empty(1, 1, 8, 16, dtype=torch.bfloat16)
    mask = torch.ones(1, 1, 8, 8, dtype=torch.bool)
    assert cuda_backend(q, kv, kv, None, enable_gqa=False) == "math"
    assert cuda_backend(q, kv, kv, mask, enable_gqa=False) == "math"
    assert cuda_backend(q, kv, kv, None, enable_gqa=True) == "flash"
    assert cuda_backend(q, q, q, mask, enable_gqa=False) == "efficient"


def test_falcon_on_cuda_traces_what_the_estimate_predicts() -> None:
    from memfit.estimate import ModelShape, estimate_memory

    cfg = config("falcon")
    spec = RunSpec(method="lora", precision="bf16", batch=2, seq=64, attention="sdpa", device="cuda")
    est = estimate_memory(ModelShape.from_hf_config(cfg), spec).peak_bytes
    assert trace_step(cfg, spec).peak_bytes == pytest.approx(est, rel=0.01)
