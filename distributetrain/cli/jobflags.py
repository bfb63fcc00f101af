"""The job flags, shared by the manager's commands (``cli``) and ``submit`` (``jobs``).

The flags are made from the job's table (``core.job.jobspec``): one parser (``Parser`` raises
UsageError instead of exiting) and one set of validators for both, so what ``submit``
checks on the user's machine is exactly what the manager accepts. Here only what the
table cannot know: argparse, and the manager pod's identity from its environment. Its
own module so that ``cli`` (which registers the jobs commands) and ``jobs`` (which need
the flags) do not import each other.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence

from distributetrain.core import errors, validation
from distributetrain.core.job import jobspec
from distributetrain.core.job.jobspec import Field
from distributetrain.core.settings import JobSettings
from distributetrain.manager.pods import discovery

# The manager pod's identity, set from the downward API (manager.yaml, jobs.manager_spec).
ENV_POD_NAME = "MANAGER_POD_NAME"
ENV_POD_NAMESPACE = "MANAGER_POD_NAMESPACE"
ENV_POD_UID = "MANAGER_POD_UID"
ENV_POD_IP = "MANAGER_POD_IP"  # where the chief asks the manager for its hosts
IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting."""

    def error(self, message: str):
        help_hint = f"see '{self.prog} --help'"
        if message.startswith("unrecognized arguments: "):
            flag = message.split(": ", 1)[1].split()[0]
            raise errors.UsageError(flag, f"unknown flag ({help_hint})")
        if message.startswith("the following arguments are required: "):
            missing = message.split(": ", 1)[1]
            raise errors.UsageError(missing.split(",")[0], f"is required ({help_hint})")
        match = re.match(r"argument (\S+?)(?:/\S+)?: (.*)", message)
        if match:
            raise errors.UsageError(match.group(1), f"{match.group(2)} ({help_hint})")
        raise errors.UsageError(self.prog, f"{message} ({help_hint})")


def split_script_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Everything after the first '--' goes to the training script untouched."""
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def _help(field: Field) -> str:
    return f"{field.help} (default {field.default_text})" if field.default_text else field.help


def _add_flag(group: argparse._ArgumentGroup, field: Field, require_image: bool) -> None:
    if field.switch:
        group.add_argument(field.flag, dest=field.name, action="store_true", help=_help(field))
        return
    options = {"action": "append", "default": []} if field.repeat else {}
    if field.bare is not None:
        options |= {"nargs": "?", "const": field.bare}
    required = field.required and (require_image or field.name != "image")
    group.add_argument(field.flag, dest=field.name, metavar=field.metavar, required=required, help=_help(field),
                       **options)


def add_job_flags(parser: argparse.ArgumentParser, require_image: bool = True, manager_identity: bool = True) -> None:
    """The job's flags, from its table; ``manager_identity`` adds the two that only the
    manager pod sets (its own name and uid, normally from the downward API), which
    `submit` never offers."""
    job = parser.add_argument_group("job")
    for field in jobspec.FLAGS:
        if manager_identity or field.name not in ("job_name", "owner_uid"):
            _add_flag(job, field, require_image)


def own_namespace(explicit: str | None) -> str:
    """``explicit``, else the manager pod's namespace (downward API, then the in-cluster file)."""
    if explicit:
        return explicit
    if os.environ.get(ENV_POD_NAMESPACE):
        return os.environ[ENV_POD_NAMESPACE]
    try:
        with open(IN_CLUSTER_NAMESPACE_FILE) as f:
            return f.read().strip()
    except OSError:
        return "default"


def _flag_texts(args: argparse.Namespace) -> dict:
    """What was typed for each flag, the manager pod's identity from its environment where not."""
    texts = {field.name: getattr(args, field.name, None) for field in jobspec.FLAGS}
    texts["job_name"] = texts["job_name"] or os.environ.get(ENV_POD_NAME, "")
    if not texts["job_name"]:
        raise errors.UsageError("--job-name", f"required outside a manager pod (or set ${ENV_POD_NAME})")
    texts["namespace"] = own_namespace(texts["namespace"])
    if texts["owner_uid"] is None:
        texts["owner_uid"] = os.environ.get(ENV_POD_UID, "")
    return texts


def settings_from_args(args: argparse.Namespace, script_args: Sequence[str]) -> JobSettings:
    """Validate every flag; the first bad one raises UsageError naming it."""
    texts = _flag_texts(args)
    manager_namespace = validation.checked("--namespace", validation.dns_label, own_namespace(None))
    pod_ip = os.environ.get(ENV_POD_IP, "")
    return jobspec.from_texts(texts, manager_namespace=manager_namespace,
                              discovery_url=discovery.hosts_url(pod_ip) if pod_ip else "",
                              script_args=tuple(script_args))
