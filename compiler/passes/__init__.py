"""The sizing passes, in order. Each is a pure function (ResolvedPlan, PassContext) -> ResolvedPlan (context.py)."""

from __future__ import annotations

from .attach_ranges import attach_ranges
from .decide_probe import decide_probe
from .decide_recipe import decide_recipe
from .price_on_node import check_price_on_node
from .resolve_deployment import resolve_deployment
from .resolve_model import resolve_model
from .size_serving import size_serving
from .size_training import size_training

PASSES = (
    resolve_model,  # everything after needs the architecture and parameter counts
    size_training,  # train/finetune: GPU type and count, parallelism, time, cost (no-op for serving)
    size_serving,  # serve: GPU type, TP/PP, precision, batch, replicas (no-op for training)
    attach_ranges,  # the headline predictions' P10-P90 from their family's published residuals
    decide_recipe,  # train/finetune: learning rate, schedule, warmup, Adam settings, clip, init, dropout
    resolve_deployment,  # launcher, scheduler, pod and engine decisions from the sized numbers
    check_price_on_node,  # the pods land on the nodes the sizing priced them on (a bug otherwise); reads the deployment
    decide_probe,  # only for `mlinfra-compile probe`: the probe job's shape and layouts (reads the deployment's image)
)
