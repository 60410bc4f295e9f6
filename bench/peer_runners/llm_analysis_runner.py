"""llm-analysis's training analysis through its Python API (llm-analysis 0.2.2).

``LLMAnalysis(model_config, gpu_config, dtype_config).training(...)`` returns a summary dict; the figure
compared is ``(weight+op_state+grad+act)_memory_per_gpu``. The model config is built field by field
from the row's config (``ModelConfig``: layers, heads, kv heads, hidden, FFN width, vocabulary, maximum
sequence, experts), not through ``get_model_config_from_hf``, which reads only layers/heads/hidden/vocab
and assumes an FFN of 4 x hidden. The GPU's memory is set to 10^6 GB so the tool's batch-size check
(``batch_size_per_gpu <= max_batch_size_per_gpu``, an assertion) never refuses a row; the figure does
not depend on it. Options come from bench/peers.py (``llm_analysis_options``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from _protocol import serve


def one_row(row: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    from llm_analysis.analysis import ActivationRecomputation, LLMAnalysis
    from llm_analysis.config import DtypeConfig, ModelConfig, get_gpu_config_by_name
    from llm_analysis.logger import logger

    logger.setLevel(logging.ERROR)
    opts = row["options"]
    gpu = dataclasses.replace(get_gpu_config_by_name("a100-sxm-80gb"), name="unbounded", mem_per_GPU_in_GB=1e6)
    analysis = LLMAnalysis(ModelConfig(**opts["model"]), gpu, DtypeConfig(**opts["dtype"]))
    training = dict(opts["training"])
    training["activation_recomputation"] = ActivationRecomputation[training["activation_recomputation"]]
    summary = analysis.training(**training)
    keep = ("weight_memory_per_gpu", "gradient_memory_per_gpu", "optimizer_state_memory_per_gpu",
            "activation_memory_per_gpu", "activation_memory_embedding_output_per_gpu", "num_params_total")
    return int(summary["(weight+op_state+grad+act)_memory_per_gpu"]), {k: summary[k] for k in keep}


def warm() -> None:
    import llm_analysis.analysis  # noqa: F401


if __name__ == "__main__":
    serve(("llm-analysis", "transformers", "huggingface-hub"), one_row, warm)
