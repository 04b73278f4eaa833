"""The probe's own FSDP1 path (compiler/runtime/probe_model.py) on CPU, gloo: a tiny Llama from plan.json (in the
working folder), PEFT's LoRA or full training, wrapped as Accelerate's FSDP1 plugin configures it (FSDP_* environment,
fsdp1_on_cpu), one optimizer step, then what trainable_count says on this rank. One line per rank and case:

    FSDP1_TRAINABLE {"rank": ..., "case": ..., "use_orig_params": ..., "trainable_parameters": ...}

Run under torchrun with the cases as arguments, each METHOD:USE_ORIG_PARAMS (lora:true full:true lora:false).
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compiler" / "runtime"))
import probe_model  # noqa: E402  (the probe's node script, beside probe_train.py on the node)


def one_case(plan: dict, case: str) -> dict:
    from accelerate.utils import FullyShardedDataParallelPlugin

    method, orig = case.split(":")
    lora = plan["spec"]["train"]["lora"]
    os.environ.pop("MLINFRA_LORA_RANK", None)
    if method == "lora":
        os.environ.update(
            MLINFRA_LORA_RANK=str(lora["rank"]),
            MLINFRA_LORA_ALPHA=str(lora["alpha"]),
            MLINFRA_LORA_TARGETS=",".join(lora["targets"]),
        )
    os.environ.update(FSDP_USE_ORIG_PARAMS=orig, FSDP_AUTO_WRAP_POLICY="TRANSFORMER_BASED_WRAP")
    plugin = FullyShardedDataParallelPlugin()
    model = probe_model.fsdp1_on_cpu(probe_model.with_adapters(probe_model.llama(plan)), plugin, False, False)
    optimizer = torch.optim.AdamW(probe_model.trainable(model), lr=1e-3)
    batch = torch.randint(0, plan["model"]["architecture"]["vocab"], (1, 16))
    model(input_ids=batch, labels=batch).loss.backward()
    optimizer.step()
    return {
        "rank": dist.get_rank(),
        "case": case,
        "use_orig_params": model._use_orig_params,
        "trainable_parameters": probe_model.trainable_count(model),
    }


def main() -> None:
    dist.init_process_group(backend="gloo")
    plan = json.loads(Path("plan.json").read_text())
    for case in sys.argv[1:]:
        row = one_case(plan, case)
        sys.stdout.write("FSDP1_TRAINABLE " + json.dumps(row, sort_keys=True) + "\n")  # one write: ranks share stdout
        sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
