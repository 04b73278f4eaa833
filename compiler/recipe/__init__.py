"""The optimizer recipe: learning rate, schedule, warmup, weight decay, Adam betas and eps, gradient clip, init std and
dropout. `families`: the published values per model family with their sources; `decide`: the pass's logic (the plan's
value, else the family's, steps from the plan's run). The ResolvedPlan section is compiler/plan/recipe.py."""
