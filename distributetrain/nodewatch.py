"""Noticing a lost node while the job runs: its pods are deleted at once.

When a node's kubelet stops reporting, the node lifecycle controller marks it Ready
Unknown after its grace period (``--node-monitor-grace-period``, 50 s by default) and
taints it; the taint evicts pods only once their toleration runs out (job pods tolerate
it for ``settings.NODE_LOST_TOLERATION_S``, most pods for 300 s). The manager does not
wait for that eviction: it watches the Nodes, and when one holding the job's pods stops
being Ready or is deleted, it deletes those pods itself, with the reason on each. The
pod watch then sees them go like any lost pod: a restart, a shrink (``--elastic``) or
exit 71. The Nodes are watched on a thread beside the pod watch, from the workers'
creation to the chief's end, so a lost node is acted on within a second of the
controller's verdict.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from distributetrain import errors, events, names, podstate
from distributetrain.inventory import node_not_ready
from distributetrain.kube import Kube
from distributetrain.reporting import Reporter
from distributetrain.settings import JobSettings
from distributetrain.teardown import delete_because

log = logging.getLogger(__name__)

WATCH_SPAN_S = 5.0  # one watch call: how soon the thread notices it was told to stop
RELIST_DELAY_S = 1.0  # after a failed list or watch: never a busy loop


def lost_nodes(nodes: Mapping[str, dict | None]) -> dict[str, str]:
    """Node name -> why it is lost ("was deleted", "is not Ready (NodeStatusUnknown: ...)")."""
    lost = {}
    for name, node in nodes.items():
        if node is None:
            lost[name] = "was deleted"
        elif (why := node_not_ready(node)) is not None:
            lost[name] = f"is not Ready ({why})"
    return lost


def pods_to_delete(pods: list[dict]) -> list[str]:
    """The job's workers and chief that still run or wait: never the manager, nor a finished pod."""
    return sorted(
        pod["metadata"]["name"] for pod in pods
        if (pod["metadata"].get("labels") or {}).get(names.LABEL_ROLE) in (names.ROLE_WORKER, names.ROLE_CHIEF)
        and not podstate.is_terminating(pod) and not podstate.is_finished(pod)
    )


class NodeWatch:
    """While open, deletes the job's pods on any node that is lost (a context manager)."""

    def __init__(self, kube: Kube, settings: JobSettings, reporter: Reporter):
        self.kube = kube
        self.settings = settings
        self.reporter = reporter
        self._stop = threading.Event()
        self._handled: set[str] = set()  # lost nodes already acted on; forgotten when Ready again
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)

    def __enter__(self) -> NodeWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Not joined: its current watch call ends within WATCH_SPAN_S, and it acts on
        # nothing once told to stop (teardown owns the pods from here).
        self._stop.set()

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    items, version = self.kube.list_all("nodes")
                    nodes = {node["metadata"]["name"]: node for node in items}
                    self._handled &= set(nodes)
                    self._act(nodes)
                for kind, node in self.kube.watch_nodes(version, WATCH_SPAN_S):
                    version = node["metadata"].get("resourceVersion", version)
                    if kind == "BOOKMARK":
                        continue
                    # Only the node that changed: a large cluster's nodes report every minute.
                    self._act({node["metadata"]["name"]: None if kind == "DELETED" else node})
                    if self._stop.is_set():
                        return
            except errors.Gone:
                version = ""
            except errors.TransientApiError as e:
                log.warning("watch of nodes failed (%s); listing again", e)
                version = ""
                time.sleep(RELIST_DELAY_S)
            except errors.DistributeTrainError as e:
                # Without it (RBAC from an older release: list but not watch nodes) the
                # job still runs; a lost node's pods go when the taint evicts them.
                log.error("cannot watch nodes (%s): a lost node is noticed only when its pods are evicted", e)
                return

    def _act(self, nodes: Mapping[str, dict | None]) -> None:
        lost = lost_nodes(nodes)
        self._handled -= set(nodes) - set(lost)  # Ready again: a later loss is acted on anew
        new = {name: why for name, why in lost.items() if name not in self._handled}
        if not new or self._stop.is_set():
            return
        settings = self.settings
        # One list for all the newly lost nodes (a relist may find many not Ready at once).
        pods, _ = self.kube.list_all("pods", settings.namespace, label_selector=names.job_selector(settings.job_name))
        for node, why in new.items():
            doomed = pods_to_delete([pod for pod in pods if podstate.node(pod) == node])
            try:
                if doomed:
                    self._delete(node, why, doomed)
            except errors.TransientApiError:
                raise  # not marked handled: tried again after the list that follows
            except errors.DistributeTrainError as e:
                log.error("job %s: could not delete the pods on lost node %s: %s", settings.job_name, node, e)
            self._handled.add(node)

    def _delete(self, node: str, why: str, doomed: list[str]) -> None:
        settings = self.settings
        cause = f"its node {node} {why}"
        log.warning("job %s: node %s %s: deleting its pods %s", settings.job_name, node, why, ", ".join(doomed))
        self.reporter.events.record(events.NODE_LOST, f"node {node} {why}: deleted {', '.join(doomed)}")
        for name in doomed:
            delete_because(self.kube, settings.namespace, name, cause)
