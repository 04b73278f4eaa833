"""Pass: decide how the sized plan is deployed — launcher, Slurm job, Kubernetes objects, engine flags, file layout.

Runs last: it reads the sizing's numbers (hardware, parallelism, training / serving) and the plan's deployment
settings (cluster.slurm, cluster.kubernetes, train.entrypoint...), and writes `plan.deployment`, the only place
targets take a deployment number or string from. Each decision carries its reason (`deployment.decisions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
from ..plan.deployment import Deployment, Files, Kubernetes, TrainingAlerts
from ..plan.deployment_fields import DeploymentDecision
from ..plan.deployment_serving import Engine, ServingUnit
from ..plan.deployment_training import Frameworks, KubernetesTraining, Launcher, Slurm
from ..plan.resolved import ResolvedPlan
from ..sizing.serve.types import HOURS_PER_MONTH
from .context import PassContext


@dataclass(frozen=True)
class _TrainingSections:
    """What a training plan adds to the Deployment (all None for a serving plan), with its decisions and warnings."""

    launcher: Launcher | None = None
    frameworks: Frameworks | None = None
    slurm: Slurm | None = None
    kubernetes: KubernetesTraining | None = None
    alerts: TrainingAlerts | None = None
    decisions: list[DeploymentDecision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _ServingSections:
    """What a serving plan adds: one engine and one Kubernetes unit per served model, with decisions and warnings."""

    engines: list[Engine] = field(default_factory=list)
    units: list[ServingUnit] = field(default_factory=list)
    decisions: list[DeploymentDecision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def resolve_deployment(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    spec = plan.spec
    files = Files()
    scheduler = spec.cluster.scheduler
    on_slurm, on_kubernetes = scheduler in ("slurm", "both"), scheduler in ("kubernetes", "both")
    training = _training_sections(plan, files, on_slurm, on_kubernetes)
    serving = _serving_sections(plan, ctx, on_kubernetes)
    secrets, secrets_decision = credentials.credentials(spec, plan.name)
    kubernetes = _kubernetes(plan, secrets, training.kubernetes, serving.units, on_kubernetes)
    assumed = monitoring.assumptions(plan, on_slurm, on_kubernetes, training.alerts)
    policy = monitoring.alerting()
    decisions = (
        training.decisions
        + serving.decisions
        + ([secrets_decision] if on_kubernetes else [])
        + [monitoring.alerting_decision(policy), monitoring.assumption_decision(assumed)]
    )
    deployment = Deployment(
        scheduler=scheduler,
        files=files,
        launcher=training.launcher,
        frameworks=training.frameworks,
        slurm=training.slurm,
        kubernetes=kubernetes,
        engines=serving.engines,
        hours_per_month=HOURS_PER_MONTH,
        training_alerts=training.alerts,
        alerting=policy,
        monitoring_assumptions=assumed,
        decisions=decisions,
    )
    return plan.model_copy(
        update={"deployment": deployment, "warnings": plan.warnings + training.warnings + serving.warnings}
    )


def _training_sections(plan: ResolvedPlan, files: Files, on_slurm: bool, on_kubernetes: bool) -> _TrainingSections:
    """The launcher, framework files, Slurm job, Kubernetes trainer pods and alert timings of a sized training plan."""
    if plan.workload not in ("train", "finetune") or plan.hardware is None or plan.training is None:
        return _TrainingSections()
    spec = plan.spec
    launch = launcher(plan, spec, files)
    framework_files = frameworks.frameworks(plan, launch.checkpoint, spec, launch.kind)
    job = slurm(plan, spec, launch) if on_slurm else None
    k8s_training = kubernetes_training(plan, spec, launch) if on_kubernetes else None
    alerts = monitoring.training_alerts(plan)
    return _TrainingSections(
        launcher=launch,
        frameworks=framework_files,
        slurm=job,
        kubernetes=k8s_training,
        alerts=alerts,
        decisions=training_decisions.decisions(launch, job, k8s_training, spec.train.entrypoint.kind != "auto")
        + frameworks.decisions(framework_files)
        + monitoring.decisions(alerts),
        warnings=training_decisions.warnings(launch, job, spec),
    )


def _serving_sections(plan: ResolvedPlan, ctx: PassContext, on_kubernetes: bool) -> _ServingSections:
    """The engines and Kubernetes serving units of each served model (the whole service, or each stage)."""
    views = unit_views(plan)
    if not views:
        return _ServingSections()
    spec = plan.spec
    engines = [engine(v, spec) for v in views]
    fabric_id = plan.hardware.interconnect  # the fabric the sizing assumed (a name check_references verified)
    fabric = ctx.catalog.interconnects[fabric_id].family
    units = [serving_unit(plan, v, spec, on_kubernetes, fabric) for v in views]
    decisions = serving_decisions.decisions(
        engines,
        units,
        {v.stage: v.plan.serving for v in views},
        {v.stage: v.plan.model.quantization for v in views},
        spec.serve.min_replicas is not None,
        (fabric_id, fabric),
    )
    return _ServingSections(engines, units, decisions, serving_decisions.warnings(units))


def _kubernetes(
    plan: ResolvedPlan,
    secrets: dict,
    k8s_training: KubernetesTraining | None,
    units: list[ServingUnit],
    on_kubernetes: bool,
) -> Kubernetes:
    """The Kubernetes section: the plan's namespace, storage, scheduling and autoscaler settings, the credentials'
    Secret and identity, and the trainer pods and serving units."""
    k8s = plan.spec.cluster.kubernetes
    return Kubernetes(
        namespace=k8s.namespace,
        secret_name=k8s.secret_name,
        storage_class=k8s.storage_class,
        shared_storage_class=k8s.shared_storage_class or k8s.storage_class,
        shared_claims=_shared_claims(plan, k8s_training, units, on_kubernetes),
        **secrets,
        tolerations=[t.model_dump(exclude_none=True) for t in k8s.tolerations],
        node_selector=dict(k8s.node_selector),
        autoscaler=k8s.autoscaler,
        autoscaling=autoscaling(),
        model_cache_mount=CACHE_MOUNT,
        training=k8s_training,
        serving=units,
    )


def _shared_claims(
    plan: ResolvedPlan, k8s_training: KubernetesTraining | None, units: list[ServingUnit], on_kubernetes: bool
) -> list[str]:
    """The claims several pods mount (a multi-node job's checkpoints, a shared model cache); refused without a
    ReadWriteMany StorageClass to put them on."""
    k8s = plan.spec.cluster.kubernetes
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
    return shared_claims
