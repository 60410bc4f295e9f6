#!/usr/bin/env bash
# One GPU-machine session for everything CUDA in memfit (run from the repo root on the device machine):
#   1. the agreement matrix on CUDA: full-size catalogue models, two real training steps each
#      (bench/agreement.py --cuda-measure), written to $OUT/agreement_cuda.json as each row finishes;
#   2. every CUDA-marked test;
#   3. bench/gpu_check.sh's measure sweep (checkpointing trade, max-batch bisection);
#   4. the caching-allocator replay (memfit.estimate.allocator) against torch.cuda.max_memory_reserved, with
#      torch's defaults and expandable_segments:True (bench/allocator_cuda.py -> $OUT/allocator_cuda.json);
#   5. --offload-activations: TRL's own OffloadActivations (streams on and off) and memfit's copy of its rule against
#      the estimate (bench/act_offload_cuda.py -> $OUT/act_offload_cuda.json).
# Wheels of the exact transformers/peft versions the CPU side uses may be carried in .whl/.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/memfit_gpu}; mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, torch.cuda.get_device_name(0))"
echo "== 1. agreement matrix on CUDA"
timeout 300 python3 bench/agreement.py --cuda-measure "$OUT/agreement_cuda.json" 2>&1 | grep -v -i warning | tee "$OUT/agreement_cuda.log"
echo "== 2. CUDA tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda -o addopts="" tests/measure tests/estimate/test_agreement_cuda.py \
  tests/trace tests/data/with_torch/test_collator.py 2>&1 | tail -40 | tee "$OUT/cuda_tests.log"
echo "== 3. measure sweep"
timeout 120 bash bench/gpu_check.sh 2>&1 | tail -40 | tee "$OUT/gpu_check.log"
echo "== 4. caching-allocator replay vs torch.cuda.memory_reserved"
timeout 420 python3 bench/allocator_cuda.py "$OUT/allocator_cuda.json" 2>&1 | grep -v -i warning | tail -20 \
  | tee "$OUT/allocator_cuda.log"
echo "== 5. --offload-activations: TRL's OffloadActivations vs memfit's rule and estimate"
timeout 240 python3 bench/act_offload_cuda.py "$OUT/act_offload_cuda.json" 2>&1 | grep -v -i warning | tail -10 \
  | tee "$OUT/act_offload_cuda.log"
