"""Build the real transformers (+ PEFT) model a :class:`~memfit.estimate.spec.RunSpec` describes.

Random weights from the config alone: nothing is downloaded, no ``trust_remote_code``. The spec is
applied the way a Trainer-based fine-tuning script applies it:

==================  =====================================================================================
spec field          what the model gets
==================  =====================================================================================
``precision``       ``fp32|bf16|fp16``: weights created in that dtype (``from_config(dtype=...)``), no
                    autocast. ``mixed-*``: fp32 weights; :func:`autocast_dtype` gives the autocast dtype
                    the step runs under.
``method``          ``full``: every parameter trains. ``lora``: ``peft.get_peft_model`` with
                    ``LoraConfig(r=rank, lora_alpha=alpha, lora_dropout, target_modules, modules_to_save)``;
                    adapter weights are fp32 (PEFT's ``autocast_adapter_dtype=True``). ``qlora`` /
                    ``int8-lora``: a bitsandbytes 4-bit / 8-bit base (:mod:`memfit.runtime.quantise`), then LoRA.
``targets``         ``()`` = PEFT's default for the architecture, ``("all-linear",)`` = ``"all-linear"``.
``checkpointing``   ``full``: every decoder layer, non-reentrant (``use_reentrant=False``);
                    ``every-k``: one decoder layer in ``checkpoint_every`` (transformers'
                    ``every_n_layers``: layers 0, k, 2k, ...); ``sqrt``: segments of ceil(sqrt(L))
                    consecutive layers, each one checkpoint (:mod:`memfit.runtime.segments`);
                    ``offload`` keeps the checkpoints in host memory (transformers' ``offload=True``,
                    :mod:`memfit.runtime.offload`).
``attention``       ``eager`` | ``sdpa`` | ``flash`` (= ``flash_attention_2``).
==================  =====================================================================================

``model.config.use_cache = False`` always: the KV cache has no role in training.

Device placement and weight initialisation happen in one place (:func:`build_model`'s
``with torch.device(device)`` block), so the builder also works under ``torch.device("meta")`` or a
``FakeTensorMode``: no ``.item()``, no explicit ``.to()``.

No memory behind it (:func:`fake_model`, what the trace engine runs): meta first, then fake tensors.
Constructing a model directly under ``FakeTensorMode`` would run every weight initialiser
(``kaiming_uniform_`` on each linear) as fake operators, slow for 70B, and a fake ``cuda`` factory call
fails on a CPU-only torch. Building under ``torch.device("meta")`` runs the same Python (transformers
``from_config``, PEFT ``get_peft_model`` with its adapter layers, checkpointing,
``enable_input_require_grads``) with no storage at all and initialisers that are no-ops; then
:func:`to_fake` swaps each parameter and buffer for a ``FakeTensor`` of the same shape, dtype, stride and
``requires_grad`` (tied weights stay tied). Not staying on meta: the meta device has no kernels of its own
choosing (``scaled_dot_product_attention`` on meta takes the math path and materialises the ``(b, a, s, s)``
scores, which a CPU or CUDA run does not), and anything that reads a value raises; a fake CPU tensor
dispatches exactly as a real CPU tensor would, and transformers' ``is_tracing`` recognises it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from typing import Any

from memfit.errors import MemfitError, require_extra
from memfit.estimate.spec import ALL_LINEAR, RunSpec

require_extra("torch", "torch")
require_extra("transformers", "torch")

import torch  # noqa: E402

from memfit.runtime.segments import apply_checkpointing  # noqa: E402

ATTN_IMPLEMENTATION = {"eager": "eager", "sdpa": "sdpa", "flash": "flash_attention_2"}

WEIGHT_DTYPE = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "mixed-bf16": torch.float32,
    "mixed-fp16": torch.float32,
}


def weight_dtype(spec: RunSpec) -> torch.dtype:
    """The dtype the (non-adapter) weights are stored in: fp32 master weights for ``mixed-*``."""
    return WEIGHT_DTYPE[spec.precision]


def autocast_dtype(spec: RunSpec) -> torch.dtype | None:
    """The autocast dtype for ``mixed-*`` precision, ``None`` when the step runs without autocast."""
    return {"mixed-bf16": torch.bfloat16, "mixed-fp16": torch.float16}.get(spec.precision)


def hf_config(config: dict[str, Any]) -> Any:
    """A transformers ``PretrainedConfig`` from a config dict (``model_type`` names the architecture).

    The dict passes the estimate's boundary first (:func:`memfit.estimate.shape.validate_config`: the same
    checks and messages as ``memfit estimate``); what transformers' own validation still refuses (a field
    the estimate does not read, of the wrong type) becomes a MemfitError with transformers' reason.
    """
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    from memfit.estimate.shape import validate_config

    validate_config(config)
    cfg = dict(config)
    model_type = cfg.pop("model_type", None)
    if not model_type:
        raise MemfitError("the config has no model_type: add one (e.g. \"llama\") to config.json")
    for key in ("architectures", "auto_map", "transformers_version", "_name_or_path"):
        cfg.pop(key, None)
    if cfg.get("torch_dtype") is not None or cfg.get("dtype") is not None:
        cfg.pop("torch_dtype", None)
        cfg.pop("dtype", None)
    try:
        return AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError, TypeError, StrictDataclassError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise MemfitError(f"transformers cannot build a {model_type!r} config ({reason}); fix config.json, "
                          "or pass a config of a supported architecture (see `memfit models`)") from exc


def check_spec(spec: RunSpec, device: str) -> None:
    """Raise a MemfitError for spec settings the real model cannot run on ``device``."""
    if spec.is_quantised or spec.optimizer.endswith("bit"):
        from memfit.runtime.quantise import require_bitsandbytes

        require_bitsandbytes(spec)
    if spec.is_paged and device not in ("cuda", "meta"):
        twin = "adamw-8bit" if spec.optimizer == "paged-adamw-8bit" else "adamw"
        raise MemfitError(f"--optimizer {spec.optimizer} keeps its states in CUDA unified memory and runs on CUDA "
                          f"only; on {device} measure --optimizer {twin} (`memfit trace` and `memfit estimate` take "
                          f"{spec.optimizer} on any machine)")
    if spec.checkpointing == "sqrt" and spec.offload:
        raise MemfitError("--offload runs transformers' per-layer checkpoints in host memory; with --checkpointing "
                          "sqrt (memfit's segments) it is not measured: drop --offload, or use full or every-k")
    if spec.attention == "flash" and device != "cuda":
        raise MemfitError("--attention flash needs CUDA and flash-attn; use --attention sdpa on CPU")
    if spec.attention == "flash" and importlib.util.find_spec("flash_attn") is None:
        raise MemfitError("--attention flash needs the flash-attn package (pip install flash-attn); "
                          "or use --attention sdpa")
    if spec.loss == "chunked":
        raise MemfitError("measure runs transformers' standard loss only, or TRL's (--loss trl); drop --loss chunked "
                          "(Liger's kernels are Triton: compare it with `memfit estimate`)")


def build_model(config: dict[str, Any], spec: RunSpec, device: str = "cpu") -> torch.nn.Module:
    """The training-ready model for ``spec``: random weights on ``device``, spec applied, ``train()`` mode.

    Returns a ``transformers`` ``PreTrainedModel`` for ``method="full"`` or a ``peft.PeftModel`` for LoRA.
    ``device`` may be ``"cpu"``, ``"cuda"``, ``"meta"``; under an active ``FakeTensorMode`` the weights
    are fake tensors. A multimodal config whose ``text_config`` is an architecture the estimate models (Gemma 3)
    builds that language model, the one the estimate reads (:func:`memfit.estimate.shape.language_config`).
    """
    from memfit.estimate.shape import language_config

    config = language_config(config)
    check_spec(spec, "cuda" if str(device).startswith("cuda") else str(device))
    fake_mode = _active_fake_mode()
    if fake_mode is not None:
        # PEFT moves adapter modules with .to(), which cannot swap FakeTensor parameters (torch keeps a
        # weakref to them). Build on the meta device outside the fake mode, then turn every parameter
        # and buffer into a FakeTensor on ``device`` (ties kept).
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            model = build_model(config, spec, device="meta")
        to_fake(model, fake_mode, "cpu" if str(device) == "meta" else device)
        return model
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    check_causal_lm(config)
    cfg = hf_config(config)
    cfg.use_cache = False
    hf_logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(
                cfg, attn_implementation=ATTN_IMPLEMENTATION[spec.attention], dtype=weight_dtype(spec),
                **_experts_kwargs(cfg, spec))
    model.config.use_cache = False
    if spec.is_quantised:
        from memfit.runtime.quantise import quantise_model

        model = quantise_model(model, spec)

    apply_checkpointing(model, spec)
    if spec.is_adapter:
        model = _apply_lora(model, spec)
    else:
        model.requires_grad_(True)
    if spec.loss == "trl":
        _apply_trl_head(model)
    model.train()
    return model


def _apply_trl_head(model: torch.nn.Module) -> None:
    """``--loss trl``: TRL 1.16's fused LM head as ``SFTTrainer.__init__`` adds it (``add_fused_lm_head`` on the PEFT
    model's base model, SFTTrainer's outputs), and every forward called with ``fused_lm_head=True`` as
    ``SFTTrainer.compute_loss`` calls it; its ``loss`` is ``-log_probs.sum() / label_mask.sum()``."""
    import functools

    from memfit.errors import require_extra

    require_extra("trl", "integrations")
    from trl.trainer.utils import add_fused_lm_head

    get_base = getattr(model, "get_base_model", None)
    add_fused_lm_head(get_base() if callable(get_base) else model, outputs=("log_probs", "entropy", "is_top1"))
    model.forward = functools.partial(model.forward, fused_lm_head=True)  # type: ignore[method-assign]


def check_causal_lm(config: dict[str, Any]) -> None:
    """A MemfitError, before transformers is asked, when ``config`` is no causal language model.

    memfit trains what ``AutoModelForCausalLM`` builds (transformers 5.24.0: the model types listed in
    ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``). An encoder-decoder such as T5 (``is_encoder_decoder: true``,
    trained with ``AutoModelForSeq2SeqLM``) or an encoder such as BERT is not in it; transformers' own
    error ("Unrecognized configuration class ...") would otherwise surface as if the attention kernel
    were at fault.
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = config.get("model_type")
    if MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(str(model_type)):  # transformers' own table, not a name list
        return
    if config.get("is_encoder_decoder"):
        kind = "an encoder-decoder (sequence-to-sequence) model, is_encoder_decoder: true"
    else:
        kind = "not a decoder-only causal language model"
    raise MemfitError(f"model_type {model_type!r} is {kind}: transformers has no AutoModelForCausalLM class for "
                      "it, and memfit measures and traces causal-LM fine-tuning only (decoder-only models such "
                      "as llama, qwen2, mistral, gpt2); this architecture is not supported")


def _active_fake_mode() -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    for mode in reversed(_get_current_dispatch_mode_stack()):
        if isinstance(mode, FakeTensorMode):
            return mode
    return None


def to_fake(model: torch.nn.Module, mode: Any, device: str | torch.device = "cpu") -> int:
    """Swap every meta parameter, buffer and tensor attribute of ``model`` for a fake tensor on ``device``.

    Returns the number of tensors swapped. Shared tensors (tied embeddings) map to one fake tensor, so
    they stay shared and are counted once. ``requires_grad`` and the ``Parameter`` type are kept.
    """
    from torch._subclasses.fake_tensor import FakeTensor

    from memfit.runtime.quantise import fake_quantised

    device = torch.device(device)
    converter = mode.fake_tensor_converter
    memo: dict[int, torch.Tensor] = {}
    keys: list[torch.Tensor] = []  # the memo's keys kept alive: a temporary's id() (p.data) is reused once it dies

    def fake_of(t: torch.Tensor) -> torch.Tensor:
        key = id(t)
        if key in memo:
            return memo[key]
        keys.append(t)
        quantised = fake_quantised(t, fake_of)
        if quantised is not None:  # a bitsandbytes weight: its class and quantisation state kept, faked
            memo[key] = quantised
            return quantised
        if isinstance(t, FakeTensor):
            out: torch.Tensor = t
        elif t.device.type == "meta":
            out = converter.from_meta_and_device(mode, t.detach(), device)
        else:  # a real tensor (a buffer a builder computed on CPU): fake it, keep no reference
            out = mode.from_tensor(t.detach())
        if isinstance(t, torch.nn.Parameter):
            out = torch.nn.Parameter(out, requires_grad=t.requires_grad)
        memo[key] = out
        return out

    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = fake_of(p)  # type: ignore[assignment]
        for name, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[name] = fake_of(b)
        for name, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and not name.startswith("_"):
                setattr(module, name, fake_of(value))
    return len(memo)


def build_meta_model(config: dict[str, Any], spec: RunSpec) -> torch.nn.Module:
    """The training-ready model for ``spec`` on the meta device: no storage, no initialisation cost.

    The whole builder runs under ``torch.device("meta")`` so PEFT's adapter layers (created outside
    the builder's own device block) are meta too. transformers refusing the attention implementation
    becomes a MemfitError naming ``--attention``.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            try:
                return build_model(config, spec, device="meta")
            except (ValueError, ImportError) as exc:
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                about_attention = "attn" in str(exc).lower() or "attention" in str(exc).lower()
                if not about_attention:
                    raise MemfitError(f"transformers cannot build this {config.get('model_type')} model: "
                                      f"{first}") from exc
                hint = " (try --attention eager)" if spec.attention != "eager" else ""
                raise MemfitError(f"transformers cannot build this {config.get('model_type')} model with "
                                  f"--attention {spec.attention}: {first}{hint}") from exc


def fake_model(config: dict[str, Any], spec: RunSpec, mode: Any, device: str | torch.device = "cpu") -> torch.nn.Module:
    """:func:`build_meta_model` then :func:`to_fake`: the model for ``spec`` as fake tensors on ``device``."""
    model = build_meta_model(config, spec)
    to_fake(model, mode, device)
    return model


def _experts_kwargs(cfg: Any, spec: RunSpec) -> dict[str, str]:
    """MoE experts: transformers 5 runs them with ``torch._grouped_mm`` by default, a kernel that takes bf16
    weights only (on CPU too; autocast does not cast for it, so mixed-bf16's fp32 master weights fail as
    well); every precision but bf16 runs the eager per-expert loop, as transformers itself does when
    grouped_mm cannot be used."""
    from memfit.estimate.arch import experts_run_eager_loop

    if experts_run_eager_loop(cfg.to_dict(), spec.precision):
        return {"experts_implementation": "eager"}
    return {}


def lora_config(spec: RunSpec, model_type: str | None = None) -> Any:
    """PEFT's ``LoraConfig`` for ``spec``.

    ``targets=()`` means PEFT's default for the architecture, from the table the estimate uses
    (:func:`memfit.estimate.lora.default_lora_targets`), so the three engines adapt the same modules and
    fail the same way (one message naming --targets) where PEFT has no default (Phi-3). Architectures the
    estimate does not model fall back to PEFT's own lookup.
    """
    require_extra("peft", "torch")
    from peft import LoraConfig

    from memfit.estimate.arch import REGISTRY

    targets: str | list[str] | None
    if spec.targets_regex:
        targets = spec.targets_regex
    elif not spec.targets:
        arch = REGISTRY.get(str(model_type))
        targets = list(arch.default_lora_targets()) if arch is not None else None
    elif spec.targets == (ALL_LINEAR,):
        targets = ALL_LINEAR
    else:
        targets = list(spec.targets)
    return LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=spec.lora_dropout,
        target_modules=targets,
        modules_to_save=list(spec.modules_to_save) or None,
        exclude_modules=list(spec.exclude_modules) or None,
        rank_pattern=dict(spec.rank_pattern),
        use_dora=spec.use_dora,
        layers_to_transform=list(spec.layers_to_transform) or None,
        layers_pattern=list(spec.layers_pattern) or None,
        bias=spec.bias,
        trainable_token_indices=list(spec.trainable_token_indices) or None,
        task_type="CAUSAL_LM",
    )


def _check_modules_to_save(model: torch.nn.Module, spec: RunSpec) -> None:
    """PEFT 0.21.2 trains a copy of every module whose name ends with a ``modules_to_save`` entry and silently
    none when nothing matches: a name that matches no module of the real model is an error here, with the
    estimate's message (:func:`memfit.estimate.lora.unknown_modules_message`), for any architecture."""
    from memfit.estimate.lora import unknown_modules_message

    keys = [k for k, _ in model.named_modules(remove_duplicate=False) if k]
    unknown = [m for m in spec.modules_to_save if not any(k.endswith(m) for k in keys)]
    if unknown:
        names = {id(module): k for k, module in model.named_modules()}
        layers = [model.get_input_embeddings(), model.get_output_embeddings()]  # type: ignore[operator]
        examples = [names[id(m)] for m in layers if m is not None and id(m) in names]
        raise MemfitError(unknown_modules_message(unknown, str(getattr(model.config, "model_type", "")), examples))


def _apply_lora(model: torch.nn.Module, spec: RunSpec) -> torch.nn.Module:
    from peft import get_peft_model

    _check_modules_to_save(model, spec)
    keys = [k for k, _ in model.named_modules(remove_duplicate=False) if k]
    unknown = [e for e in spec.exclude_modules if not any(k == e or k.endswith("." + e) for k in keys)]
    if unknown:  # PEFT 0.21.2 only warns ("no modules were excluded"); the estimate refuses the same names
        raise MemfitError(f"--exclude-modules {', '.join(unknown)} matches no module of this model (PEFT excludes a "
                          "module whose full name is, or ends with '.' + , a given name): use e.g. --exclude-modules "
                          "k_proj or mlp.down_proj")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            peft_model = get_peft_model(model, lora_config(spec, getattr(model.config, "model_type", None)))  # type: ignore[arg-type]
    except ValueError as exc:
        raise MemfitError(f"PEFT cannot apply LoRA with --targets {','.join(spec.targets) or '(default)'}"
                          f"{' --exclude-modules ' + ','.join(spec.exclude_modules) if spec.exclude_modules else ''}: "
                          f"{exc}. Name modules the model has (e.g. q_proj,v_proj) or use all-linear") from exc
    if spec.checkpointing != "none":
        # Frozen embeddings give the first checkpointed block an input that does not require grad;
        # non-reentrant checkpointing copes, but PEFT and the Trainer enable this, so we do too.
        with contextlib.suppress(AttributeError, NotImplementedError):
            peft_model.enable_input_require_grads()
    return peft_model


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the optimizer steps (``requires_grad``), in module order."""
    return [p for p in model.parameters() if p.requires_grad]


def tiny_config(model_type: str = "llama", *, layers: int = 2, hidden: int = 64, heads: int = 4,
                kv_heads: int | None = None, intermediate: int | None = None, vocab: int = 256,
                max_positions: int = 512, **extra: Any) -> dict[str, Any]:
    """A small HF config dict of a registered architecture, under the keys its config class reads
    (:meth:`memfit.estimate.arch.ConfigKeys.write`), for tests and benchmarks (seconds on CPU).

    >>> tiny_config("llama", layers=2)["num_hidden_layers"], tiny_config("gpt2", layers=2)["n_layer"]
    (2, 2)
    """
    from memfit.estimate.arch import REGISTRY

    arch = REGISTRY.get(model_type)
    if arch is None:
        raise MemfitError(f"tiny_config knows the registered architectures ({', '.join(REGISTRY)}), not {model_type!r}")
    cfg: dict[str, Any] = {"model_type": model_type}
    cfg.update(arch.keys.write(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads or heads,
                               intermediate=intermediate or 4 * hidden, vocab=vocab, positions=max_positions))
    cfg.update(extra)
    return cfg
