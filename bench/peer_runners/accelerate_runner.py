"""accelerate's ``accelerate estimate-memory``, through its own Python functions (accelerate 1.15.0).

What the command does (accelerate/commands/estimate.py): ``gather_data`` builds the model with
``AutoModel.from_config(config, torch_dtype=float32)`` under ``init_empty_weights`` (the meta device: no
memory), sums the parameter and buffer sizes (``calculate_maximum_sizes``), and for each ``--dtypes``
entry reports the load size and "Training using Adam" = ``max(estimate_training_usage(size, dtype))``:
for float32 the ``step`` entry, 4 x the fp32 size (weights + gradients + two Adam moments); for float16
the ``optimizer`` entry, 2 x the fp32 size. No batch, sequence, LoRA, checkpointing: no activations.

The only thing replaced is ``verify_on_hub``: before building, accelerate asks the Hub for the repo's
metadata (``huggingface_hub.model_info``), which offline raises, so it is answered with what the Hub
would say for a transformers repo (``library_name="transformers"``, ``config`` = the cached config.json).
The config itself comes from the local Hugging Face cache (``AutoConfig.from_pretrained(repo_id)``).
"""

from __future__ import annotations

import argparse
import types
from typing import Any

from _protocol import serve


def one_row(row: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    from accelerate.commands import estimate

    config = row["config"]
    estimate.verify_on_hub = lambda repo, token=None: types.SimpleNamespace(library_name="transformers",
                                                                             config=config)
    args = argparse.Namespace(model_name=row["repo_id"], library_name=None, dtypes=[row["options"]["dtype"]],
                              trust_remote_code=False)
    dtype, largest_layer, total_size, training = estimate.gather_data(args)[0]
    figure = max(training.values())
    if figure == -1:
        raise ValueError(f"no training figure for dtype {dtype}")
    return int(figure), {"dtype": dtype, "load_bytes": int(total_size), "largest_layer_bytes": int(largest_layer),
                         "training": {k: int(v) for k, v in training.items()}}


def warm() -> None:
    import accelerate.commands.estimate  # noqa: F401
    import transformers  # noqa: F401


if __name__ == "__main__":
    serve(("accelerate", "transformers", "torch", "huggingface_hub"), one_row, warm)
