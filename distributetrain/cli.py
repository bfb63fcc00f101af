"""Command line: parse and validate at the edge, then hand a JobSettings to the lifecycle.

    python -m distributetrain pre-training  --num-gpus 6 --image IMG [flags] [-- script args]
    python -m distributetrain post-training --num-gpus 6 --image IMG [flags]
    python -m distributetrain run           (both, in one process)
    python -m distributetrain teardown      (delete what the job created)
    python -m distributetrain render --num-gpus 6 --nodes gpu-a=5,gpu-b=3 --image IMG --job-name NAME

Every bad input is one line on stderr naming the flag and the valid form, exit code 2,
and nothing is created.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence

from distributetrain import errors, exitcodes, names, validation
from distributetrain.settings import DEFAULT_FILENAME, DEFAULT_GPU_RESOURCE, DEFAULT_PORT, JobSettings, PvcMount

log = logging.getLogger(__name__)

ENV_POD_NAME = "MANAGER_POD_NAME"
ENV_POD_NAMESPACE = "MANAGER_POD_NAMESPACE"
ENV_POD_UID = "MANAGER_POD_UID"
IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
MANAGER_COMMANDS = ("pre-training", "post-training", "run", "teardown")


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


def _checked(flag: str, parse: Callable, text: str):
    try:
        return parse(text)
    except ValueError as e:
        raise errors.UsageError(flag, str(e)) from None


def add_job_flags(parser: argparse.ArgumentParser, require_image: bool = True) -> None:
    job = parser.add_argument_group("job")
    job.add_argument("--num-gpus", required=True, metavar="N", help="GPUs in all (= Horovod processes)")
    job.add_argument("--image", required=require_image, metavar="IMAGE", help="training image (base_image/)")
    job.add_argument("--port", default=str(DEFAULT_PORT), help=f"workers' sshd port (default {DEFAULT_PORT})")
    job.add_argument("--filename", default=DEFAULT_FILENAME, help=f"training script (default {DEFAULT_FILENAME})")
    job.add_argument("--host-network", default="false", nargs="?", const="true", metavar="true|false",
                     help="run job pods on the node's network (default false)")
    job.add_argument("--namespace", help="namespace of the job (default: the manager's own)")
    job.add_argument("--job-name", help=f"job name (default: ${ENV_POD_NAME}, the manager pod's name)")
    job.add_argument("--owner-uid", help=f"uid owning the job's objects (default: ${ENV_POD_UID})")
    job.add_argument("--gpu-resource", default=DEFAULT_GPU_RESOURCE, help=f"default {DEFAULT_GPU_RESOURCE}")
    job.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                     help="only nodes with these labels")
    job.add_argument("--toleration", action="append", default=[], metavar="KEY[=VALUE][:EFFECT]",
                     help="taint the job's pods tolerate (repeatable)")
    job.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="environment of the training script (repeatable)")
    job.add_argument("--pvc", action="append", default=[], metavar="CLAIM:/PATH[:ro]",
                     help="PersistentVolumeClaim mounted in every job pod (repeatable)")
    job.add_argument("--worker-ready-timeout", default="5m", metavar="DURATION",
                     help="release and re-plan if workers are not Ready by then (default 5m)")
    job.add_argument("--active-deadline", metavar="DURATION", help="deadline of the whole job (default none)")
    job.add_argument("--wait-for-gpus", default="0s", metavar="DURATION",
                     help="wait this long for free GPUs instead of failing at once (default 0s)")
    job.add_argument("--ssh-attempts", default="30", metavar="N", help="chief's SSH checks per worker (default 30)")
    job.add_argument("--delete-chief", action="store_true", help="delete the chief too when it finishes")
    job.add_argument("--lock-namespace", help="namespace of the placement Lease (default: the job's)")
    job.add_argument("--service-account", default="", help="ServiceAccount of job pods (default: none mounted)")


def _namespace(explicit: str | None) -> str:
    if explicit:
        return explicit
    if os.environ.get(ENV_POD_NAMESPACE):
        return os.environ[ENV_POD_NAMESPACE]
    try:
        with open(IN_CLUSTER_NAMESPACE_FILE) as f:
            return f.read().strip()
    except OSError:
        return "default"


def settings_from_args(args: argparse.Namespace, script_args: Sequence[str]) -> JobSettings:
    """Validate every flag; the first bad one raises UsageError naming it."""
    job_name = args.job_name or os.environ.get(ENV_POD_NAME, "")
    if not job_name:
        raise errors.UsageError("--job-name", f"required outside a manager pod (or set ${ENV_POD_NAME})")
    _checked("--job-name", lambda t: validation.dns_label(t, names.MAX_JOB_NAME_LENGTH), job_name)
    namespace = _checked("--namespace", validation.dns_label, _namespace(args.namespace))
    host_network = _checked("--host-network", validation.boolean, args.host_network)
    port = _checked("--port", validation.port, args.port)
    if host_network and port < validation.FIRST_UNPRIVILEGED_PORT:
        raise errors.UsageError(
            "--port", f"must be {validation.FIRST_UNPRIVILEGED_PORT} to {validation.MAX_PORT} with "
            f"--host-network true (privileged ports on the node are refused), got {port}"
        )
    if not args.filename.startswith("/"):
        raise errors.UsageError("--filename", f"must be an absolute path inside the image, got {args.filename!r}")
    selector = [
        _checked("--node-selector", validation.key_value, term)
        for flag in args.node_selector for term in flag.split(",") if term
    ]
    deadline = _checked("--active-deadline", validation.duration_s, args.active_deadline) if args.active_deadline else None
    return JobSettings(
        job_name=job_name,
        namespace=namespace,
        num_gpus=_checked("--num-gpus", validation.positive_int, args.num_gpus),
        image=_checked("--image", validation.image, args.image),
        owner_uid=args.owner_uid if args.owner_uid is not None else os.environ.get(ENV_POD_UID, ""),
        port=port,
        filename=args.filename,
        host_network=host_network,
        script_args=tuple(script_args),
        env=tuple(_checked("--env", validation.env_var, e) for e in args.env),
        pvcs=tuple(PvcMount(*_checked("--pvc", validation.pvc_mount, p)) for p in args.pvc),
        gpu_resource=_checked("--gpu-resource", validation.resource_name, args.gpu_resource),
        node_selector=tuple(selector),
        tolerations=tuple(_checked("--toleration", validation.toleration, t) for t in args.toleration),
        worker_ready_timeout_s=_checked("--worker-ready-timeout", validation.duration_s, args.worker_ready_timeout),
        active_deadline_s=deadline,
        wait_for_gpus_s=_checked("--wait-for-gpus", validation.duration_s, args.wait_for_gpus),
        ssh_connect_attempts=_checked("--ssh-attempts", validation.positive_int, args.ssh_attempts),
        delete_chief=args.delete_chief,
        manager_namespace=_checked("--namespace", validation.dns_label, _namespace(None)),
        lock_namespace=_checked("--lock-namespace", validation.dns_label, args.lock_namespace) if args.lock_namespace else "",
        service_account=args.service_account,
    )


def build_parser() -> Parser:
    parser = Parser(prog="distributetrain", description="Horovod distributed training on Kubernetes.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")
    for command in MANAGER_COMMANDS:
        sub = commands.add_parser(command, help=f"manager: {command}")
        add_job_flags(sub)
        sub.add_argument("--kubeconfig", help="outside a pod: kubeconfig file")
        sub.add_argument("--context", help="outside a pod: kubeconfig context")
        if command == "teardown":
            sub.add_argument("--unless-restarting", action="store_true",
                             help="do nothing if the manager's container will be restarted (it adopts the job)")
    render = commands.add_parser("render", help="print the YAML of every object a job would create")
    add_job_flags(render)
    render.add_argument("--nodes", required=True, metavar="NODE=FREE[,NODE=FREE]",
                        help="free GPUs per node to plan on, e.g. gpu-a=5,gpu-b=3")
    from distributetrain.jobs import commands as job_commands
    job_commands.register(commands)
    return parser


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not verbose:
        logging.getLogger("kubernetes").setLevel(logging.WARNING)
        logging.getLogger("urllib3").setLevel(logging.ERROR)


def split_script_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Everything after the first '--' goes to the training script untouched."""
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def main(argv: Sequence[str] | None = None) -> int:
    flags, script_args = split_script_args(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(flags)
        configure_logging(args.verbose)
        return args.handler(args, script_args) if hasattr(args, "handler") else run_manager(args, script_args)
    except errors.UsageError as e:
        print(f"distributetrain: error: {e}", file=sys.stderr)
        return exitcodes.USAGE


def run_manager(args: argparse.Namespace, script_args: list[str]) -> int:
    settings = settings_from_args(args, script_args)
    if args.command == "render":
        from distributetrain.render import render

        print(render(settings, args.nodes), end="")
        return exitcodes.OK
    from distributetrain.kube import Kube, load_api_client
    from distributetrain.lifecycle import execute

    kube = Kube(load_api_client(args.kubeconfig, args.context))
    return execute(kube, settings, args.command, getattr(args, "unless_restarting", False))
