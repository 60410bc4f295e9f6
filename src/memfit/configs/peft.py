"""PEFT's ``adapter_config.json`` (PEFT 0.21.2: ``LoraConfig.to_dict()``, ``peft/tuners/lora/config.py``).

``r`` 8, ``lora_alpha`` 8, ``lora_dropout`` 0.0, ``target_modules`` None (PEFT's default for the
architecture); a *string* ``target_modules`` other than ``all-linear`` is a regular expression PEFT
full-matches against module names (``check_target_module_exists``): the ``targets_regex`` setting.
"""

from __future__ import annotations

from memfit.configs.document import Document
from memfit.configs.reading import FileReading, Reader, dora, names
from memfit.configs.schema import load_schema
from memfit.estimate.spec import parse_layers, parse_rank_pattern, parse_token_indices

NOT_MODELLED = {
    "target_parameters": "LoRA on parameters (MoE expert weights)",
    "lora_bias": "a trained bias on lora_B",
    "layer_replication": "replicated layers",
    "use_qalora": "QA-LoRA pooling",
    "use_bdlora": "block-diagonal LoRA",
    "alora_invocation_tokens": "activated LoRA",
}


def read_peft(doc: Document) -> FileReading:
    peft_type = str(doc.data.get("peft_type") or "LORA").upper()
    if peft_type != "LORA":
        r = Reader(doc, "peft", load_schema("peft"), data={}, label="PEFT")
        r.row("peft_type", "NOT MODELLED", value=doc.data.get("peft_type"),
               note=f"a {peft_type} adapter: memfit models LoRA; its fields are not read")
        return r.finish()
    r = Reader(doc, "peft", load_schema("peft"), label="PEFT")
    r.model("base_model_name_or_path")
    r.set("adapter", "lora", "peft_type")
    r.set("rank", r.get("r"), "r")
    r.set("alpha", r.get("lora_alpha"), "lora_alpha")
    r.set("lora_dropout", float(r.get("lora_dropout") or 0.0), "lora_dropout")
    targets = r.get("target_modules")
    if isinstance(targets, str) and targets != "all-linear":
        r.set("targets_regex", targets, "target_modules", note="a regular expression PEFT full-matches against module "
                                                              "names")
    elif targets:
        t = names(targets if isinstance(targets, list) else [targets])
        r.set("targets", ("all-linear",) if t == ("all-linear",) else t, "target_modules")
    else:
        r.set("targets", (), "target_modules", memfit_value="PEFT's default for the architecture")
    if r.get("modules_to_save"):
        r.set("modules_to_save", names(r.get("modules_to_save")), "modules_to_save")
    if r.get("bias") in ("all", "lora_only"):
        r.set("bias", r.get("bias"), "bias")
    elif r.get("bias") not in (None, "none"):
        r.not_modelled("bias", f"bias={r.get('bias')!r}: not a PEFT LoRA bias mode", active=lambda v: True)
    dora(r, "use_dora")
    if r.get("rank_pattern", None):
        r.set("rank_pattern", parse_rank_pattern(r.get("rank_pattern")), "rank_pattern")
    else:
        r.ignore("rank_pattern", "none")
    exclude = r.get("exclude_modules", None)
    if isinstance(exclude, str):
        r.not_modelled("exclude_modules", "a regular expression over module names: pass --exclude-modules with the "
                                          "names it matches", active=lambda v: True)
    elif exclude:
        r.set("exclude_modules", names(exclude), "exclude_modules")
    else:
        r.ignore("exclude_modules", "none")
    layers = r.get("layers_to_transform", None)
    if layers is not None and layers != []:
        r.set("layers_to_transform", parse_layers(layers), "layers_to_transform")
        pattern = r.get("layers_pattern", None)
        if pattern:
            r.set("layers_pattern", names(pattern if isinstance(pattern, list) else [pattern]), "layers_pattern")
        else:
            r.ignore("layers_pattern", "none: the first numbered name (PEFT)")
    else:
        r.ignore("layers_to_transform", "none: every layer")
        r.ignore("layers_pattern", "used only with layers_to_transform")
    tokens = r.get("trainable_token_indices", None)
    if isinstance(tokens, dict):  # {module name: ids}: the embedding's own name only (the estimate models it)
        r.not_modelled("trainable_token_indices", "rows of a named module: pass --trainable-tokens with the input "
                                                  "embedding's ids", active=lambda v: True)
    elif tokens:
        r.set("trainable_token_indices", parse_token_indices(tokens), "trainable_token_indices")
    else:
        r.ignore("trainable_token_indices", "none")
    for name, why in NOT_MODELLED.items():
        r.not_modelled(name, why)
    r.ignore("alpha_pattern", "alphas: no memory effect")
    r.ignore("inference_mode", "true in a saved adapter; training makes it trainable")
    return r.finish()
