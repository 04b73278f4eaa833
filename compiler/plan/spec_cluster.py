"""The plan's cluster section: GPUs, pricing, fabric and storage, and the scheduler settings (Slurm directives,
Kubernetes namespace, credentials by reference, tolerations)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from .spec_fields import DNS1123_LABEL, Bytes, SafeText, Seconds, Spec, offers

# #SBATCH flags the compiler writes itself, with the plan field that decides each: an extra directive repeating one
# would give sbatch two values (the last wins for most flags) while the chain, signal lead and launcher keep the first.
OWNED_DIRECTIVES = {  # long forms only: extra_directives takes --name[=value]
    "--time": "cluster.slurm.max_time",
    "--nodes": "cluster.count / cluster.gpus_per_node",
    "--gpus-per-node": "cluster.gpus_per_node",
    "--gres": "cluster.gpus_per_node",
    "--gpus": "cluster.count",
    "--ntasks-per-node": "nothing: one torchrun agent per node is the launch contract",
    "--ntasks": "nothing: one torchrun agent per node is the launch contract",
    "--cpus-per-task": "cluster.slurm.cpus_per_node",
    "--mem": "cluster.slurm.memory_per_node",
    "--mem-per-cpu": "cluster.slurm.memory_per_node",
    "--mem-per-gpu": "cluster.slurm.memory_per_node",
    "--exclusive": "nothing: whole-node jobs are exclusive already, partial-node jobs share on purpose",
    "--job-name": "name",
    "--output": "nothing: the log pattern follows the chain",
    "--error": "nothing: the log pattern follows the chain",
    "--signal": "nothing: the lead is decided from the step and checkpoint write times",
    "--array": "cluster.slurm.max_time (the chain)",
    "--requeue": "nothing: it is always written",
    "--partition": "cluster.slurm.partition",
    "--account": "cluster.slurm.account",
    "--qos": "cluster.slurm.qos",
    "--reservation": "cluster.slurm.reservation",
    "--constraint": "cluster.slurm.constraint",
}


def _not_owned(directive: str) -> str:
    flag = directive.partition("=")[0]
    if flag in OWNED_DIRECTIVES:
        raise PydanticCustomError(
            "owned-directive",
            "{flag} is written by the compiler; set {field} instead",
            {"flag": flag, "field": OWNED_DIRECTIVES[flag]},
        )
    return directive


class SlurmSpec(Spec):
    partition: SafeText | None = Field(None, description="#SBATCH --partition")
    account: SafeText | None = Field(None, description="#SBATCH --account")
    qos: SafeText | None = Field(None, description="#SBATCH --qos")
    reservation: SafeText | None = Field(None, description="#SBATCH --reservation")
    constraint: SafeText | None = Field(None, description="#SBATCH --constraint (node features)")
    container_image: SafeText | None = Field(None, description="pyxis/enroot image")
    container_mounts: list[SafeText] = Field(
        default_factory=list, description="pyxis --container-mounts entries (src:dst)"
    )
    extra_directives: list[
        Annotated[str, Field(pattern=r"^--[a-z][a-z0-9-]*(=[^\x00\r\n]*)?$"), AfterValidator(_not_owned)]
    ] = Field(
        default_factory=list,
        description="any other #SBATCH flag, e.g. --mail-type=END (not one the compiler writes: --time, --nodes, ...)",
    )
    max_time: Seconds | None = Field(
        None,
        description="the site's longest job (partition/QOS walltime); longer runs chain as a job array (default 24h)",
        examples=["20h"],
    )
    cpus_per_node: int | None = Field(
        None, ge=1, le=100_000, description="CPU cores per node (default: the GPU catalog's node)"
    )
    memory_per_node: Bytes | None = Field(None, description="host memory per node to request (default: all, --mem=0)")


# Secret and ServiceAccount names are DNS-1123 subdomains (kubernetes.io "Object Names and IDs").
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
# The cloud identity a workload-identity ServiceAccount is bound to, one form per object store: an AWS IAM role ARN
# (EKS IAM roles for service accounts, s3://), a Google service-account email (GKE Workload Identity, gs://), or a
# Microsoft Entra application client id (Azure Workload Identity, az://).
IAM_ROLE_ARN = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$"
GCP_SERVICE_ACCOUNT = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{4,28}[a-z0-9]\.iam\.gserviceaccount\.com$"
AZURE_CLIENT_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
WORKLOAD_IDENTITY = f"{IAM_ROLE_ARN}|{GCP_SERVICE_ACCOUNT}|{AZURE_CLIENT_ID}"
SecretName = Annotated[str, Field(pattern=DNS1123_SUBDOMAIN, max_length=253)]


class ObjectStoreSpec(Spec):
    """How pods reach model.weights in object storage (s3://, gs://, az://): by reference only, never a key in the plan."""

    secret: SecretName | None = Field(
        None,
        description="a Secret whose keys become the environment of the containers that read the weights (envFrom): for s3:// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN / AWS_REGION if needed)",
    )
    workload_identity: Annotated[str, Field(pattern=WORKLOAD_IDENTITY)] | None = Field(
        None,
        description="the cloud identity the pods' ServiceAccount is bound to: an IAM role ARN (s3://, EKS IRSA), a Google service-account email (gs://, GKE Workload Identity) or an Azure client id (az://, Azure Workload Identity)",
    )
    service_account: SecretName | None = Field(
        None, description="name of the ServiceAccount emitted for workload_identity (default: <plan name>-weights)"
    )

    @model_validator(mode="after")
    def one_way(self) -> ObjectStoreSpec:
        if (self.secret is None) == (self.workload_identity is None):
            raise PydanticCustomError("object-store-credentials", "give exactly one of secret or workload_identity", {})
        if self.service_account is not None and self.workload_identity is None:
            raise PydanticCustomError(
                "object-store-credentials",
                "service_account names the workload-identity ServiceAccount: give workload_identity",
                {},
            )
        return self


# Kubernetes label keys and values (apimachinery validation IsQualifiedName, IsValidLabelValue): an optional DNS-1123
# subdomain prefix and '/', then a name of 1-63 alphanumerics, '-', '_', '.', starting and ending alphanumeric.
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LabelKey = Annotated[str, Field(pattern=rf"^({_SUBDOMAIN}/)?{_LABEL_NAME}$", max_length=253 + 1 + 63)]
LabelValue = Annotated[str, Field(pattern=rf"^({_LABEL_NAME})?$")]


class TolerationSpec(Spec):
    """A pod toleration, as Kubernetes types it (core/v1 Toleration) and validates it (ValidateTolerations)."""

    key: LabelKey | None = Field(None, description="taint key; empty with operator Exists matches every taint")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Exists: any value; Equal: the value below")
    value: LabelValue | None = Field(None, description="taint value (operator Equal)")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="taint effect to match; empty matches every effect"
    )
    tolerationSeconds: int | None = Field(  # noqa: N815 - the Kubernetes field name
        None, ge=0, le=2**63 - 1, description="NoExecute only: how long the pod stays bound after the taint appears"
    )

    @model_validator(mode="after")
    def consistent(self) -> TolerationSpec:
        if self.operator == "Exists" and self.value:
            raise PydanticCustomError("invalid-toleration", "operator Exists takes no value", {})
        if not self.key and self.operator != "Exists":
            raise PydanticCustomError("invalid-toleration", "a toleration without a key needs operator Exists", {})
        if self.tolerationSeconds is not None and self.effect != "NoExecute":
            raise PydanticCustomError("invalid-toleration", "tolerationSeconds needs effect NoExecute", {})
        return self


class KubernetesSpec(Spec):
    namespace: Annotated[str, Field(pattern=DNS1123_LABEL)] = Field("default", description="Kubernetes namespace")
    job_api: Literal["jobset", "pytorchjob"] = Field("jobset", description="training job kind")
    autoscaler: Literal["hpa", "keda"] = Field("hpa", description="serving autoscaler")
    storage_class: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")] | None = Field(
        None, description="StorageClass of the claims one pod mounts (default: the cluster default)"
    )
    shared_storage_class: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")] | None = Field(
        None,
        description="a StorageClass whose volumes are ReadWriteMany (EFS, Filestore, Azure Files, CephFS, a Lustre or "
        "NFS CSI driver): the claims several pods mount, the shared model cache and a multi-node job's checkpoints "
        "(default: storage_class); one of the two is required when the plan emits such a claim (the cluster default is "
        "usually ReadWriteOnce, where it stays Pending)",
    )
    secret_name: Annotated[str, Field(pattern=DNS1123_LABEL)] = Field("hf-token", description="Secret holding HF_TOKEN")
    image_pull_secret: SecretName | None = Field(
        None,
        description="a kubernetes.io/dockerconfigjson Secret for pulling the images from a private registry or mirror (imagePullSecrets)",
    )
    object_store: ObjectStoreSpec | None = Field(
        None,
        description="credentials for model.weights in object storage (default: none, the node's own identity or a public bucket)",
    )
    image: SafeText | None = Field(None, description="container image (default per engine/framework)")
    tolerations: list[TolerationSpec] = Field(
        default_factory=lambda: [TolerationSpec(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        description="pod tolerations for the GPU nodes",
    )
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, description="extra node labels to select on (the GPU product label is added)"
    )


class ClusterSpec(Spec):
    scheduler: Literal["slurm", "kubernetes", "both"] = Field("slurm", description="which deployment files to emit")
    gpus: list[str] | None = Field(None, description="GPU types to choose from", json_schema_extra=offers("gpus"))
    gpu: str | None = Field(None, description="pin one GPU type", json_schema_extra=offers("gpus"))
    count: int | None = Field(
        None, ge=1, le=1_000_000, description="pin the GPU count (train) or GPUs per replica (serve)"
    )
    max_gpus: int = Field(4096, ge=1, le=1_000_000, description="largest allocation the search may use")
    pricing: Literal["on-demand", "spot", "reserved"] = Field(
        "on-demand",
        description="price list used for cost; spot also makes jobs restart from the last checkpoint (on fewer nodes only where the launched program keeps the global batch: plan.json deployment.launcher.restart_reason)",
    )
    gpus_per_node: int | None = Field(
        None, ge=1, le=64, description="GPUs per node (default: the GPU catalog's server)"
    )
    interconnect: str = Field(
        "ib-400g",
        description="inter-node fabric; NVLink inside a node comes from the GPU catalog",
        json_schema_extra=offers("interconnects"),
    )
    storage: str = Field(
        "lustre", description="shared storage kind for data and checkpoints", json_schema_extra=offers("storage")
    )
    catalog: SafeText | None = Field(
        None, description="YAML file adding or overriding GPU entries, relative to the plan"
    )
    calibration: SafeText | None = Field(
        None,
        description="site calibration file: training and serving steps measured on this cluster; the measured GPUs' achievable matmul and HBM shares are fitted to them, its memory factor replaces the published one and its measured collectives give the training collectives' intra- and inter-node link shares (relative to the plan; compiler/site_calibration.py)",
    )
    slurm: SlurmSpec = Field(default_factory=SlurmSpec, description="Slurm partition, account and directives")
    kubernetes: KubernetesSpec = Field(default_factory=KubernetesSpec, description="Kubernetes namespace and APIs")

    @model_validator(mode="after")
    def gpu_or_gpus(self) -> ClusterSpec:
        if self.gpu and self.gpus:
            raise PydanticCustomError("conflicting-fields", "give gpu (a pin) or gpus (candidates), not both", {})
        return self

    @property
    def gpu_choices(self) -> list[str]:
        return [self.gpu] if self.gpu else list(self.gpus or [])
