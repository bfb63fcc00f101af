"""The user's commands: submit, list, status, logs, cancel.

They run with the user's own credentials (kubeconfig or in-cluster), never the
manager's ServiceAccount. ``submit`` validates every flag with the manager's own
parser and validators before it connects, so bad input is one line naming the flag,
exit code 2, and nothing is created.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

import yaml

from distributetrain.cli import jobflags
from distributetrain.cli.jobs import cancel, connection, lookup, manager_spec, plugin, ranks, state, table
from distributetrain.cli.jobs.api import JobsKube
from distributetrain.cli.jobs.follow import INTERRUPTED, Follower
from distributetrain.cli.jobs.manager_spec import ManagerOptions
from distributetrain.core.placement import dracounting
from distributetrain.core import errors, exitcodes, names, validation
from distributetrain.core.pods import podgroup
from distributetrain.core.clock import Clock
from distributetrain.core.job.record import JobRecord
from distributetrain.core.settings import JobSettings
from distributetrain.kube import dra
from distributetrain.manager.placement import booking, volumeclaims
from distributetrain.manager.reporting.errorcodes import exit_code_of

OUTPUT_FORMATS = ("table", "json")

Handler = Callable[[argparse.Namespace, Sequence[str], Clock], int]
log = logging.getLogger(__name__)


def register(commands: argparse._SubParsersAction) -> None:
    program = plugin.program_name()

    def add(name: str, summary: str) -> argparse.ArgumentParser:
        # Usage and error hints say what the user typed, e.g. `kubectl distributetrain list`.
        return commands.add_parser(name, prog=f"{program} {name}", help=summary)

    _add_submit(add("submit", "submit a training job: create its manager"))

    listing = add("list", "list jobs")
    connection.add_connection_flags(listing)
    listing.add_argument("-A", "--all-namespaces", action="store_true", help="jobs in every namespace")
    listing.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="table")
    listing.set_defaults(handler=_reported(run_list))

    status = add("status", "one job's phase, GPUs, nodes, why its pods wait, exit code and reason")
    status.add_argument("name", metavar="NAME")
    connection.add_connection_flags(status)
    status.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="table")
    status.set_defaults(handler=_reported(run_status))

    logs = add("logs", "the chief's output (the training), or the manager's")
    logs.add_argument("name", metavar="NAME")
    logs.add_argument("-f", "--follow", action="store_true", help="stream until the container ends")
    logs.add_argument("--manager", action="store_true", help="the manager's output instead of the chief's")
    logs.add_argument("--rank", metavar="N",
                      help="only Horovod rank N's lines of the chief's output, without their [N]<stdout>: prefix")
    connection.add_connection_flags(logs)
    logs.set_defaults(handler=_reported(run_logs))

    cancelling = add("cancel", "delete a job: its manager and everything it created")
    cancelling.add_argument("name", metavar="NAME")
    cancelling.add_argument("--timeout", default=cancel.DEFAULT_CANCEL_TIMEOUT, metavar="DURATION",
                            help=f"how long to wait for everything to be gone (default {cancel.DEFAULT_CANCEL_TIMEOUT})")
    connection.add_connection_flags(cancelling)
    cancelling.set_defaults(handler=_reported(run_cancel))


def _add_submit(submit: argparse.ArgumentParser) -> None:
    """`submit`'s flags: the job's, and how its manager runs."""
    jobflags.add_job_flags(submit, manager_identity=False)  # the manager's own name is --name
    manager = submit.add_argument_group("manager")
    manager.add_argument("--name", help=f"the job's name (default: {manager_spec.GENERATED_NAME_PREFIX}"
                                        f"<{manager_spec.GENERATED_NAME_RANDOM_CHARS} random characters>)")
    manager.add_argument("--as-job", action="store_true", help="run the manager in a batch/v1 Job (default: a Pod)")
    manager.add_argument("--ttl-after-finished", metavar="DURATION",
                         help="with --as-job: delete the Job and the whole job this long after it ends (default 24h)")
    manager.add_argument("--manager-image", default=manager_spec.DEFAULT_MANAGER_IMAGE,
                         help=f"default {manager_spec.DEFAULT_MANAGER_IMAGE}")
    manager.add_argument("--manager-service-account", default=manager_spec.DEFAULT_MANAGER_SERVICE_ACCOUNT,
                         help=f"the manager's identity, bound by rbac/ "
                              f"(default {manager_spec.DEFAULT_MANAGER_SERVICE_ACCOUNT})")
    manager.add_argument("--manager-node-selector", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                         help="run the manager only on nodes with these labels (it needs no GPU)")
    manager.add_argument("--dry-run", action="store_true", help="print the manager's YAML and create nothing")
    manager.add_argument("-f", "--follow", action="store_true",
                         help="show progress and the chief's output; exit with the job's exit code")
    connection.add_connection_flags(submit, namespace=False)
    submit.set_defaults(handler=_reported(run_submit))


def _reported(handler: Handler) -> Handler:
    """API and lookup failures become one line on stderr and their exit code."""

    @functools.wraps(handler)
    def reported(args: argparse.Namespace, script_args: Sequence[str], clock: Clock) -> int:
        if script_args and args.command != "submit":
            raise errors.UsageError("--", "only submit takes arguments for the training script")
        try:
            return handler(args, script_args, clock)
        except errors.UsageError:
            raise  # cli.main prints it
        except errors.DistributeTrainError as e:
            print(f"distributetrain: error: {e}", file=sys.stderr)
            return exit_code_of(e)
        except KeyboardInterrupt:
            return INTERRUPTED

    return reported


def submission(args: argparse.Namespace, script_args: Sequence[str]) -> tuple[JobSettings, ManagerOptions]:
    """Every flag validated, before anything touches the cluster."""
    if args.ttl_after_finished and not args.as_job:
        raise errors.UsageError("--ttl-after-finished", "applies only with --as-job")
    if args.follow and args.dry_run:
        raise errors.UsageError("--follow", "a --dry-run creates nothing to follow")
    name = args.name or manager_spec.generated_name()
    validation.checked("--name", lambda t: validation.dns_label(t, manager_spec.max_name_length(args.as_job)), name)
    job_args = argparse.Namespace(**vars(args))
    job_args.job_name, job_args.owner_uid = name, ""
    job_args.namespace = connection.namespace_of(args)
    settings = jobflags.settings_from_args(job_args, script_args)
    ttl_s = manager_spec.DEFAULT_JOB_TTL_S
    if args.ttl_after_finished:
        ttl_s = round(validation.checked("--ttl-after-finished", validation.duration_s, args.ttl_after_finished))
    options = ManagerOptions(
        image=validation.checked("--manager-image", validation.image, args.manager_image),
        service_account=validation.checked("--manager-service-account", validation.dns_subdomain,
                                           args.manager_service_account),
        as_job=args.as_job,
        ttl_after_finished_s=ttl_s,
        node_selector=tuple(validation.checked("--manager-node-selector", validation.key_value, term)
                            for flag in args.manager_node_selector for term in flag.split(",") if term),
    )
    return settings, options


def run_submit(args: argparse.Namespace, script_args: Sequence[str], clock: Clock) -> int:
    settings, options = submission(args, script_args)
    manager = manager_spec.manager_object(settings, options)
    if args.dry_run:
        print(yaml.safe_dump(manager, sort_keys=False), end="")
        return exitcodes.OK
    kube = connection.connect(args, clock)
    name, namespace = settings.job_name, settings.namespace
    try:
        lookup.find_job(kube, namespace, name)
    except errors.JobNotFound:
        pass
    else:
        raise errors.UsageError("--name", f"a job named {name!r} already exists in namespace {namespace!r}")
    # The namespace's rule first: a job without --queue where Kueue gates every pod is bad
    # input whatever the nodes are (queued, it may wait for nodes an autoscaler adds).
    manager = _through_kueue(kube, settings, options, manager)
    _check_against_nodes(kube, settings)
    try:
        kube.create(manager)
    except errors.AlreadyExists:
        raise errors.UsageError("--name", f"a {manager['kind']} named {name!r} already exists "
                                          f"in namespace {namespace!r}") from None
    except errors.NotFound as e:
        raise errors.UsageError("--namespace", f"cannot create the manager in {namespace!r}: {e}") from None
    print(name, flush=True)
    if args.follow:
        return Follower(kube, namespace, name, sys.stdout, sys.stderr, clock).follow()
    return exitcodes.OK


def _check_against_nodes(kube: JobsKube, settings: JobSettings) -> None:
    """The manager's own check that the nodes could ever hold the job (``booking.check_nodes``),
    run with the user's credentials, so a request the manager would refuse as bad input is
    refused before anything is created; so is a ``--pvc`` claim that does not exist or that
    no plan could serve (``volumeclaims``). What the user may not list or read (nodes, a
    claim's PersistentVolume) is left to the manager."""
    claims = volumeclaims.read_claims(kube, settings, uses=False, unreadable_ok=True)
    try:
        nodes = [node for page, _ in kube.list_pages("Node") for node in page]
        dra_devices = _dra_devices(kube, settings)
    except errors.Forbidden as e:
        log.info("cannot list nodes or DRA GPUs (%s); the manager checks the request against them", e)
        return
    booking.check_nodes(nodes, settings, claims, dra_devices)


def _dra_devices(kube: JobsKube, settings: JobSettings) -> dict[str, int]:
    """Each node's devices of the job's DeviceClass (``dracounting``), allocated or not: what
    it could ever give the job (none for a queued job: its pods request extended resources)."""
    selector = booking.read_device_class(kube, settings)
    if selector is None:
        return {}
    devices = dracounting.class_devices(dracounting.node_devices(dra.listed(kube, dra.SLICES)), selector)
    return {node: len(ids) for node, ids in devices.items()}


def _through_kueue(kube: JobsKube, settings: JobSettings, options: ManagerOptions, manager: dict) -> dict:
    """The manager as this namespace lets it run. Where Kueue queues every pod, queue name or
    not (``manageJobsWithoutQueueName``: its webhook gates even the manager's dry run), the
    manager goes through the job's queue (``manager_spec.in_queue``), and a job without
    ``--queue`` is refused: its manager would wait for ever."""
    try:
        probe = kube.create(manager_spec.manager_pod(settings, options), dry_run=True)
    except errors.ApiError as e:  # a webhook of the cluster that cannot dry-run: Kueue's can
        if type(e) is not errors.ApiError:
            raise  # a refusal the API names (not found, forbidden, a quota...): the job's own, reported as it
        log.debug("dry run of the manager refused (%s): taken as outside Kueue", e)
        return manager
    podgroup.refuse_unqueued(settings, probe)
    return manager_spec.in_queue(manager, settings.queue) if podgroup.kueue_gated(probe) else manager


def _now(clock: Clock) -> datetime:
    return datetime.fromtimestamp(clock.now(), timezone.utc)


def run_list(args: argparse.Namespace, _script_args: Sequence[str], clock: Clock) -> int:
    kube = connection.connect(args, clock)
    namespace = None if args.all_namespaces else connection.namespace_of(args)
    statuses = [found.status for found in lookup.list_jobs(kube, namespace)]
    now = _now(clock)
    if args.output == "json":
        print(table.dumps({"items": [table.status_json(s, None, now) for s in statuses]}), end="")
    elif not statuses:
        print(f"No jobs in {'any namespace' if namespace is None else f'namespace {namespace}'}.", file=sys.stderr)
    else:
        print(table.job_table(statuses, now, with_namespace=namespace is None), end="")
    return exitcodes.OK


def run_status(args: argparse.Namespace, _script_args: Sequence[str], clock: Clock) -> int:
    kube = connection.connect(args, clock)
    found = lookup.find_job(kube, connection.namespace_of(args), args.name)
    status, progress = found.status, None
    if found.manager is not None:
        progress = state.progress_of(found.manager, lookup.children(found, lookup.job_pods(kube, found)))
        status = dataclasses.replace(status, phase=state.phase_with_pods(status.phase, progress))
    now = _now(clock)
    if args.output == "json":
        print(table.dumps(table.status_json(status, progress, now)), end="")
    else:
        print(table.status_text(status, progress, now), end="")
    return exitcodes.OK


def run_logs(args: argparse.Namespace, _script_args: Sequence[str], clock: Clock) -> int:
    rank = None if args.rank is None else validation.checked("--rank", ranks.parse_rank, args.rank)
    if rank is not None and args.manager:
        raise errors.UsageError("--rank", "selects lines of the chief's output (the training), not the manager's")
    kube = connection.connect(args, clock)
    namespace = connection.namespace_of(args)
    found = lookup.find_job(kube, namespace, args.name)
    if not found.job_name:
        raise errors.JobNotFound(f"job {args.name!r} has no manager pod yet ({found.status.phase})")
    if args.manager:
        pod, container = found.job_name, manager_spec.MANAGER_CONTAINER
    else:
        pod, container = names.chief_name(found.job_name, JobRecord.of(found.manager or {}).attempt), state.CHIEF_CONTAINER
        if kube.read("Pod", namespace, pod) is None:
            raise errors.JobNotFound(f"job {args.name!r} has no chief pod ({found.status.phase}); "
                                 f"see 'distributetrain logs --manager {args.name}'")
    one_rank = None if rank is None else ranks.RankFilter(rank)
    for text in kube.pod_log(namespace, pod, container, follow=args.follow):
        _write(text if one_rank is None else one_rank.feed(text))
    if one_rank is not None:
        _write(one_rank.flush())
    return exitcodes.OK


def _write(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


def run_cancel(args: argparse.Namespace, _script_args: Sequence[str], clock: Clock) -> int:
    timeout_s = validation.checked("--timeout", validation.duration_s, args.timeout)
    kube = connection.connect(args, clock)
    found = lookup.find_job(kube, connection.namespace_of(args), args.name)
    result = cancel.cancel(kube, found, timeout_s, clock)
    for obj in result.deleted:
        print(f"deleted {obj}")
    if result.remaining:
        print(f"distributetrain: error: still there after {args.timeout}: {', '.join(result.remaining)}",
              file=sys.stderr)
        return exitcodes.TIMED_OUT
    return exitcodes.OK
