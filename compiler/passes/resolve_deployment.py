"""Pass: decide how the sized plan is deployed — launcher, Slurm job, Kubernetes objects, engine flags, file layout.

Runs last: it reads the sizing's numbers (hardware, parallelism, training / serving) and the plan's deployment
settings (cluster.slurm, cluster.kubernetes, train.entrypoint...), and writes `plan.deployment`, the only place
targets take a deployment number or string from. Each decision carries its reason (`deployment.decisions`).
"""

from __future__ import annotations

from ..deployment import credentials, frameworks, monitoring
from ..deployment.serving import decisions as serving_decisions
from ..deployment.serving.engines import engine
from ..deployment.serving.pods import CACHE_MOUNT, autoscaling, serving_unit
from ..deployment.training import decisions as training_decisions
from ..deployment.training.kubernetes import kubernetes_training
from ..deployment.training.launcher import launcher
from ..deployment.training.slurm import slurm
from ..deployment.units import unit_views
from ..diagnostics import FieldRefused
from ..plan.deployment import Deployment, Files, Kubernetes
from ..plan.resolved import ResolvedPlan
from ..sizing.serve.types import HOURS_PER_MONTH
from .context import PassContext


def resolve_deployment(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    spec = plan.spec
    files = Files()
    scheduler = spec.cluster.scheduler
    on_slurm, on_kubernetes = scheduler in ("slurm", "both"), scheduler in ("kubernetes", "both")
    k8s = spec.cluster.kubernetes
    launch = job = k8s_training = framework_files = alerts = None
    engines, units, decisions, warnings = [], [], [], []
    if plan.workload in ("train", "finetune") and plan.hardware is not None and plan.training is not None:
        launch = launcher(plan, spec, files)
        framework_files = frameworks.frameworks(plan, launch.checkpoint, spec, launch.kind)
        job = slurm(plan, spec, launch) if on_slurm else None
        k8s_training = kubernetes_training(plan, spec, launch) if on_kubernetes else None
        decisions += training_decisions.decisions(launch, job, k8s_training, spec.train.entrypoint.kind != "auto")
        decisions += frameworks.decisions(framework_files)
        warnings += training_decisions.warnings(launch, job, spec)
        alerts = monitoring.training_alerts(plan)
        decisions += monitoring.decisions(alerts)
    views = unit_views(plan)
    if views:
        engines = [engine(v, spec) for v in views]
        fabric_id = plan.hardware.interconnect  # the fabric the sizing assumed (a name check_references verified)
        fabric = ctx.catalog.interconnects[fabric_id].family
        units = [serving_unit(plan, v, spec, on_kubernetes, fabric) for v in views]
        decisions += serving_decisions.decisions(
            engines,
            units,
            {v.stage: v.plan.serving for v in views},
            {v.stage: v.plan.model.quantization for v in views},
            spec.serve.min_replicas is not None,
            (fabric_id, fabric),
        )
        warnings += serving_decisions.warnings(units)
    secrets, secrets_decision = credentials.credentials(spec, plan.name)
    if on_kubernetes:
        decisions.append(secrets_decision)
    shared_claims = (
        [f"{plan.name}-checkpoints (every node of the {plan.hardware.nodes}-node job writes its shards)"]
        if k8s_training and plan.hardware.nodes > 1
        else []
    ) + [f"{u.name}-model-cache (one copy for every replica)" for u in units if on_kubernetes and u.shared_cache]
    if shared_claims and not (k8s.shared_storage_class or k8s.storage_class):
        raise FieldRefused(
            ("cluster", "kubernetes", "shared_storage_class"),
            f"the claim {' and '.join(shared_claims)} is mounted by several pods and needs a ReadWriteMany "
            "StorageClass; the cluster default is usually ReadWriteOnce, where it stays Pending: name one (EFS, "
            "Filestore, Azure Files, CephFS, a Lustre or NFS CSI driver)",
            "storage-class-missing",
        )
    kubernetes = Kubernetes(
        namespace=k8s.namespace,
        secret_name=k8s.secret_name,
        storage_class=k8s.storage_class,
        shared_storage_class=k8s.shared_storage_class or k8s.storage_class,
        shared_claims=shared_claims,
        **secrets,
        tolerations=[t.model_dump(exclude_none=True) for t in k8s.tolerations],
        node_selector=dict(k8s.node_selector),
        autoscaler=k8s.autoscaler,
        autoscaling=autoscaling(),
        model_cache_mount=CACHE_MOUNT,
        training=k8s_training,
        serving=units,
    )
    assumed = monitoring.assumptions(plan, on_slurm, on_kubernetes, alerts)
    policy = monitoring.alerting()
    decisions += [monitoring.alerting_decision(policy), monitoring.assumption_decision(assumed)]
    deployment = Deployment(
        scheduler=scheduler,
        files=files,
        launcher=launch,
        frameworks=framework_files,
        slurm=job,
        kubernetes=kubernetes,
        engines=engines,
        hours_per_month=HOURS_PER_MONTH,
        training_alerts=alerts,
        alerting=policy,
        monitoring_assumptions=assumed,
        decisions=decisions,
    )
    return plan.model_copy(update={"deployment": deployment, "warnings": plan.warnings + warnings})
