"""The `deployment` section of the ResolvedPlan: every number and string a target emits that sizing does not decide.

Each value is decided once, in `compiler/deployment/` (`training/`, `serving/` and their neighbours);
`Deployment.decisions` says why (the report and `explain` list them). A new launch, serving or security decision adds a
field here or in the section's module: deployment_training (launcher, frameworks, Slurm, trainer pods),
deployment_serving (engines, serving units); the types both share are in deployment_fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .deployment_fields import DeploymentDecision, Section
from .deployment_serving import Autoscaling, Engine, ServingUnit
from .deployment_training import Frameworks, KubernetesTraining, Launcher, Slurm


class Files(Section):
    """Output paths (relative to out/<plan>/): one place, so targets that refer to each other's files agree."""

    plan_json: str = "plan.json"
    report: str = "REPORT.md"
    launcher: str = "launch/torchrun.sh"
    checkpoint_helper: str = Field(
        "launch/mlinfra_signal.py",
        description="hf-trainer and accelerate kinds: the importable module that turns the forwarded checkpoint signal into a save and a clean stop on every rank",
    )
    sbatch: str = "slurm/train.sbatch"
    ds_config: str = "deepspeed/ds_config.json"
    accelerate_config: str = "fsdp/accelerate_config.yaml"
    fsdp_tp_config: str = Field(
        "fsdp/fsdp_tp.json", description="FSDP2 × TP × PP: the mesh, TP plan and pipeline stages fsdp_tp.py applies"
    )
    fsdp_tp_script: str = Field(
        "fsdp/fsdp_tp.py",
        description="FSDP2 × TP × PP: builds the DeviceMesh, shards the model and runs its pipeline stages",
    )
    fsdp_cp_script: str = Field(
        "fsdp/fsdp_cp.py",
        description="FSDP2 × CP: the context-parallel chunks and all-gather attention fsdp_tp.py loads when CP > 1",
    )
    lora_tp_script: str = Field(
        "fsdp/lora_tp.py",
        description="LoRA × TP × PP: the adapters fsdp_tp.py wraps the targeted layers in, sharded as their base layers",
    )
    megatron_args: str = "megatron/args.sh"
    k8s_training: str = "k8s/training.yaml"
    k8s_serving: str = "k8s/serving.yaml"
    adapter_values: str = Field(
        "helm/prometheus-adapter-values.yaml",
        description="Helm values of prometheus-adapter: not a Kubernetes object, so outside k8s/ (kubectl apply -f k8s/ applies every file there)",
    )
    monitoring_rules: str = "monitoring/prometheus-rules.yaml"
    kustomization: str = Field(
        "kustomization.yaml",
        description="kubectl apply -k out/<plan>: lists the Kubernetes object files (beside k8s/, not in it)",
    )


class Kubernetes(Section):
    namespace: str
    secret_name: str
    image_pull_secrets: list[str] = Field(
        default_factory=list, description="imagePullSecrets of every pod (cluster.kubernetes.image_pull_secret)"
    )
    object_store_secret: str = Field(
        "",
        description="Secret whose keys the containers that read object-storage weights get as environment (envFrom); '' for none",
    )
    service_account: str = Field(
        "",
        description="ServiceAccount of the pods, emitted with the workload-identity annotation; '' = the namespace's default",
    )
    service_account_annotations: dict[str, str] = Field(
        default_factory=dict,
        description="annotations binding the ServiceAccount to the cloud identity (EKS IRSA, GKE Workload Identity, Azure Workload Identity)",
    )
    identity_pod_labels: dict[str, str] = Field(
        default_factory=dict, description="pod labels the workload-identity webhook selects on (Azure)"
    )
    storage_class: str | None
    shared_storage_class: str | None = Field(None, description="StorageClass of the ReadWriteMany claims")
    shared_claims: list[str] = Field(default_factory=list, description="the claims several pods mount (ReadWriteMany)")
    tolerations: list[dict[str, str | int]]
    node_selector: dict[str, str] = Field(description="the plan's extra labels; the GPU product label is added per pod")
    autoscaler: Literal["hpa", "keda"]
    autoscaling: Autoscaling
    model_cache_mount: str = Field(
        description="where serving pods mount the model cache (HF_HOME, Triton's repository)"
    )
    training: KubernetesTraining | None = None
    serving: list[ServingUnit] = Field(default_factory=list)


class TrainingAlerts(Section):
    """Alert timings of monitoring/prometheus-rules.yaml for a training job."""

    idle_util_percent: int
    idle_seconds: int
    stall_steps: int
    stall_seconds: int
    spend_window_days: int = Field(description="Slurm spend: the window the GPU count is summed over")


class BurnWindow(Section):
    long: str = Field(description="Prometheus duration of the long window")
    short: str
    burn_rate: float
    severity: Literal["critical", "warning"]


class Alerting(Section):
    """Alert policy of monitoring/prometheus-rules.yaml (each part a decision with its source)."""

    error_budget_fraction: float = Field(description="share of requests a p99 target lets be slower")
    burn_windows: list[BurnWindow]
    serving_spend_window: str = Field(description="Prometheus duration the serving spend rate is averaged over")
    spend_step_seconds: int = Field(description="Slurm spend: one GPU count per subquery step")


class Deployment(Section):
    scheduler: Literal["slurm", "kubernetes", "both"]
    files: Files = Field(default_factory=Files)
    launcher: Launcher | None = None
    frameworks: Frameworks | None = None
    slurm: Slurm | None = None
    kubernetes: Kubernetes | None = None
    engines: list[Engine] = Field(default_factory=list)
    hours_per_month: float = Field(description="hours a monthly figure counts (spend rules)")
    training_alerts: TrainingAlerts | None = None
    alerting: Alerting | None = None
    monitoring_assumptions: list[str] = Field(
        default_factory=list,
        description="what the alert rules assume of the site's Prometheus (stated in the rules file and the report)",
    )
    decisions: list[DeploymentDecision] = Field(default_factory=list)
