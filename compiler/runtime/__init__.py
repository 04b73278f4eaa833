"""Python the generated folders carry and run on the cluster, shipped as it is (no templating): the FSDP2 × TP × PP
script and its LoRA adapters, the checkpoint-signal helper for Trainer/accelerate scripts, and the probe's scripts. The
compiler reads them as text (targets/base.runtime_script) and never imports them: they import torch and run with the
settings files the targets write beside them."""
