"""The model a probe job trains (probe_train.py beside it imports this file): the job's architecture as a transformers
Llama with random weights on the device, QLoRA's NF4 base, LoRA's adapters as the launcher exports them, what the
optimizer steps, and Accelerate's FSDP1 wrapping on a CPU."""

import os

import torch

DEVICE = (
    torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if torch.cuda.is_available() else torch.device("cpu")
)


def llama(plan, device=DEVICE):
    """The job's architecture as a transformers Llama (random weights), built on `device` (meta: no storage yet)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    arch = plan["model"]["architecture"]
    head_dim = arch["head_dim"] or arch["hidden"] // arch["heads"]
    config = LlamaConfig(
        vocab_size=arch["vocab"],
        hidden_size=arch["hidden"],
        intermediate_size=arch["ffn_hidden"] or arch["moe_ffn_hidden"],
        num_hidden_layers=arch["layers"],
        num_attention_heads=arch["heads"],
        num_key_value_heads=arch["kv_heads"],
        head_dim=head_dim,
        max_position_embeddings=max(plan["training"]["seq_len"], 1),
        rms_norm_eps=arch["norm_eps"],
        tie_word_embeddings=arch["tied_embeddings"],
        use_cache=False,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):  # built where it trains: no host-side initialisation of the weights
        return LlamaForCausalLM(config)


def compute_dtype():
    """The plan's precision as the launcher exports it (MLINFRA_PRECISION): bf16, fp16, else fp32."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(os.environ.get("MLINFRA_PRECISION"), torch.float32)


def random_init(name, tensor):
    """A random weight in place, by its parameter's name: norms 1, LoRA's B 0, the rest N(0, 0.02) (LlamaConfig's
    initializer_range)."""
    if "norm" in name:
        tensor.fill_(1.0)
    elif "lora_B" in name:
        tensor.zero_()
    else:
        tensor.normal_(0.0, 0.02)


def materialise(model, device):
    """A model built on the meta device and sharded (each rank holds its shards only, as the plan's job loads them),
    given storage on `device` and random weights (random_init, shard by shard); the rotary tables, buffers a meta build
    leaves empty, rebuilt."""
    model.to_empty(device=device)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            random_init(name, parameter.to_local() if hasattr(parameter, "to_local") else parameter)
    return rebuilt_rotary(model, device)


def rebuilt_rotary(model, device):
    """The rotary tables (buffers computed at construction) rebuilt on `device`: a meta build leaves them empty."""
    for name, module in list(model.named_modules()):
        if name.endswith("rotary_emb"):
            with torch.device(device):
                model.set_submodule(name, type(module)(config=module.config))
    return model


def base_model(plan):
    """The job's base model on the device: QLoRA's NF4 base for a qlora plan, else the full-precision Llama."""
    return quantised_llama(plan, DEVICE) if os.environ.get("MLINFRA_LORA_METHOD") == "qlora" else llama(plan)


# train.lora's targets as the transformers Llama names its projections (compiler/deployment/lora_tp.py LORA_MODULES)
LORA_TARGET_MODULES = {t: f"{t}_proj" for t in ("q", "k", "v", "o", "gate", "up", "down")}


def quant_storage():
    """The dtype the NF4 bytes are packed in: the launcher's MLINFRA_LORA_QUANT_STORAGE (QLoRA under FSDP, which
    shards float tensors only), else bitsandbytes' uint8."""
    name = os.environ.get("MLINFRA_LORA_QUANT_STORAGE")
    return getattr(torch, name) if name else torch.uint8


def quantised_llama(plan, device):
    """QLoRA's base (Dettmers et al. 2023, §2): every linear layer of the blocks NF4 with double quantisation
    (bitsandbytes Linear4bit, compress_statistics), computing in the plan's precision; the embeddings, norms and head
    in full precision, or in the NF4 storage dtype under FSDP (PEFT's FSDP-QLoRA loads the model in it: one dtype per
    flat parameter). Built on the meta device, each linear quantised from its own random draw on `device`: no
    unquantised copy of the model is ever held."""
    import bitsandbytes as bnb

    dtype, storage = compute_dtype(), quant_storage()
    model = llama(plan, torch.device("meta"))
    for block in model.model.layers:
        for name, linear in list(block.named_modules()):
            if isinstance(linear, torch.nn.Linear):
                nf4 = bnb.nn.Linear4bit(
                    linear.in_features,
                    linear.out_features,
                    bias=False,
                    compute_dtype=dtype,
                    compress_statistics=True,
                    quant_type="nf4",
                    quant_storage=storage,
                    device="meta",
                )
                draw = torch.empty(linear.out_features, linear.in_features, dtype=dtype, device=device).normal_(0, 0.02)
                nf4.weight = bnb.nn.Params4bit(  # module: FSDP's flat views lose quant_state, the layer restores it
                    draw,
                    requires_grad=False,
                    compress_statistics=True,
                    quant_type="nf4",
                    quant_storage=storage,
                    module=nf4,
                )
                block.set_submodule(name, nf4.to(device))  # .to quantises
    rest = torch.float32 if storage == torch.uint8 else storage
    for owner, module in list(model.named_modules()):  # the rest on the device (random_init)
        for name, parameter in list(module.named_parameters(recurse=False)):
            if parameter.is_meta:
                tensor = torch.empty(parameter.shape, device=device, dtype=rest)
                random_init(f"{owner}.{name}", tensor)
                module.register_parameter(name, torch.nn.Parameter(tensor))
    return rebuilt_rotary(model, device)


def with_adapters(model):
    """The launcher's LoRA (MLINFRA_LORA_*, absent for full training) as PEFT injects it: rank r, alpha, no dropout
    (PEFT's default, as fsdp/lora_tp.py), lora_B zero; only the adapters train."""
    rank = os.environ.get("MLINFRA_LORA_RANK")
    if not rank:
        return model
    from peft import LoraConfig, inject_adapter_in_model

    targets = [LORA_TARGET_MODULES[t] for t in os.environ["MLINFRA_LORA_TARGETS"].split(",")]
    config = LoraConfig(r=int(rank), lora_alpha=float(os.environ["MLINFRA_LORA_ALPHA"]), target_modules=targets)
    model = inject_adapter_in_model(config, model)
    for name, parameter in model.named_parameters():
        parameter.requires_grad = "lora_" in name
    return model


def peft_wrap_policy(plugin, model):
    """LoRA with fsdp_use_orig_params false (QLoRA): PEFT's fsdp_auto_wrap_policy, as its FSDP guide sets it, so the
    adapters sit in FSDP units of their own (a flat parameter is all trainable or all frozen)."""
    if os.environ.get("MLINFRA_LORA_RANK") and not plugin.use_orig_params:
        from peft.utils.other import fsdp_auto_wrap_policy

        plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)


def fsdp1_on_cpu(model, plugin, mixed, synced):
    """Accelerator.prepare_model's FSDP1 branch (accelerate 1.15) with the CPU as device: the same FSDP arguments and
    activation-checkpoint wrapper, the trainable flat parameters upcast to fp32 under mixed precision; sync_module_states,
    which FSDP1 refuses on a CPU, a broadcast from rank 0 before wrapping."""
    import functools

    import torch.distributed as dist
    from torch.distributed.algorithms._checkpoint import checkpoint_wrapper as ac
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    peft_wrap_policy(plugin, model)
    plugin.set_auto_wrap_policy(model)
    for tensor in [*model.parameters(), *model.buffers()] if synced else ():
        dist.broadcast(tensor.data, src=0)
    model = FSDP(
        model,
        sharding_strategy=plugin.sharding_strategy or plugin.reshard_after_forward,
        cpu_offload=plugin.cpu_offload,
        auto_wrap_policy=plugin.auto_wrap_policy,
        mixed_precision=plugin.mixed_precision_policy,
        backward_prefetch=plugin.backward_prefetch,
        forward_prefetch=plugin.forward_prefetch,
        use_orig_params=plugin.use_orig_params,
        limit_all_gathers=plugin.limit_all_gathers,
        device_id=torch.device("cpu"),
    )
    if plugin.activation_checkpointing:
        wrapper = functools.partial(ac.checkpoint_wrapper, checkpoint_impl=ac.CheckpointImpl.NO_REENTRANT)
        ac.apply_activation_checkpointing(
            model, checkpoint_wrapper_fn=wrapper, auto_wrap_policy=plugin.auto_wrap_policy
        )
    for unit in FSDP.fsdp_modules(model) if mixed else ():
        if unit._has_params and unit._flat_param.requires_grad and unit._flat_param.dtype != torch.float32:
            unit._flat_param.data = unit._flat_param.data.to(torch.float32)
            unit._handle._orig_param_dtype = torch.float32
    return model


def fsdp1_reported(model):
    """What FSDP1 wrapped the model with, read from the root FullyShardedDataParallel: its sharding strategy, the
    mixed-precision param dtype, use_orig_params and the number of FSDP units."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    policy = model.mixed_precision
    return {
        "fsdp_wrapper": type(model).__name__,
        "sharding_strategy": model.sharding_strategy.name,
        "param_dtype": str(policy.param_dtype).removeprefix("torch.") if policy.param_dtype else "",
        "use_orig_params": model._use_orig_params,
        "fsdp_units": len(FSDP.fsdp_modules(model)),
    }


def trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def trained(model):
    """What the job trained, for the results: the parameters the optimizer steps, the base's NF4 linears (QLoRA) and
    the dtype their bytes are packed in."""
    nf4 = [
        m for m in model.modules() if type(m).__module__.startswith("bitsandbytes") and type(m).__name__ == "Linear4bit"
    ]
    storage = {str(m.quant_storage).removeprefix("torch.") for m in nf4}
    return {"trainable_parameters": trainable_count(model), "nf4_linears": len(nf4), "nf4_storage": ",".join(storage)}


def trainable_count(model):
    """Parameters the optimizer steps, whole, on every rank: a DTensor's numel, ZeRO-3's ds_numel, and under FSDP1 each
    parameter's numel from its unit's flat parameter (_numels, padding excluded): with use_orig_params the optimizer
    steps the original parameters, which outside forward hold only this rank's part of the shard, possibly none; without
    it, the flat parameter (all of its parameters trainable, or none). All of them, or only LoRA's adapters."""
    whole = {}
    for module in model.modules():  # FSDP1 units: FullyShardedDataParallel._handle.flat_param
        flat = getattr(getattr(module, "_handle", None), "flat_param", None)
        if flat is not None:
            originals = flat._params if flat._params is not None else [flat] * len(flat._numels)
            for parameter, numel in zip(originals, flat._numels, strict=True):
                whole[id(parameter)] = whole.get(id(parameter), 0) + numel
    return sum(whole.get(id(p), getattr(p, "ds_numel", p.numel())) for p in trainable(model))
