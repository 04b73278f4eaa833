"""An FSDP training step for the launch kind accelerate (tests/test_launch_real.py), on CPU.

`accelerate launch --config_file fsdp/accelerate_config.yaml` reads the generated file and hands the workers its FSDP
settings in the environment; accelerate's own FullyShardedDataParallelPlugin reads them back here, exactly as the
Accelerator does. The Accelerator itself refuses FSDP without a device (accelerate 1.15: "no available devices"), so
this script does what Accelerator.prepare_model does for fsdp_version 1 (accelerate/accelerator.py: the same FSDP
keyword arguments, the same activation-checkpoint wrapper), with the CPU as the device and gloo (sync_module_states, which
FSDP1 refuses on the CPU, done by a broadcast from rank 0 before wrapping): one optimizer step of
grad_accum micro-batches of a tiny random 2-layer Llama, then the plugin's state-dict type for a
torch.distributed.checkpoint save into the checkpoint directory. One line per rank says what FSDP ran with:

    FSDP_PROBE {"sharding_strategy": ..., "mixed_precision": {...}, "activation_checkpointing": ..., ...}

MLINFRA_PROBE_MODE=signal: the accelerate contract of the generated launch/mlinfra_signal.py (on the launcher's
PYTHONPATH): optimizer steps until CheckpointSignal.agreed() (after the first, `FSDP_PROBE_STEP {...}` per rank), then
the save into step-N, as an accelerate loop calls accelerator.save_state there.
"""

import functools
import gc
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from accelerate.utils import FullyShardedDataParallelPlugin
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    CheckpointWrapper,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from transformers import LlamaConfig, LlamaForCausalLM

SEQ_LEN, VOCAB = 16, 128


def report(row: dict) -> None:
    sys.stdout.write("FSDP_PROBE " + json.dumps(row, sort_keys=True) + "\n")  # one write: ranks share stdout
    sys.stdout.flush()


def broadcast_from_rank_0(model: torch.nn.Module) -> None:
    """sync_module_states on the CPU: FSDP1 refuses it there ("requires them to be on GPU"), so rank 0's parameters and
    buffers are broadcast here before wrapping, as FSDP would (ranks started on the meta device materialise first)."""
    if any(t.is_meta for t in [*model.parameters(), *model.buffers()]):
        model.to_empty(device=torch.device("cpu"))
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src=0)


def wrap(model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin) -> FSDP:
    """Accelerator.prepare_model's FSDP1 branch with the CPU as device_id (sync_module_states done before, see above)."""
    plugin.set_auto_wrap_policy(model)
    if plugin.sync_module_states:
        broadcast_from_rank_0(model)
    model = FSDP(
        model,
        sharding_strategy=plugin.sharding_strategy or plugin.reshard_after_forward,
        cpu_offload=plugin.cpu_offload,
        auto_wrap_policy=plugin.auto_wrap_policy,
        mixed_precision=plugin.mixed_precision_policy,
        sync_module_states=False,
        backward_prefetch=plugin.backward_prefetch,
        forward_prefetch=plugin.forward_prefetch,
        use_orig_params=plugin.use_orig_params,
        ignored_modules=plugin.ignored_modules,
        limit_all_gathers=plugin.limit_all_gathers,
        device_id=torch.device("cpu"),
    )
    if plugin.activation_checkpointing:
        apply_activation_checkpointing(
            model,
            auto_wrap_policy=plugin.auto_wrap_policy,
            checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
        )
    return model


def env_flag(name: str) -> bool:
    return os.environ.get(name, "false").lower() == "true"


def plugin_from_launch_environment() -> FullyShardedDataParallelPlugin:
    """accelerate's own plugin from the FSDP_* environment that accelerate launch set from the config file, and the
    mixed precision as AcceleratorState sets it. With sync_module_states the plugin looks for a GPU (to build its
    param_init_fn there) and raises without one: it is built with that switch (and cpu_ram_efficient_loading, which
    forces it) off, then given the launch values back; wrap() does the sync on the CPU."""
    sync, efficient = env_flag("FSDP_SYNC_MODULE_STATES"), env_flag("FSDP_CPU_RAM_EFFICIENT_LOADING")
    os.environ["FSDP_SYNC_MODULE_STATES"] = os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "false"
    plugin = FullyShardedDataParallelPlugin()
    os.environ["FSDP_SYNC_MODULE_STATES"], os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = (
        str(sync).lower(),
        str(efficient).lower(),
    )
    plugin.sync_module_states, plugin.cpu_ram_efficient_loading = sync, efficient
    plugin.set_mixed_precision(os.environ["ACCELERATE_MIXED_PRECISION"])
    return plugin


def full_weights_checksum(model: FSDP) -> float:
    with FSDP.summon_full_params(model):
        return float(sum(p.detach().float().sum() for p in model.parameters()))


def main() -> None:
    dist.init_process_group(backend="gloo")
    plugin = plugin_from_launch_environment()
    micro, accum = int(os.environ["MLINFRA_MICRO_BATCH"]), int(os.environ["MLINFRA_GRAD_ACCUM"])
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQ_LEN,
    )
    if plugin.cpu_ram_efficient_loading and dist.get_rank() > 0:  # as from_pretrained loads it: weights on rank 0 only,
        with torch.device("meta"):  # the others materialise empty parameters and receive rank 0's (sync_module_states)
            raw = LlamaForCausalLM(config)
    else:
        raw = LlamaForCausalLM(config)
    started_on_meta = any(p.is_meta for p in raw.parameters())
    model = wrap(raw, plugin)
    checksums = [None] * dist.get_world_size()
    dist.all_gather_object(checksums, full_weights_checksum(model))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stop = None
    if os.environ.get("MLINFRA_PROBE_MODE") == "signal":
        from mlinfra_signal import CheckpointSignal  # the generated module, from the launcher's PYTHONPATH

        stop = CheckpointSignal()
    steps, seen = 0, 0
    while True:
        for i in range(accum):  # one optimizer step of `accum` micro-batches
            ids = torch.randint(0, VOCAB, (micro, SEQ_LEN))
            seen += ids.shape[0] if steps == 0 else 0
            with model.no_sync() if i < accum - 1 else torch.enable_grad():
                (model(input_ids=ids, labels=ids).loss / accum).backward()
        opt.step()
        opt.zero_grad()
        steps += 1
        if stop is None:
            break
        if steps == 1:
            sys.stdout.write("FSDP_PROBE_STEP " + json.dumps({"rank": dist.get_rank()}) + "\n")
            sys.stdout.flush()
        if stop.agreed(torch.device("cpu")):  # accelerate: stop.agreed(accelerator.device), then accelerator.save_state
            break
    total = torch.tensor([seen])
    dist.all_reduce(total)
    ckpt = os.environ["MLINFRA_CHECKPOINT_DIR"]
    with FSDP.state_dict_type(model, plugin.state_dict_type, plugin.state_dict_config, plugin.optim_state_dict_config):
        state = {"model": model.state_dict()}
        dcp.save(state, checkpoint_id=os.path.join(ckpt, f"step-{steps}"))
    policy = plugin.mixed_precision_policy
    row = {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "micro_batch": micro,
        "grad_accum": accum,
        "global_batch": int(total.item()),
        "checkpoint_dir": ckpt,
        "sharding_strategy": model.sharding_strategy.name,
        "fsdp_units": sum(isinstance(m, FSDP) for m in model.modules()),
        "mixed_precision": {k: str(getattr(policy, k)) for k in ("param_dtype", "reduce_dtype", "buffer_dtype")}
        if policy
        else None,
        "activation_checkpointing": any(isinstance(m, CheckpointWrapper) for m in model.modules()),
        "state_dict_type": plugin.state_dict_type.name,
        "cpu_offload": bool(plugin.cpu_offload.offload_params),
        "use_orig_params": plugin.use_orig_params,
        "sync_module_states": plugin.sync_module_states,
        "backward_prefetch": plugin.backward_prefetch.name if plugin.backward_prefetch else None,
        "forward_prefetch": plugin.forward_prefetch,
        "cpu_ram_efficient_loading": plugin.cpu_ram_efficient_loading,
        "started_on_meta": started_on_meta,
        "weights_equal_across_ranks": len(set(checksums)) == 1,
        "saved": sorted(os.listdir(os.path.join(ckpt, f"step-{steps}"))) if dist.get_rank() == 0 else [],
        "optimizer_steps": steps,
        "signal": stop.received if stop else None,
    }
    report(row)
    del model, raw, opt, state
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
