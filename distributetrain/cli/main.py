"""Command line: parse and validate at the edge, then hand a JobSettings to the lifecycle.

Users' commands come first (`submit`, `list`, `status`, `logs`, `cancel`, `render`,
see ``cli.jobs``); the manager pod's commands, which manager.sh runs, are listed apart:

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
import gc
import logging
import signal
import sys
from collections.abc import Sequence

from distributetrain.cli.jobflags import Parser, add_job_flags, settings_from_args, split_script_args
from distributetrain.cli.jobs import commands as job_commands
from distributetrain.cli.jobs import plugin
from distributetrain.core import errors, exitcodes
from distributetrain.core.clock import Clock, RealClock
from distributetrain.manager.reporting.errorcodes import exit_code_of

log = logging.getLogger(__name__)

MANAGER_COMMANDS = ("pre-training", "post-training", "run", "teardown")
MANAGER_COMMANDS_HELP = (f"manager pod commands (manager.sh runs them, see manager_image/): "
                         f"{', '.join(MANAGER_COMMANDS)}")


def build_parser() -> Parser:
    parser = Parser(prog=plugin.program_name(), description="Horovod distributed training on Kubernetes.",
                    epilog=MANAGER_COMMANDS_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")
    job_commands.register(commands)
    render = commands.add_parser("render", help="print the YAML of every object a job would create")
    add_job_flags(render)
    render.add_argument("--nodes", required=True, metavar="NODE=FREE[,NODE=FREE]",
                        help="free GPUs per node to plan on, e.g. gpu-a=5,gpu-b=3")
    render.add_argument("--dra-nodes", default="", metavar="NODE[,NODE]",
                        help="those of --nodes whose GPUs a DRA driver publishes: their pods claim them (--device-class)")
    render.set_defaults(handler=run_render)
    for command in MANAGER_COMMANDS:
        # No help: listed in the epilog, apart from the users' commands.
        sub = commands.add_parser(command)
        add_job_flags(sub)
        sub.add_argument("--kubeconfig", help="outside a pod: kubeconfig file (in a pod: ignored)")
        sub.add_argument("--context", help="outside a pod: kubeconfig context (in a pod: ignored)")
        if command == "teardown":
            sub.add_argument("--unless-restarting", action="store_true",
                             help="do nothing if the manager's container will be restarted (it adopts the job)")
            sub.add_argument("--failed-with", type=int, metavar="EXIT_CODE",
                             help="record this exit code as the job's outcome, unless one is recorded already")
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


def main(argv: Sequence[str] | None = None) -> int:
    """The process's entry (the user's commands and the manager's alike): its one real clock."""
    # SIGTERM (a CI step's timeout, a closed session) ends a user's command the way Ctrl-C
    # does, through an exception: `finally` blocks and atexit run, and the client's atexit
    # deletes the copies of the kubeconfig's certificates and key it wrote to the temporary
    # directory. The manager's lifecycle puts its own handler (teardown) in place of this one.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    return dispatch(sys.argv[1:] if argv is None else argv, RealClock())


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    raise SystemExit(exitcodes.CANCELLED)


def dispatch(argv: Sequence[str], clock: Clock) -> int:
    """The command ``argv`` names, every wait and timestamp of it on ``clock``."""
    flags, script_args = split_script_args(argv)
    try:
        args = build_parser().parse_args(flags)
        configure_logging(args.verbose)
        if hasattr(args, "handler"):
            return args.handler(args, script_args, clock)
        return run_manager(args, script_args, clock)
    except errors.UsageError as e:
        print(f"distributetrain: error: {e}", file=sys.stderr)
        return exit_code_of(e)


def run_render(args: argparse.Namespace, script_args: list[str], _clock: Clock) -> int:
    """`render`: the job's objects from its flags and ``--nodes`` alone, no cluster."""
    from distributetrain.cli.render import render

    print(render(settings_from_args(args, script_args), args.nodes, args.dra_nodes), end="")
    return exitcodes.OK


def run_manager(args: argparse.Namespace, script_args: list[str], clock: Clock) -> int:
    """The manager pod's commands: the job's settings from its flags, then its lifecycle."""
    settings = settings_from_args(args, script_args)
    from distributetrain.kube.client import Kube
    from distributetrain.kube.connection import load_api_client
    from distributetrain.manager.job.lifecycle import execute

    # The manager acts as its pod's ServiceAccount (rbac/), whatever kubeconfig its image holds
    # or its arguments name.
    kube = Kube(load_api_client(args.kubeconfig, args.context, in_cluster_first=True), clock)
    freeze_start_up()
    return execute(kube, settings, args.command, clock, getattr(args, "unless_restarting", False),
                   getattr(args, "failed_with", None))


def freeze_start_up() -> None:
    """Every object the manager's start-up made (its modules, the client's: some 100,000,
    which live as long as the process) out of the garbage collector's reach. A collection
    walked them all, and decoding a large cluster's survey and building the job's ledger
    (5,000 nodes) allocates enough to set off several: frozen, that took 0.11 s of CPU, not
    0.27, and a burst of managers builds theirs at once (bench/many_managers)."""
    gc.collect()
    gc.freeze()
