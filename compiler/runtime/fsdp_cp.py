"""Context parallelism for fsdp_tp.py (beside it; loaded when settings["cp"] > 1): the Llama 3 paper's all-gather CP
(section 3.3.2) for a transformers model. Each CP rank keeps chunks i and 2*cp-1-i of 2*cp of every sequence
(settings["cp_rank_chunks"]); context_shard cuts them out with their global positions, and
context_parallel_attention points the model's attention at an all-gather of K and V over the CP ranks, local
queries attending to the keys at or before their own global positions."""

import torch
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F


def context_shard(settings, mesh, *sequences):
    """This CP rank's chunks of each [batch, seq] tensor (settings["cp_rank_chunks"]), and their global positions
    ([1, local], for position_ids); without CP the tensors as they are and positions None."""
    if settings.get("cp", 1) == 1:
        return (*sequences, None)
    chunks = settings["cp_rank_chunks"][mesh["cp"].get_local_rank()]
    length = sequences[0].shape[1]
    if length % (2 * settings["cp"]):
        raise ValueError(
            f"fsdp_tp: context parallelism cuts each sequence into {2 * settings['cp']} equal chunks: "
            f"a length of {length} does not divide"
        )
    size = length // (2 * settings["cp"])
    positions = torch.cat([torch.arange(c * size, (c + 1) * size) for c in chunks]).unsqueeze(0)
    local = [torch.cat([t[:, c * size : (c + 1) * size] for c in chunks], dim=1) for t in sequences]
    return (*local, positions.to(sequences[0].device))


def context_visibility(rank_chunks, rank, chunk_len, device=None):
    """Which keys (global order) each of the rank's local queries attends to, as the CP attention masks them: a
    [local, seq] bool matrix (for checking; the attention uses the per-chunk masks of _chunk_masks)."""
    total = 2 * len(rank_chunks) * chunk_len
    return torch.cat(
        [F.pad(mask, (0, total - keys)) for _, keys, mask in _chunk_masks(rank_chunks[rank], chunk_len, device)]
    )


def _chunk_masks(chunks, chunk_len, device=None):
    """Per local chunk c (global chunk index): its queries see the keys of chunks 0..c, the last causally, so only the
    keys [0, (c+1)*L) enter its attention, masked from global positions (key position <= query position)."""
    masks = []
    for c in chunks:
        queries = torch.arange(c * chunk_len, (c + 1) * chunk_len, device=device)
        keys = torch.arange((c + 1) * chunk_len, device=device)
        masks.append((c, (c + 1) * chunk_len, keys.unsqueeze(0) <= queries.unsqueeze(1)))
    return masks


class _GatherSequence(torch.autograd.Function):
    """All-gather along the sequence (dim 2 of [b, heads, s, d]) over the CP group; the backward sums every rank's
    gradient of the gathered tensor (an all-reduce: gloo has no reduce-scatter) and keeps this rank's slice."""

    @staticmethod
    def forward(ctx, local, group):
        ctx.group = group
        gathered = funcol.all_gather_single(local.contiguous(), 2, group)
        return gathered.wait() if hasattr(gathered, "wait") else gathered

    @staticmethod
    def backward(ctx, grad):
        total = funcol.all_reduce(grad.contiguous(), "sum", ctx.group)
        total = total.wait() if hasattr(total, "wait") else total
        return total.chunk(ctx.group.size(), dim=2)[ctx.group.get_local_rank()].contiguous(), None


def context_parallel_attention(model, cp_mesh, settings):
    """The Llama 3 paper's all-gather CP (section 3.3.2) as the transformers model's attention: K and V gathered over
    the CP ranks and put in global chunk order, each local chunk's queries attending to the keys up to their own."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        raise SystemExit(
            "fsdp_tp: context parallelism replaces a transformers model's attention "
            "(config._attn_implementation); this model has no such config"
        )
    from transformers import AttentionInterface

    rank_chunks = settings["cp_rank_chunks"]
    order = sorted(range(2 * len(rank_chunks)), key=lambda i: rank_chunks[i // 2][i % 2])  # gathered -> global

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        chunk_len = query.shape[2] // 2
        keys, values = (_GatherSequence.apply(t, cp_mesh).split(chunk_len, dim=2) for t in (key, value))
        keys, values = torch.cat([keys[i] for i in order], dim=2), torch.cat([values[i] for i in order], dim=2)
        groups = query.shape[1] // keys.shape[1]
        keys, values = keys.repeat_interleave(groups, 1), values.repeat_interleave(groups, 1)  # GQA (repeat_kv)
        outputs = []
        masks = _chunk_masks(rank_chunks[cp_mesh.get_local_rank()], chunk_len, query.device)
        for index, (_, length, mask) in enumerate(masks):
            q = query[:, :, index * chunk_len : (index + 1) * chunk_len]
            outputs.append(
                F.scaled_dot_product_attention(
                    q, keys[:, :, :length], values[:, :, :length], attn_mask=mask, dropout_p=dropout, scale=scaling
                )
            )
        return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None

    AttentionInterface.register("mlinfra_cp_allgather", attention)
    config._attn_implementation = "mlinfra_cp_allgather"
