"""The scheduler's settings: one pydantic-settings class, filled from flags and ``SUNK_*`` env.

Flag names follow the reference deployment (``--scheduler-name``, ``--slurm-kill-wait``, ...),
so an operator's existing arguments keep working.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(value: str | float | int) -> float:
    """Seconds from ``30``, ``30s``, ``1.5m``, ``2h`` or ``500ms`` (Go-style, one unit)."""
    if isinstance(value, int | float):
        return float(value)
    m = _DURATION.match(value)
    if not m:
        raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 1m, 500ms)")
    number, unit = float(m.group(1)), m.group(2) or "s"
    return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def parse_bind(address: str) -> tuple[str, int]:
    """``host:port`` or ``:port`` (all interfaces, as Go programs read it)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not a bind address: {address!r} (use host:port or :port)")
    return (host.strip("[]") or "0.0.0.0"), int(port)


#: How long a token read from a file is used before the file is read again.
SECRET_FILE_TTL = 1.0
_secret_files: dict[Path, tuple[float, str]] = {}


def read_secret_file(path: Path) -> str:
    """A token file's text, read again at most once a second: a rotated token takes effect
    within a second, and the hot path (every Slurm call, every hook call) does not open a
    file each time."""
    now = time.monotonic()
    cached = _secret_files.get(path)
    if cached is not None and now < cached[0]:
        return cached[1]
    text = path.read_text().strip()
    _secret_files[path] = (now + SECRET_FILE_TTL, text)
    return text


def parse_tokens(text: str) -> list[str]:
    """The secret file's tokens: one per line, blank lines and ``#`` comments ignored."""
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SUNK_", env_nested_delimiter="__",
                                      extra="ignore")

    scheduler_name: str = "sunk-scheduler"
    scope: Literal["namespace", "cluster"] = "namespace"
    #: Namespaces watched in namespace scope; empty means the scheduler's own namespace.
    watch_namespace: list[str] = Field(default_factory=list)
    kubeconfig: Path | None = None

    slurm_api_base: str = "http://127.0.0.1:6820"
    slurm_api_version: str = "v0.0.42"
    slurm_auth_token: SecretStr | None = None
    #: Re-read when it changes, so a mounted Secret can rotate the token.
    slurm_auth_token_file: Path | None = None
    slurm_user: str = "root"
    slurm_kill_wait: float = 30.0
    slurm_poll_interval: float = 1.0

    hooks_api_bind_address: str = ":8000"
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    dashboard_bind_address: str = "127.0.0.1:8082"
    #: The hook secret: root on the Slurm nodes holds it (the prolog presents it), and each
    #: placeholder job gets a credential derived from it for its own Pod (sunk.hooks.auth). The
    #: file may hold several, one per line: the first is current, the rest still accepted
    #: (rotation without dropping running jobs).
    hooks_token: SecretStr | None = None
    hooks_token_file: Path | None = None
    #: ``scheduler`` (Pods through Slurm) and ``syncer`` (node locks, drains both ways).
    components: list[str] = Field(default_factory=lambda: ["scheduler", "syncer"])
    log_level: str = "info"

    #: Dashboard authentication (both optional): a bearer token, and ``user:password``.
    dashboard_token: SecretStr | None = None
    dashboard_basic_auth: SecretStr | None = None

    annotation_prefix: str = "sunk.coreweave.com/"
    #: Where the slurmd Pods live, and how to find them (their hostname is the Slurm node name).
    slurmd_namespace: str | None = None
    slurmd_label_selector: str = "app.kubernetes.io/name=slurmd"
    #: Node label value of ``gpu_model_label`` -> Slurm GRES type (the chart's ``gpuTypes``).
    gpu_model_label: str = "gpu.nvidia.com/model"
    gpu_types: dict[str, str] = Field(default_factory=dict)
    gpu_resource: str = "nvidia.com/gpu"
    placeholder_script: str = "/opt/sunk/scripts/placeholder.sh"
    policies_dir: Path = Path("policies")
    #: ``namespace/name`` of a ConfigMap holding policy files; reloaded when it changes.
    policies_configmap: str | None = None
    workers: int = 16

    #: Gangs (docs/gangs.md): a gang short of members gets a Warning Event ``GangIncomplete``
    #: after this long; a gang whose job started must have every member bound within
    #: ``gang_bind_timeout``, or its job is cancelled and submitted again.
    gang_incomplete_timeout: float = 300.0
    gang_bind_timeout: float = 60.0
    gang_max_size: int = Field(default=64, ge=1, le=512)
    #: Whether to watch PodGroups: scheduler-plugins' (their CRD need not be installed) and
    #: Kubernetes' own (``scheduling.k8s.io``, where the API server serves them).
    watch_podgroups: bool = True
    #: Whether to watch JobSets (their CRD need not be installed).
    watch_jobsets: bool = True
    #: Whether to keep a PodGroup's ``status`` (phase and counts) as scheduler-plugins'
    #: controller does; off where that controller runs.
    podgroup_status: bool = True

    #: Dynamic Resource Allocation (docs/dra.md): whether to read ResourceClaims and
    #: ResourceSlices (``resource.k8s.io/v1``); DeviceClass -> Slurm GRES name; the driver whose
    #: devices those classes select; the attribute naming a device's model, and each model's
    #: GRES type; the attribute giving a device's index on its node (Slurm's GRES index).
    dra: bool = True
    dra_classes: dict[str, str] = Field(default_factory=lambda: {"gpu.nvidia.com": "gpu"})
    dra_driver: str = "gpu.nvidia.com"
    dra_type_attribute: str = "productName"
    dra_types: dict[str, str] = Field(default_factory=dict)
    dra_index_attribute: str = "index"

    #: Leader election on a Lease (for more than one replica): only the leader acts.
    leader_elect: bool = False
    leader_elect_lease_duration: float = 15.0
    leader_elect_renew_deadline: float = 10.0
    leader_elect_retry_period: float = 2.0
    #: Default: the scheduler name; in the namespace given, by default the scheduler's own.
    leader_elect_resource_name: str | None = None
    leader_elect_resource_namespace: str | None = None

    @field_validator("slurm_kill_wait", "slurm_poll_interval", "leader_elect_lease_duration",
                     "gang_incomplete_timeout", "gang_bind_timeout",
                     "leader_elect_renew_deadline", "leader_elect_retry_period", mode="before")
    @classmethod
    def _duration(cls, v: str | float) -> float:
        return parse_duration(v)

    @field_validator("leader_elect_lease_duration")
    @classmethod
    def _whole_seconds(cls, v: float) -> float:
        if v < 1 or v != int(v):
            raise ValueError("must be whole seconds, at least 1s (a Lease counts seconds)")
        return v

    @field_validator("leader_elect_renew_deadline", "leader_elect_retry_period")
    @classmethod
    def _shorter(cls, v: float, info: ValidationInfo) -> float:
        # Each must be shorter than the one before: lease > renew deadline > 1.2 x retry.
        longer = {"leader_elect_renew_deadline": ("leader_elect_lease_duration", 1.0),
                  "leader_elect_retry_period": ("leader_elect_renew_deadline", 1.2)}
        name, factor = longer[str(info.field_name)]
        if v <= 0 or (name in info.data and not v * factor < info.data[name]):
            raise ValueError(f"must be positive and less than --{name.replace('_', '-')}"
                             + (f" / {factor}" if factor != 1 else ""))
        return v

    @field_validator("watch_namespace", "components", mode="before")
    @classmethod
    def _csv(cls, v: str | list[str]) -> list[str]:
        if isinstance(v, str):
            return [x.strip() for x in v.split(",") if x.strip()]
        return [x for item in v for x in item.split(",") if x]

    @field_validator("dashboard_basic_auth")
    @classmethod
    def _basic_auth(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and v.get_secret_value():
            user, sep, password = v.get_secret_value().partition(":")
            if not (user and sep and password):
                raise ValueError("must be user:password")
        return v

    @field_validator("slurm_api_base")
    @classmethod
    def _scheme(cls, v: str) -> str:
        return (v if "://" in v else f"http://{v}").rstrip("/")

    @field_validator("hooks_api_bind_address", "metrics_bind_address",
                     "health_probe_bind_address", "dashboard_bind_address")
    @classmethod
    def _bind(cls, v: str) -> str:
        parse_bind(v)
        return v

    # -- derived ---------------------------------------------------------------------------
    def own_namespace(self) -> str:
        """The scheduler's namespace (the Downward API's POD_NAMESPACE), else ``default``."""
        mounted = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        if env := os.environ.get("POD_NAMESPACE"):
            return env
        return mounted.read_text().strip() if mounted.exists() else "default"

    def namespaces(self) -> list[str] | None:
        """Watched namespaces, or None for the whole cluster."""
        if self.scope == "cluster":
            return None
        return self.watch_namespace or [self.own_namespace()]

    def annotation(self, key: str) -> str:
        return f"{self.annotation_prefix}{key}"

    def slurm_token(self) -> str:
        if self.slurm_auth_token_file is not None:
            return read_secret_file(self.slurm_auth_token_file)
        if self.slurm_auth_token is not None:
            return self.slurm_auth_token.get_secret_value()
        raise ValueError("no Slurm token: set --slurm-auth-token or --slurm-auth-token-file")

    def dashboard_auth(self) -> dict[str, Any]:
        """Keyword arguments of the dashboard app's ``create_app``."""
        token = self.dashboard_token.get_secret_value() if self.dashboard_token else None
        basic = None
        if self.dashboard_basic_auth and self.dashboard_basic_auth.get_secret_value():
            user, _, password = self.dashboard_basic_auth.get_secret_value().partition(":")
            basic = (user, password)
        return {"auth_token": token or None, "basic_auth": basic}

    def hook_tokens(self) -> list[str]:
        """The accepted hook secrets, newest first (empty: none configured)."""
        if self.hooks_token_file is not None:
            try:
                return parse_tokens(read_secret_file(self.hooks_token_file))
            except OSError:
                return []  # refused with 503 and a message until the file is there
        return parse_tokens(self.hooks_token.get_secret_value()) if self.hooks_token else []


def from_args(argv: list[str] | None = None) -> Settings:
    """Settings from flags (reference names); flags override ``SUNK_*`` environment."""
    p = argparse.ArgumentParser(prog="sunk-scheduler",
                                description="Schedule Kubernetes Pods through Slurm.")
    fields = Settings.model_fields
    for name, info in fields.items():
        flag = "--" + name.replace("_", "-")
        help_text = f"(env SUNK_{name.upper()})"
        if info.annotation is bool:
            p.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction,
                           default=None, help=help_text)
        elif name in ("watch_namespace", "components"):
            p.add_argument(flag, dest=name, action="append", default=None, help=help_text)
        elif name in _PAIRS:
            p.add_argument(flag, dest=name, action="append", default=None,
                           metavar=_PAIRS[name], help=f"repeatable {help_text}")
        elif name == "log_level":  # the reference deployment passes controller-runtime's name
            p.add_argument(flag, "--zap-log-level", dest=name, default=None, help=help_text)
        else:
            p.add_argument(flag, dest=name, default=None, help=help_text)
    args = {k: v for k, v in vars(p.parse_args(argv)).items() if v is not None}
    for name, shape in _PAIRS.items():
        if name in args:
            pairs = [item.split("=", 1) for entry in args[name] for item in entry.split(",")]
            if any(len(pair) != 2 for pair in pairs):
                p.error(f"--{name.replace('_', '-')} takes {shape} pairs")
            args[name] = dict(pairs)
    return Settings(**args)


#: The settings given as ``KEY=VALUE`` pairs on the command line (comma-separated, repeatable).
_PAIRS = {"gpu_types": "MODEL=TYPE", "dra_classes": "CLASS=GRES", "dra_types": "MODEL=TYPE"}
