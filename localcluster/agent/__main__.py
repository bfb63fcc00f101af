"""Entry point of the node agent: wires the parts together and handles SIGTERM.

Started by the cluster launcher (see settings.py for the command line). It
brings up the node namespaces and their kubelet API endpoints, registers the
Nodes, then runs pods bound to them until SIGTERM/SIGINT, when it stops every
pod, removes namespaces and Node objects, and exits 0. `DIR/ready` appears
once every node is Ready and schedulable.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time

from localcluster.agent import controls
from localcluster.agent.events import EventRecorder
from localcluster.agent.images import NodeImages
from localcluster.agent.kubeapi import KubeApi, Unavailable
from localcluster.agent.logserver import KubeletServer
from localcluster.agent.network import NodeNetwork
from localcluster.agent.nodes import NodeHeartbeat, NodeServedElsewhere, node_resources
from localcluster.agent.objects import ApiObjects
from localcluster.agent.podwatch import PodDispatcher, PodWatcher
from localcluster.agent.podworker import PodWorker, WorkerDeps
from localcluster.agent.runtime import remove_agent_containers
from localcluster.agent.settings import AgentSettings, parse_args
from localcluster.agent.statusmanager import StatusManager
from localcluster.agent.supervisor import Supervisor

log = logging.getLogger("localcluster.agent")

APISERVER_WAIT_S = 120
APISERVER_POLL_S = 1


class NodeAgent:
    """All nodes of one agent process and the threads that run their pods."""

    def __init__(self, settings: AgentSettings):
        self.settings = settings
        self.api = KubeApi(settings.kubeconfig)
        self.supervisor = Supervisor()
        self.status = StatusManager(self.api)
        self.events = EventRecorder(self.api)
        self.networks = {node.name: NodeNetwork(node, settings.bridge) for node in settings.nodes}
        self.images = {
            node.name: NodeImages(
                controls.pulled_images_file(settings.state_dir, node.name),
                (settings.pull_delays_file, controls.node_pull_delays_file(settings.state_dir, node.name)),
            )
            for node in settings.nodes
        }
        self.servers: list[KubeletServer] = []
        self.heartbeat: NodeHeartbeat | None = None
        self.dispatcher = PodDispatcher({node.name for node in settings.nodes}, self._new_worker)
        self.objects = ApiObjects(self.api)

    def _new_worker(self, pod: dict) -> PodWorker:
        node = next(n for n in self.settings.nodes if n.name == pod["spec"]["nodeName"])
        deps = WorkerDeps(
            settings=self.settings,
            objects=self.objects,
            supervisor=self.supervisor,
            status=self.status,
            events=self.events,
            images=self.images[node.name],
            node_network=self.networks[node.name],
            allocatable=node_resources(self.settings, node),
            on_done=self.dispatcher.done,
        )
        return PodWorker(pod, deps)

    def start(self, stop: threading.Event) -> None:
        """Bring everything up; returns once the nodes are schedulable (or stop was set)."""
        settings = self.settings
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        settings.ready_file.unlink(missing_ok=True)
        version = self._wait_for_apiserver(stop)
        self.heartbeat = NodeHeartbeat(self.api, settings, version)
        self.heartbeat.wait_until_unserved(stop)
        # A crashed agent's containers: their pods are started afresh.
        removed = remove_agent_containers(str(settings.state_dir))
        if removed:
            log.warning("removed %d containers a previous agent left", removed)
        self.supervisor.start()
        self.status.start()
        self.events.start()
        for network in self.networks.values():
            network.create()
        for node in settings.nodes:
            server = KubeletServer(node, settings.kubelet_port, settings.kubelet_cert, settings.kubelet_key,
                                   self.dispatcher.find)
            server.start()
            self.servers.append(server)
        self.heartbeat.register_all()
        self.heartbeat.start()
        PodWatcher(self.api, self.dispatcher).start()
        if self.heartbeat.wait_schedulable(stop):
            settings.ready_file.write_text("ready\n")
            log.info("nodes %s are Ready", ", ".join(node.name for node in settings.nodes))

    def _wait_for_apiserver(self, stop: threading.Event) -> str:
        deadline = time.monotonic() + APISERVER_WAIT_S
        while True:
            try:
                return self.api.server_version()
            except Unavailable as error:
                if time.monotonic() > deadline or stop.is_set():
                    raise
                log.info("waiting for the apiserver: %s", error)
                stop.wait(APISERVER_POLL_S)

    def stop(self) -> None:
        """Stop all pods, then remove the nodes and their namespaces; safe after a partial start."""
        self.settings.ready_file.unlink(missing_ok=True)
        self.dispatcher.shutdown()
        remove_agent_containers(str(self.settings.state_dir))
        if self.heartbeat is not None:
            self.heartbeat.stop_and_delete()
        for server in self.servers:
            server.stop()
        for network in self.networks.values():
            network.destroy()
        self.status.stop()
        log.info("%d pod status writes in this agent's life", self.status.writes)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()

    def request_stop(signum: int, _frame) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    agent = NodeAgent(settings)
    try:
        agent.start(stop)
        while not stop.wait(1):
            pass
    except NodeServedElsewhere as error:
        log.error("%s; not starting", error)
        return 1
    finally:
        agent.stop()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
