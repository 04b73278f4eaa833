"""`plan.recipe`: the decided optimizer recipe, every value with the reason that names its source (decided by
compiler/recipe/decide.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


def significant(value: float) -> float:
    """A derived rate without binary noise (8e-05 × 0.01 is 8.000000000000001e-07): 12 significant digits."""
    return float(f"{value:.12g}")


class Recipe(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    optimizer: str = Field(description="train.optimizer")
    family: str = Field(description="whose published recipe supplied the values the plan left out")
    lr_peak: float = Field(description="learning rate at the end of the warmup")
    lr_min: float = Field(description="learning rate at the end of the decay (= lr_peak for constant)")
    schedule: Literal["cosine", "wsd", "linear", "constant"] = Field(
        description="after the linear warmup from 0: cosine or linear decay to lr_min, constant, or wsd (constant, then a cosine decay over the last wsd_decay_steps)"
    )
    warmup_steps: int = Field(description="linear warmup from 0 to lr_peak, in optimizer steps")
    decay_steps: int = Field(description="steps from the start to the end of the decay: the run's steps")
    wsd_decay_steps: int = Field(0, description="wsd: the final decay's steps (0 for the other schedules)")
    weight_decay: float
    betas: tuple[float, float] = Field(description="Adam β1, β2")
    eps: float = Field(description="Adam ε")
    grad_clip_norm: float = Field(description="global gradient-norm clip (0: none)")
    init_std: float = Field(description="standard deviation of the random initialisation (pre-training)")
    dropout: float = Field(description="attention and hidden dropout")
    reasons: dict[str, str] = Field(
        default_factory=dict, description="per value: the plan's own, or the published source it comes from"
    )

    def lr_at(self, step: int) -> float:
        """The learning rate this recipe gives at `step` (0-based, before that step's update): the reference the
        frameworks' schedulers are checked against."""
        import math

        if self.warmup_steps and step <= self.warmup_steps:
            return self.lr_peak * step / self.warmup_steps
        if step >= self.decay_steps or self.schedule == "constant":
            return self.lr_min if self.schedule != "constant" else self.lr_peak
        if self.schedule == "wsd":
            start = self.decay_steps - self.wsd_decay_steps
            if step <= start:
                return self.lr_peak
            progress = (step - start) / self.wsd_decay_steps
        else:
            progress = (step - self.warmup_steps) / (self.decay_steps - self.warmup_steps)
        coeff = 0.5 * (1 + math.cos(math.pi * progress)) if self.schedule != "linear" else 1 - progress
        return self.lr_min + coeff * (self.lr_peak - self.lr_min)
