"""Deployment decisions: what the jobs and servers are told (launcher, scheduler, pods, engines, file layout).

`plan/deployment.py` holds the typed `Deployment` section of the ResolvedPlan; `training/` and `serving/` decide its
values from the sized plan; `passes/resolve_deployment.py` runs them after sizing. Targets only place these values.
"""
