"""Third-party noise on stderr: what the libraries behind trace and measure print while they import.

- bitsandbytes (imported by PEFT whenever it is installed) logs through ``logging`` at import, e.g.
  ``Failed to load CPU gemm_4bit_forward from kernels-community`` from ``bitsandbytes.backends.cpu.ops``
  (bitsandbytes 0.50, on a CPU with AVX512-BF16 and without the ``kernels`` package), and its CUDA-setup
  diagnostics from ``bitsandbytes.cextension``: all under the ``bitsandbytes`` logger.
- transformers warns about config fields that do not matter to memory (``Model config: bos_token_id must
  be None or an integer within the vocabulary``, for a small config built from a large model's) through its
  own logger, whose level it takes from ``TRANSFORMERS_VERBOSITY`` when it first configures it.

:func:`quiet_third_party` raises those loggers to ERROR (errors still show) unless ``--verbose``.
"""

from __future__ import annotations

import logging
import os
import sys


def quiet_third_party(verbose: bool = False) -> None:
    """Silence third-party warnings on stderr for this process (and the measure workers it starts)."""
    if verbose:
        return
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers sets up its logger
    if "transformers" in sys.modules:  # already set up: set it directly
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
