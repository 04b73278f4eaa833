"""make_repo.py EMITTED_TRITON_DIR TINY_MODEL_DIR OUT_REPO

Copies the Triton model repository that mlinfra-compile emitted (triton/<model>/config.pbtxt +
1/model.json) to OUT_REPO, keeping config.pbtxt byte for byte, and swaps in model.json only what a
CPU-only machine with a tiny model needs:
  model / served_model_name -> the tiny local model (HF_HUB_OFFLINE: nothing is downloaded)
  max_model_len, max_num_batched_tokens -> 256 (the tiny model has 512 positions)
  gpu_memory_utilization -> 0.1 (on vLLM's CPU backend this is the share of HOST memory)
  enforce_eager -> true (no torch.compile warm-up on 2 cores)
Every other engine argument the compiler wrote (dtype, kv_cache_dtype, enable_prefix_caching,
max_num_seqs, tensor/pipeline_parallel_size, shutdown_timeout ...) is kept and reaches vLLM for real.
"""

import json
import os
import shutil
import sys

src, tiny, out = sys.argv[1:4]
models = [d for d in os.listdir(src) if os.path.isfile(os.path.join(src, d, "config.pbtxt"))]
assert len(models) == 1, models
name = models[0]
shutil.rmtree(out, ignore_errors=True)
shutil.copytree(os.path.join(src, name), os.path.join(out, name))
mj = os.path.join(out, name, "1", "model.json")
eng = json.load(open(mj))
eng.update(
    model=os.path.abspath(tiny),
    served_model_name="tiny-llama",
    max_model_len=256,
    max_num_batched_tokens=256,
    gpu_memory_utilization=0.1,
    enforce_eager=True,
)
json.dump(eng, open(mj, "w"), indent=2, sort_keys=True)
print(name)
