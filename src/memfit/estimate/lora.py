"""Which block linears a LoRA run adapts, and how many parameters it trains, as PEFT counts them.

PEFT wraps every module whose name equals a target or ends with ``"." + target``; ``all-linear`` means
every ``nn.Linear`` (and GPT-2's ``Conv1D``) except the output layer. Each adapted linear of shape
(in, out) gains ``lora_A`` (r x in) and ``lora_B`` (out x r)::

    lora params per linear = r * (in + out)

Worked: Llama-2-7B with r=16 on q_proj, v_proj: per layer 16*(4096+4096) * 2 = 262,144;
x 32 layers = 8,388,608 trainable parameters.

DoRA (``use_dora``, PEFT 0.21.2 ``DoraLinearVariant.init``) adds one trained fp32 magnitude of ``out`` elements
per adapted linear (``lora_magnitude_vector[adapter].weight``, the row norms of W): Llama-2-7B q_proj, v_proj
gains (4096 + 4096) * 32 = 262,144 parameters. PEFT refuses DoRA on fused experts and routers (``ParamWrapper``).

Mixtral (transformers 5) keeps its experts as fused 3-D parameters (E, 2i, h) and (E, h, i) and its router
``mlp.gate`` as a plain weight. PEFT 0.21's ``all-linear`` adapts all three (the experts through
``target_parameters``), with these shapes, observed on the meta device and pinned by a test::

    router     lora_A (r, h),      lora_B (E, r)          r*(h + E)
    gate_up    lora_A (2rE, h),    lora_B (2i, 2rE)       2rE*(h + 2i)
    down       lora_A (rE, i),     lora_B (h, rE)         rE*(i + h)

Named in ``--targets``, PEFT 0.21.2 converts Mixtral's ``w1``, ``w3``, ``w2`` (Qwen2/3-MoE's and DeepSeek's
``gate_proj``, ``up_proj``, ``down_proj``) and ``gate`` into ``target_parameters`` (:func:`peft_moe_targets`): the
same adapters; naming one of a fused pair only is PEFT's error.

``--modules-to-save`` trains a full copy of a module beside the frozen original (PEFT's
``ModulesToSaveWrapper``). PEFT 0.21.2 (``peft.utils.other._set_trainable``) wraps every module whose full name
*ends with* a given name, as plain strings (``key.endswith(name)``: ``wte`` matches ``transformer.wte``, and so
does ``te``), and silently wraps nothing when no name matches. memfit resolves the names against the module
names transformers 5.24 really gives each architecture (:func:`module_names`; a test compares them with
``named_modules()`` of the real models), so a name no module has is an error in all three engines; the names
are the registry's (:class:`~memfit.estimate.arch.ModuleNames`). The token embedding and the output layer are
the modules the estimate models (:func:`saved_modules`)::

    gpt2      transformer.wte               lm_head
    opt       model.decoder.embed_tokens    lm_head
    gpt_neox  gpt_neox.embed_in             lm_head
    others    model.embed_tokens            lm_head

Each trains a V x h copy in the weights' dtype (fp32 under QLoRA); with tied embeddings too, since PEFT copies
the module and the copy no longer shares its weight. Other modules (a final norm, a position embedding, a
block's projection) are run by ``memfit trace`` and ``memfit measure``, which apply PEFT itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Literal

from memfit.errors import MemfitError
from memfit.estimate.arch import REGISTRY
from memfit.estimate.block_parts import Linear, LinearRole
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import ALL_LINEAR, RunSpec

_TOP_MODULES = ("embed_tokens", "lm_head")


@cache
def block_linears(shape: ModelShape) -> tuple[Linear, ...]:
    """``shape.linears()``, memoised (estimates run thousands of times per second in ``memfit fit``)."""
    return shape.linears()


@cache
def block_linears_by_role(shape: ModelShape) -> dict[LinearRole, Linear]:
    """The block's linears keyed by what they compute (``"q"``, ``"gate_up"``, ``"experts_down"`` ...)."""
    return {lin.role: lin for lin in shape.linears()}


def default_lora_targets(model_type: str) -> tuple[str, ...]:
    """PEFT's default LoRA targets for ``model_type`` (:attr:`Architecture.lora_targets
    <memfit.estimate.arch.Architecture.lora_targets>`); a MemfitError naming --targets where PEFT has none."""
    arch = REGISTRY.get(model_type)
    if arch is None:
        raise MemfitError(f"PEFT has no default LoRA targets for {model_type}: pass --targets q_proj,v_proj "
                          "(or all-linear)")
    return arch.default_lora_targets()


def lora_targets(shape: ModelShape, spec: RunSpec) -> tuple[str, ...]:
    """The target names in effect: ``spec.targets`` or PEFT's default for the architecture."""
    if spec.targets:
        return spec.targets
    return shape.arch.default_lora_targets()


def adapted_linears(shape: ModelShape, spec: RunSpec, *, check: bool = True) -> tuple[Linear, ...]:
    """The block linears that carry a LoRA adapter (empty for ``--method full``), of ``shape.linears()``, less
    ``--exclude-modules``. ``check``: a MemfitError for a target that names no linear of any layer kind (PEFT's
    error) or a fused expert / router; off for one kind of a model whose layers differ (a target may name only
    another kind's)."""
    if not spec.is_adapter:
        return ()
    chosen = _targeted_linears(shape, spec, check=check)
    if not spec.exclude_modules:
        return chosen
    return _exclude(shape, chosen, spec.exclude_modules)


@cache
def _regex_targets(shape: ModelShape, pattern: str) -> tuple[Linear, ...]:
    """PEFT 0.21.2 ``check_target_module_exists`` with a str ``target_modules``: ``re.fullmatch(pattern, key)`` over
    every full module name. The estimate models adapters on block linears, the same in every layer: a pattern that
    matches another module (lm_head, a norm, an attention module) or a linear in some layers only is an error
    naming trace and measure; one that matches nothing is PEFT's "Target modules ... not found"."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise MemfitError(f"--targets-regex {pattern!r}: not a regular expression ({exc})") from exc
    prefix = shape.arch.names.model.layers
    lins = [lin for lin in block_linears(shape) if lin.is_nn_linear]
    keys = {f"{prefix}.{i}.{lin.path}" for lin in lins for i in range(shape.n_layers)}
    other = [k for k in module_names(shape) if k not in keys and rx.fullmatch(k)]
    if other:
        raise MemfitError(f"--targets-regex {pattern!r} matches {', '.join(other[:3])}: memfit estimate models LoRA on "
                          "the blocks' linear layers only; run `memfit trace` or `memfit measure`, which apply PEFT "
                          "itself")
    chosen = []
    for lin in lins:
        hits = {bool(rx.fullmatch(f"{prefix}.{i}.{lin.path}")) for i in range(shape.n_layers)}
        if len(hits) > 1:
            raise MemfitError(f"--targets-regex {pattern!r} adapts {lin.path} in some layers only: memfit estimate "
                              "models the same adapters in every layer; run `memfit trace` or `memfit measure`")
        if hits.pop():
            chosen.append(lin)
    if not chosen:
        raise MemfitError(f"--targets-regex {pattern!r} matches no module of this {shape.model_type} model (PEFT "
                          f"full-matches it against names such as {prefix}.0.{lins[0].path})")
    return tuple(chosen)


def _is_excluded(key: str, exclude: tuple[str, ...]) -> bool:
    """PEFT 0.21.2 ``check_target_module_exists`` with a list ``exclude_modules``: the full module name is one of
    them or ends with ``"." + name``."""
    return key in exclude or any(key.endswith("." + e) for e in exclude)


@cache
def _exclude(shape: ModelShape, chosen: tuple[Linear, ...], exclude: tuple[str, ...]) -> tuple[Linear, ...]:
    """``chosen`` less the linears ``exclude`` names, the same in every layer (the estimate replays one block for
    all): a name that excludes a module in some layers only (``model.layers.0.mlp.down_proj``) is an error naming
    trace and measure, which apply PEFT itself; so is a name no module has (PEFT only warns) and excluding every
    target (PEFT's "All modules were excluded")."""
    names = module_names(shape)
    unknown = [e for e in exclude if not any(_is_excluded(k, (e,)) for k in names)]
    if unknown:
        raise MemfitError(f"--exclude-modules {', '.join(unknown)} matches no module of this {shape.model_type} model "
                          "(PEFT excludes a module whose full name is, or ends with '.' + , a given name): use e.g. "
                          "--exclude-modules k_proj or mlp.down_proj")
    prefix = shape.arch.names.model.layers
    kept = []
    for lin in chosen:
        hits = {_is_excluded(f"{prefix}.{i}.{lin.path}", exclude) for i in range(shape.n_layers)}
        if len(hits) > 1:
            raise MemfitError(f"--exclude-modules {', '.join(exclude)} leaves {lin.path} without an adapter in some "
                              "layers only: memfit estimate models the same adapters in every layer; run "
                              "`memfit trace` or `memfit measure`, which apply PEFT itself")
        if not hits.pop():
            kept.append(lin)
    if chosen and not kept:
        raise MemfitError(f"--exclude-modules {', '.join(exclude)} excludes every LoRA target (PEFT: 'All modules "
                          "were excluded'): exclude fewer modules or change --targets")
    return tuple(kept)


def _targeted_linears(shape: ModelShape, spec: RunSpec, *, check: bool) -> tuple[Linear, ...]:
    if spec.targets_regex:
        return _regex_targets(shape, spec.targets_regex)
    targets = lora_targets(shape, spec)
    lins = block_linears(shape)
    renamed = shape.arch.peft_expert_names
    if targets == (ALL_LINEAR,):
        return tuple(lin for lin in lins if (shape.arch.all_linear_moe or lin.is_nn_linear)
                     and not (lin.is_nn_linear and lin.name in renamed))
    if check:
        _check_targets(shape, targets)
    converted = peft_moe_targets(shape, targets)
    modules = tuple(t for t in targets if t not in converted)
    return tuple(lin for lin in lins if lin.role in converted.values() and not lin.is_nn_linear
                 or any(lin.path == t or lin.path.endswith("." + t) for t in modules))


def peft_moe_targets(shape: ModelShape, targets: tuple[str, ...]) -> dict[str, LinearRole]:
    """The ``--targets`` names PEFT 0.21.2 turns into ``target_parameters`` on this model
    (``peft.utils.transformers_weight_conversion._convert_peft_config_moe``, for the model types transformers maps to
    its mixtral or qwen2_moe pattern: :attr:`Architecture.peft_expert_names <memfit.estimate.arch.Architecture>` and
    ``gate``), with the role of the fused parameter each adapts: a name that is, or ends with ``"." +``, one of them.
    PEFT removes them from ``target_modules``, so no ``nn.Linear`` of that name is adapted (a shared expert's
    gate_proj)."""
    names = shape.arch.peft_expert_names
    if not names:
        return {}
    roles: dict[str, LinearRole] = {names[0]: "experts_gate_up", names[1]: "experts_gate_up",
                                    names[2]: "experts_down", "gate": "router"}
    out: dict[str, LinearRole] = {}
    for t in targets:
        for name, role in roles.items():
            if t == name or t.endswith("." + name):
                out[t] = role
                break
    return out


def _check_targets(shape: ModelShape, targets: tuple[str, ...]) -> None:
    lins = tuple(dict.fromkeys(lin for sub, _ in shape.layer_groups() for lin in block_linears(sub)))
    converted = peft_moe_targets(shape, targets)
    fused = [t for t, role in converted.items() if role == "experts_gate_up"]
    pair = shape.arch.peft_expert_names[:2]
    present = {name for name in pair for t in fused if t == name or t.endswith("." + name)}
    if present and len(present) < 2:
        # PEFT 0.21.2 _convert_peft_config_moe: a ValueError
        raise MemfitError(f"--targets {', '.join(sorted(present))}: PEFT cannot convert it without also targeting "
                          f"{', '.join(sorted(set(pair) - present))} because they are fused into gate_up_proj "
                          f"({shape.model_type}): name both")
    matched: set[str] = set(converted)
    for lin in lins:
        for t in targets:
            if t in converted:
                continue
            if lin.path == t or lin.path.endswith("." + t):
                if not lin.is_nn_linear:
                    raise MemfitError(f"--targets {t} names {lin.path}, which is not an nn.Linear in "
                                      f"{shape.model_type} (fused experts or a router); PEFT cannot adapt it: "
                                      "drop it or use all-linear")
                matched.add(t)
                break
    unknown = [t for t in targets if t not in matched and t not in _TOP_MODULES]
    if unknown:
        names = ", ".join(sorted({lin.name for lin in lins if lin.is_nn_linear}))
        raise MemfitError(f"--targets {', '.join(unknown)} matches no linear layer of {shape.model_type}; "
                          f"its linears are: {names} (or all-linear)")


def lora_rank(lin: Linear, rank: int) -> int:
    """The adapter's inner width on ``lin``: r, r*E on fused experts, 2*r*E on the fused gate_up experts."""
    if lin.experts > 1:
        return rank * lin.experts * (2 if lin.role == "experts_gate_up" else 1)
    return rank


def rank_of(shape: ModelShape, spec: RunSpec, lin: Linear) -> int:
    r"""r on ``lin``: ``spec.rank``, or the value of the first ``rank_pattern`` key that PEFT 0.21.2 matches
    (``peft.utils.other.get_pattern_key``: ``re.match(rf"(.*\.)?({key})$", full_module_name)``)."""
    if not spec.rank_pattern:
        return spec.rank
    return _pattern_rank(shape, spec.rank_pattern, spec.rank, lin)


@cache
def _pattern_rank(shape: ModelShape, pattern: tuple[tuple[str, int], ...], rank: int, lin: Linear) -> int:
    """The same r in every layer, or a MemfitError (the estimate replays one block for all)."""
    prefix = shape.arch.names.model.layers
    ranks = set()
    for i in range(shape.n_layers):
        key, r = f"{prefix}.{i}.{lin.path}", rank
        for pat, value in pattern:
            try:
                hit = re.match(rf"(.*\.)?({pat})$", key)
            except re.error as exc:
                raise MemfitError(f"--rank-pattern {pat}: not a regular expression ({exc})") from exc
            if hit:
                r = value
                break
        ranks.add(r)
    if len(ranks) > 1:
        raise MemfitError(f"--rank-pattern gives {lin.path} ranks {sorted(ranks)} in different layers: memfit estimate "
                          "models the same adapters in every layer; run `memfit trace` or `memfit measure`, which "
                          "apply PEFT itself")
    r = ranks.pop()
    if r != rank and lin.experts > 1:
        raise MemfitError(f"--rank-pattern on {lin.path} (fused experts, adapted through PEFT's target_parameters): "
                          "not modelled by memfit estimate; run `memfit trace` or `memfit measure`")
    return r


def lora_linear_params(lin: Linear, rank: int) -> int:
    """lora_A (r' x in) + lora_B (out x r') with r' = :func:`lora_rank`."""
    return lora_rank(lin, rank) * (lin.in_features + lin.out_features)


def lora_params_per_layer(shape: ModelShape, spec: RunSpec, paths: frozenset[str] | None = None) -> int:
    """r * (in + out) summed over the adapted linears of one block (of ``shape.linears()``'s kind; ``paths``: those
    of them adapted in this layer, under ``--layers-to-transform``), plus out for each with DoRA (its magnitude)."""
    return sum(lora_linear_params(lin, rank_of(shape, spec, lin)) + (lin.out_features if spec.use_dora else 0)
               for lin in adapted_linears(shape, spec, check=False) if paths is None or lin.path in paths)


@dataclass(frozen=True, kw_only=True, slots=True)
class SavedModule:
    """A top-level module whose copy ``--modules-to-save`` trains: its full name and its weight (rows, cols)."""

    path: str
    role: Literal["embed", "head"]
    rows: int
    cols: int
    bias: bool = False  # Phi's lm_head: PEFT's copy trains its bias too

    @property
    def numel(self) -> int:
        return self.rows * self.cols + (self.rows if self.bias else 0)


def _top_modules(shape: ModelShape) -> tuple[str, ...]:
    """The modules outside the decoder blocks, as transformers 5.24 names them (the architecture's
    ``ModelNames.outside``, less a final norm or embedding projections this config does not have)."""
    names = shape.arch.names.model
    absent = set()
    if not shape.final_norm:
        absent.add(names.final_norm)
    if not shape.embed_proj_dim:
        absent.update(names.projections)
    return tuple(n for n in names.outside if n not in absent)


@cache
def module_names(shape: ModelShape) -> tuple[str, ...]:
    """Every module name of the model transformers builds (``named_modules(remove_duplicate=False)`` without the
    root), the names PEFT matches ``modules_to_save`` against."""
    kinds = {sub: sorted(_block_modules(sub) | {""}) for sub, _ in shape.layer_groups()}
    prefix = shape.arch.names.model.layers
    layers = [f"{prefix}.{i}{'.' + p if p else ''}" for i in range(shape.n_layers) for p in kinds[shape.layer_shape(i)]]
    return _top_modules(shape) + tuple(layers)


def _block_modules(shape: ModelShape) -> set[str]:
    """The module names inside one block of ``shape``'s (uniform) kind; a MoE model's dense-MLP layers have the
    architecture's ``dense_extras`` as their parameter-free submodules."""
    block: set[str] = set()
    params = {lin.path for lin in block_linears(shape) if lin.experts > 1}  # fused experts: parameters of mlp.experts
    for path in [lin.path for lin in block_linears(shape)] + [n.path for n in shape.norms()]:
        parts = path.split(".")
        for i in range(1, len(parts) + (0 if path in params else 1)):
            block.add(".".join(parts[:i]))
    names = shape.arch.names.block
    block.update(names.dense_extras if shape.layout.moe is not None and not shape.is_moe else names.extras)
    return block


def embedding_modules(shape: ModelShape) -> tuple[SavedModule, SavedModule]:
    """The token embedding and the output layer: the modules the estimate models under ``--modules-to-save``."""
    names = shape.arch.names.model
    return (SavedModule(path=names.embed, role="embed", rows=shape.vocab, cols=shape.embed_dim),
            SavedModule(path=names.head, role="head", rows=shape.vocab, cols=shape.embed_dim,
                        bias=shape.layout.head_bias))


def unknown_modules_message(unknown: list[str], model_type: str, examples: list[str]) -> str:
    """The one message for ``--modules-to-save`` names no module has (estimate, trace and measure alike)."""
    leaves = ",".join(e.rsplit(".", 1)[-1] for e in examples)
    return (f"--modules-to-save {', '.join(unknown)} matches no module of this {model_type} model (PEFT trains a "
            f"copy of each module whose name ends with the given name, and silently none when nothing matches; "
            f"its embedding and output layer are {', '.join(examples)}): use e.g. --modules-to-save {leaves}")


def check_modules_to_save(shape: ModelShape, spec: RunSpec) -> None:
    """A MemfitError for ``--modules-to-save`` names that match no module of the model (what trace and measure
    check before building it; they run every name that does match, through PEFT)."""
    if spec.is_adapter and spec.modules_to_save:
        _check_names(shape, spec.modules_to_save)


@cache
def _check_names(shape: ModelShape, requested: tuple[str, ...]) -> None:
    names = module_names(shape)
    unknown = [m for m in requested if not any(k.endswith(m) for k in names)]
    if unknown:
        raise MemfitError(unknown_modules_message(unknown, shape.model_type,
                                                  [m.path for m in embedding_modules(shape)]))


@cache
def _saved_modules(shape: ModelShape, requested: tuple[str, ...]) -> tuple[SavedModule, ...]:
    _check_names(shape, requested)
    modelled = {m.path: m for m in embedding_modules(shape)}
    names = module_names(shape)
    out: dict[str, SavedModule] = {}
    for m in requested:
        matches = [k for k in names if k.endswith(m)]
        other = [k for k in matches if k not in modelled]
        if other:
            more = f" and {len(other) - 3} more" if len(other) > 3 else ""
            raise MemfitError(f"--modules-to-save {m} matches {', '.join(other[:3])}{more}: memfit estimate models "
                              f"trained copies of {' and '.join(modelled)} only; name those, or run `memfit trace` "
                              "or `memfit measure`, which apply PEFT itself")
        out.update((k, modelled[k]) for k in matches)
    return tuple(out.values())


def saved_modules(shape: ModelShape, spec: RunSpec) -> tuple[SavedModule, ...]:
    """The modules whose copies ``--modules-to-save`` trains, resolved as PEFT resolves the names (module
    docstring). A MemfitError for a name no module has, or one matching a module the estimate does not model."""
    if not spec.is_adapter or not spec.modules_to_save:
        return ()
    return _saved_modules(shape, spec.modules_to_save)


def modules_to_save_params(shape: ModelShape, spec: RunSpec) -> int:
    """Parameters of the trained copies of ``--modules-to-save`` (token embedding: V*h; output layer: V*h)."""
    return sum(m.numel for m in saved_modules(shape, spec))
