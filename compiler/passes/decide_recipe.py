"""Pass: decide the optimizer recipe of a train/finetune plan (compiler/recipe/decide.py) into `plan.recipe`.

Runs after the sizing (it needs the run's steps and global batch) and before the deployment, whose framework files
(Megatron arguments, ds_config, Trainer flags, MLINFRA_* environment) carry it."""

from __future__ import annotations

from ..plan.resolved import ResolvedPlan
from ..recipe.decide import decide_recipe as decide
from .context import PassContext


def decide_recipe(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    if plan.workload not in ("train", "finetune") or plan.training is None or plan.model is None:
        return plan
    return plan.model_copy(update={"recipe": decide(plan)})
