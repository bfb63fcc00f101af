"""The one in-memory stand-in for ``Kube`` in the manager's unit tests.

An object tracker, as client-go's fake clientset is (``k8s.io/client-go/testing``): it holds
nodes, pods, Secrets, Leases, quotas, Events, DRA objects and the manager's own pod, and
every write reaches the watches open on its kind, each at the next resourceVersion (a list
returns the current one; a watch from a version plays every write after it, then each as it
comes). It keeps the code's own writes and its pod watches in ``actions`` as (verb, kind,
name), in order, so a test can compare what the manager did as a whole list (as
mpi-operator's controller tests compare action lists); ``annotated`` keeps each annotation
patch, in order. It implements ``KubeApi``, the Protocol taken from ``Kube``;
``test_fakekube`` holds both to its signatures, so a change to ``Kube`` breaks this fake
instead of leaving the tests to pass against calls the manager does not make.

What the tests script:
- ``put(...)`` and ``remove(obj)``: what others write (a node's kubelet, another tenant, a
  quota's controller, the kubelet's Events; as ``tracker.Add``): the scene before, or a
  change while the code watches. Not in ``actions``;
- ``pod_watches``: each watch of the job's pods plays the next script (the kubelet's story):
  (event type, pod) pairs, or (pod name, new status) for a pod it holds, or a function of
  the fake returning either (for pods that exist only once the manager created them), or an
  exception to raise; a watch with no script left (or None) waits out its timeout.
  ``on_pod_watch(fake)``, if set, runs instead of the scripts (a story of its own: e.g. the
  chief ends once a replacement exists). The watch of every namespace's pods (free GPUs
  followed) is the tracker's, as the other kinds' watches are;
- ``break_node_watch(error)``: the node watch ends with an error;
- ``dra_served = False`` answers DRA reads with 404 (no ``resource.k8s.io/v1``);
- ``failures``: exceptions a call raises, in turn, by "VERB KIND" ("patch Pod", "read
  LocalQueue", "delete_collection Pod"; "annotate Pod" for an annotation's patch) or by
  verb alone (``list_pages``, ``create_owned``...); None for a call that succeeds;
- ``pods_stay_terminating``: a deleted pod stays, terminating (as on a dead node);
- ``on_create``: functions that change each object created, as mutating webhooks do
  (Kueue's adds its scheduling gates to the pods of a queue).

The user's commands (``cli.jobs.api.JobsKube``) run on it too, with ``in_manager_pod=False``
(the CLI runs outside any pod): ``put`` sets the scene with Pods, batch/v1 Jobs and
Secrets; ``create`` keeps every object sent (``created``; ``dry_runs``); deleting a
manager pod or Job deletes what it owns, as its teardown and the garbage collector
would, except the pods in ``stuck``; ``logs`` holds each container's log; a pod watch
with no script left fails the test rather than wait.

No mock stands in for the API server where a test claims to test the manager against
Kubernetes: those tests run on the local cluster. This fake is for the manager's logic.
"""

from __future__ import annotations

import bisect
import copy
import re
import threading
import time
from collections.abc import Callable, Iterator

from distributetrain.core import errors, names
from distributetrain.core.placement import inventory
from distributetrain.core.clock import Clock, RealClock
from distributetrain.kube import podwire
from distributetrain.kube.api import KubeApi
from distributetrain.kube.resources import KUEUE_GROUP, RESOURCES
from harness.builders import MANAGER_POD, manager_pod
from harness.waiting import Changes

DELETED_AT = "2026-01-02T12:00:00Z"
EVENT_WATCH_SPAN_S = 0.05  # real seconds an Event watch waits for what a test sends
# Real seconds a watch on another thread than the story's waits for what a test sends, on a fake clock.
BACKGROUND_WATCH_SPAN_S = 0.05


class FakeKube(KubeApi):
    def __init__(self, nodes: list[dict] = (), pods: list[dict] = (), manager: dict | None = None,
                 clock: Clock | None = None, in_manager_pod: bool = True):
        # What a watch with nothing scripted waits out its timeout on (None: real time).
        self.clock = clock or RealClock()
        # On a fake clock, only the thread that tells the story (the one that made the fake)
        # moves time; an informer's own thread (the node watch, the free GPUs') never does.
        self.story_thread = threading.current_thread()
        self.nodes = {n["metadata"]["name"]: copy.deepcopy(n) for n in nodes}
        self.pods = {p["metadata"]["name"]: copy.deepcopy(p) for p in pods}
        self.secrets: dict[str, dict] = {}
        self.network_policies: dict[str, dict] = {}
        self.config_maps: dict[str, dict] = {}  # the lock namespace's (the published survey)
        self.volume_claims: dict[str, dict] = {}  # PersistentVolumeClaims of the job's namespace
        self.volumes: dict[str, dict] = {}  # PersistentVolumes
        self.custom: dict[tuple[str, str | None, str], dict] = {}  # (plural, namespace, name) -> object
        self.kueue_served: str | None = "v1beta2"  # the version of Kueue's API read; None: not installed
        self.quotas: list[dict] = []  # the job namespace's ResourceQuotas
        # Kueue's visibility API: (namespace, LocalQueue) -> pending workloads; None: not served
        self.pending: dict[tuple[str, str], list[dict]] | None = None
        self.lease: dict | None = None  # the placement Lease
        self.other_leases: dict[str, dict] = {}
        self.namespaces: dict[str, dict[str, str]] = {}  # name -> labels of a namespace that has any
        self.namespace_annotations: dict[str, dict[str, str]] = {}  # name -> annotations of one that has any
        # The manager's own pod, outside ``pods``; None for the CLI, which runs in none.
        self.manager = (manager if manager is not None else manager_pod()) if in_manager_pod else None
        self.batch_jobs: dict[str, dict] = {}  # batch/v1 Jobs (a manager submitted --as-job)
        self.created: list[dict] = []  # every object sent to ``create``, whole, in order
        self.dry_runs: list[dict] = []  # every object sent to ``create`` with a dry run
        self.stuck: set[str] = set()  # pods that never go away (a node that is gone)
        self.logs: dict[tuple[str, str], str] = {}  # (pod, container) -> its log
        self.actions: list[tuple[str, str, str]] = []
        self.action_times: list[float] = []  # monotonic, one per action
        self.annotated: list[tuple[str, dict]] = []  # (pod, patch)
        self.failures: dict[str, list[BaseException]] = {}
        self.pod_watches: list[list | None] = []
        self.on_pod_watch: Callable[[FakeKube, float], Iterator[tuple[str, dict]]] | None = None
        self.pods_stay_terminating = False
        self.on_create: list[Callable[[dict], None]] = []
        self.pod_lists = 0
        self.node_lists = 0
        self.forbidden_lists: set[str] = set()  # kinds the caller may not list (a 403, as RBAC answers)
        self.forbidden_reads: set[str] = set()  # kinds (plurals for custom ones) the caller may not read
        self.api_client = None
        self.lock = threading.RLock()  # the node watch runs in a thread of its own
        self.one_changed = threading.Condition(self.lock)  # anything written
        # What a test waits on (harness.waiting): every call recorded (``actions``), every list
        # answered, every watch of the tracker opened (an informer's, after its list is applied).
        self.changes = Changes()
        self.events: list[dict] = []  # core/v1 Events of the job's namespace (the kubelet's about pods)
        # The tracker: every write of a watched kind, in order, as (resourceVersion, kind,
        # event type, object); a watch plays those after the version it starts from.
        self.version = 1
        self.written: list[tuple[int, str, str, dict | BaseException]] = []
        self.quota_lists = 0
        self.quota_watches = 0
        self.cluster_pod_watches = 0  # watches of every namespace's pods (the free GPUs followed) opened
        self.dra_served = True
        self.dra: dict[str, dict[str, dict]] = {"resourceslices": {}, "resourceclaims": {}}  # kind -> key -> object
        self.claim_templates: dict[str, dict] = {}  # the job namespace's ResourceClaimTemplates
        self.pod_groups_served = False  # scheduling.k8s.io/v1beta1 PodGroups (Kubernetes 1.37 with its gate)
        self.pod_groups: dict[str, dict] = {}  # the job namespace's PodGroups
        self.pod_group_discoveries = 0  # times the manager asked whether they are served

    # -- what tests use to set the scene --------------------------------------------------
    def writes(self, verb: str | None = None, kind: str | None = None) -> list[str]:
        """Names written, in order, optionally of one verb and kind."""
        return [name for v, k, name in self.actions if verb in (None, v) and kind in (None, k)]

    def _act(self, verb: str, kind: str, name: str) -> None:
        self.actions.append((verb, kind, name))
        self.action_times.append(self.clock.monotonic())
        self.changes.note()

    def when(self, verb: str, kind: str, name: str) -> float:
        """When (monotonic) that action was first taken."""
        return self.action_times[self.actions.index((verb, kind, name))]

    def annotation_history(self, key: str, pod: str = MANAGER_POD) -> list[str | None]:
        """Every value ``key`` was given on ``pod``, in order (None: removed)."""
        return [patch[key] for name, patch in self.annotated if name == pod and key in patch]

    def _maybe_fail(self, verb: str, kind: str = "") -> None:
        """The next failure scripted for "VERB KIND" (e.g. "patch Pod"), else for the verb."""
        for call in (f"{verb} {kind}", verb):
            if self.failures.get(call):
                if (failure := self.failures[call].pop(0)) is not None:
                    raise failure
                return

    def _pods(self, selectors: dict[str, str]) -> list[dict]:
        return [copy.deepcopy(p) for p in self.pods.values() if _matches(p, **selectors)]

    def _store(self, kind: str) -> dict[str, dict]:
        return {"Pod": self.pods, "Job": self.batch_jobs, "NetworkPolicy": self.network_policies,
                "ConfigMap": self.config_maps, "PersistentVolumeClaim": self.volume_claims,
                "PersistentVolume": self.volumes, "ResourceClaimTemplate": self.claim_templates,
                "PodGroup": self.pod_groups}.get(kind, self.secrets)

    def _is_manager(self, name: str) -> bool:
        return self.manager is not None and name == self.manager["metadata"]["name"]

    def put(self, *objs: dict) -> None:
        """Objects as they are in the cluster already, or as another party writes them (a node's
        kubelet, another tenant, Kueue): their watchers see them ADDED or MODIFIED. Not in
        ``actions``, which are the code's own writes (as client-go's ``tracker.Add``)."""
        for obj in objs:
            self._put(obj)

    def _put(self, obj: dict) -> None:
        with self.lock:
            kind, name = obj["kind"], obj["metadata"]["name"]
            stored = copy.deepcopy(obj)
            if kind in ("StorageClass", "DeviceClass", "RuntimeClass"):  # kept with Kueue's, by plural
                self.custom[(RESOURCES[kind].plural, None, name)] = stored
                return
            if kind == "Event":
                self.events.append(stored)
                self._emit(kind, "ADDED", stored)
                return
            if kind == "ResourceQuota":
                existed = any(q["metadata"]["name"] == name for q in self.quotas)
                self.quotas = [q for q in self.quotas if q["metadata"]["name"] != name] + [stored]
            else:
                store = self._scene_store(kind)
                existed = _key(obj) in store
                store[_key(obj)] = stored
            self._emit(kind, "MODIFIED" if existed else "ADDED", stored)

    def remove(self, obj: dict) -> None:
        """An object another party deletes (a tenant's pod, its claim): its watchers see it DELETED."""
        with self.lock:
            if (gone := self._scene_store(obj["kind"]).pop(_key(obj), None)) is not None:
                self._emit(obj["kind"], "DELETED", gone)

    def _scene_store(self, kind: str) -> dict[str, dict]:
        if kind == "Node":
            return self.nodes
        if kind in ("ResourceSlice", "ResourceClaim"):
            return self.dra[RESOURCES[kind].plural]
        return self._store(kind)

    def break_node_watch(self, error: BaseException) -> None:
        """The running node watch ends with ``error`` (after the changes written before)."""
        with self.lock:
            self._emit("Node", "ERROR", error)

    def _written_since(self, version: int, kind: str) -> list[tuple[int, str, str, dict | BaseException]]:
        return [w for w in self.written[bisect.bisect_right(self.written, version, key=lambda w: w[0]):] if w[1] == kind]

    def _emit(self, kind: str, event_type: str, obj: dict | BaseException) -> None:
        """A write every open watch of ``kind`` sees, at the next resourceVersion (the caller holds the lock)."""
        self.version += 1
        if isinstance(obj, dict):
            obj["metadata"]["resourceVersion"] = str(self.version)
            obj = copy.deepcopy(obj)
        self.written.append((self.version, kind, event_type, obj))
        self.one_changed.notify_all()

    # -- reads ----------------------------------------------------------------------------
    def list_pages(self, kind: str, namespace: str | None = None, **selectors: str) -> Iterator[tuple[list[dict], str]]:
        self._maybe_fail("list_pages", kind)
        if kind == "ResourceQuota":  # the quota wait's informer; the pre-flight check reads them with list_all
            with self.lock:
                self.quota_lists += 1
        yield self.list_all(kind, namespace, **selectors)

    def each_pod_request(self, visit: Callable[[dict], None], restart: Callable[[], None], **selectors: str) -> str:
        """As the API server's protobuf list reads: each pod cut to what an inventory reads."""
        self._maybe_fail("each_pod_request")
        restart()
        pods, version = self.list_all("Pod", None, **selectors)
        for pod in pods:
            visit(podwire.slim(pod))
        return version

    def list_all(self, kind: str, namespace: str | None = None, **selectors: str) -> tuple[list[dict], str]:
        self._maybe_fail("list_all", kind)
        if kind in self.forbidden_lists:
            raise errors.forbidden(f'{kind} is forbidden: User "dev" cannot list resource "{RESOURCES[kind].plural}"')
        try:
            return self._listed(kind, selectors)
        finally:
            self.changes.note()

    def _listed(self, kind: str, selectors: dict[str, str]) -> tuple[list[dict], str]:
        """What a list of ``kind`` answers, counted (``node_lists``, ``pod_lists``)."""
        with self.lock:
            if kind == "Node":
                self.node_lists += 1
                return copy.deepcopy(list(self.nodes.values())), str(self.version)
            if kind == "Event":
                return copy.deepcopy(self.events), str(self.version)
            if kind == "ResourceQuota":
                return copy.deepcopy(self.quotas), str(self.version)
            if kind in ("ResourceSlice", "ResourceClaim"):
                if not self.dra_served:
                    raise errors.NotFound("the server could not find the requested resource")
                return copy.deepcopy(list(self.dra[RESOURCES[kind].plural].values())), str(self.version)
            if kind in ("Job", "Secret"):
                return _selected(self._store(kind), selectors.get("label_selector", "")), str(self.version)
            self.pod_lists += 1
            return self._pods(selectors), str(self.version)

    def read(self, kind: str, namespace: str | None, name: str) -> dict | None:
        self._maybe_fail("read", kind)
        if kind in self.forbidden_reads:
            raise errors.forbidden(f'{kind} "{name}" is forbidden: User "dev" cannot get resource "{kind}"')
        with self.lock:
            if kind == "Namespace":
                return {"metadata": {"name": name, "labels": dict(self.namespaces.get(name, {})),
                                     "annotations": dict(self.namespace_annotations.get(name, {}))}}
            if kind == "Pod" and self._is_manager(name):
                return copy.deepcopy(self.manager)
            if kind == "Lease":
                return copy.deepcopy(self._leases_named(name))
            if RESOURCES[kind].group == KUEUE_GROUP and self.kueue_served is None:
                return None  # as Kube.read answers where Kueue serves no API
            if kind == "DeviceClass" and not self.dra_served:
                return None  # as Kube.read answers a 404
            if (RESOURCES[kind].plural, namespace, name) in self.custom:
                return copy.deepcopy(self.custom[(RESOURCES[kind].plural, namespace, name)])
            return copy.deepcopy(self._store(kind).get(name))

    def kueue_version(self) -> str | None:
        return self.kueue_served

    def pending_workloads(self, namespace: str, local_queue: str) -> list[dict]:
        self._maybe_fail("pending_workloads")
        with self.lock:
            if self.pending is None:
                raise errors.NotFound("the server could not find the requested resource")  # not served
            return copy.deepcopy(self.pending.get((namespace, local_queue), []))

    # -- writes ---------------------------------------------------------------------------
    def create_owned(self, obj: dict, dry_run: bool = False) -> dict:
        created = copy.deepcopy(obj)
        for mutate in self.on_create:  # webhooks see dry runs too
            mutate(created)
        if dry_run:
            return created
        self._maybe_fail("create_owned", obj["kind"])
        if obj["kind"] == "Pod":
            created["status"] = {"phase": "Pending"}
        with self.lock:
            stored = self._store(obj["kind"])[obj["metadata"]["name"]] = copy.deepcopy(created)
            self._act("create", obj["kind"], obj["metadata"]["name"])
            self._written("ADDED", stored, obj["kind"])
            return copy.deepcopy(stored)

    def create_all_owned(self, objs: list[dict]) -> list[dict]:
        self._maybe_fail("create_all_owned")
        return [self.create_owned(obj) for obj in objs]

    def delete(self, kind: str, namespace: str, name: str, grace_period_s: int | None = None) -> bool:
        self._maybe_fail("delete", kind)
        if kind == "Job":
            return self._delete_batch_job(name)
        with self.lock:
            store = self._store(kind)
            if name not in store:
                return False
            self._act("delete", kind, name)
            if kind == "Pod" and self.pods_stay_terminating:
                first = "deletionTimestamp" not in store[name]["metadata"]
                store[name]["metadata"]["deletionTimestamp"] = DELETED_AT
                self._written("MODIFIED", store[name])
                return first
            self._written("DELETED", store.pop(name), kind)
            self._delete_owned_by(name)
            return True

    def _written(self, event_type: str, obj: dict, kind: str = "Pod") -> None:
        """A write reaches the tracker's watches of its kind (of pods: those of every
        namespace; the job namespace's play their scripts)."""
        self._emit(obj.get("kind", kind), event_type, obj)

    def _delete_owned_by(self, manager: str) -> None:
        """What a deleted manager owns goes too (its teardown, the garbage collector), but ``stuck`` pods."""
        for kind, store in (("Pod", self.pods), ("Secret", self.secrets)):
            for owned in _selected(store, names.job_selector(manager)):
                if owned["metadata"]["name"] not in self.stuck:
                    self._written("DELETED", store.pop(owned["metadata"]["name"]), kind)

    def delete_all(self, kind: str, namespace: str, names: list[str]) -> list[str]:
        return [name for name in names if self.delete(kind, namespace, name)]

    def delete_collection(self, kind: str, namespace: str, label_selector: str, field_selector: str = "") -> list[str]:
        """One deletecollection: of pods, one action (``deletecollection``, ``Pod``, the
        selectors); of ResourceClaimTemplates and PodGroups, one per object deleted."""
        self._maybe_fail("delete_collection", kind)
        if kind == "ResourceClaimTemplate" and not self.dra_served:
            raise errors.NotFound("the server could not find the requested resource")
        with self.lock:
            if kind != "Pod":
                store = self._store(kind)
                deleted = sorted(o["metadata"]["name"] for o in _selected(store, label_selector))
                for name in deleted:
                    self._act("delete", kind, name)
                    self._written("DELETED", store.pop(name), kind)
                return deleted
            self._act("deletecollection", "Pod", f"{label_selector} {field_selector}".rstrip())
            deleted = sorted(name for name, pod in self.pods.items()
                             if _matches(pod, label_selector=label_selector, field_selector=field_selector))
            for name in deleted:
                if self.pods_stay_terminating:
                    self.pods[name]["metadata"]["deletionTimestamp"] = DELETED_AT
                    self._written("MODIFIED", self.pods[name])
                else:
                    self._written("DELETED", self.pods.pop(name))
            return deleted

    def serves_pod_groups(self) -> bool:
        with self.lock:
            self.pod_group_discoveries += 1
            return self.pod_groups_served

    def refuse_pod_groups(self, why: str) -> None:
        with self.lock:
            self.pod_groups_served = False

    def patch(self, kind: str, namespace: str, name: str, patch: dict | list[dict]) -> dict:
        """A pod's patch; one of its annotations alone is kept as such (``annotated``, an
        ``annotate`` action, failures scripted for "annotate Pod")."""
        annotations = _annotations_only(patch)
        self._maybe_fail("annotate" if annotations is not None else "patch", kind)
        with self.lock:
            pod = self.manager if self._is_manager(name) else self.pods.get(name)
            if pod is None:  # as the API server answers a patch of a pod gone
                raise errors.NotFound(f'pods "{name}" not found')
            if isinstance(patch, list):
                _json_patch(pod, patch)
            else:
                _merge(pod, patch)
            if annotations is not None:
                self._act("annotate", "Pod", name)
                self.annotated.append((name, dict(annotations)))
            else:
                self._act("patch", "Pod", name)
            self._written("MODIFIED", pod)
            return copy.deepcopy(pod)

    # -- watches --------------------------------------------------------------------------
    def watch(self, kind: str, namespace: str | None, resource_version: str, timeout_s: float,
              **selectors: str) -> Iterator[tuple[str, dict]]:
        if kind == "Pod":
            return self._watch_pods(namespace, resource_version, timeout_s)
        if kind in ("Lease", "ConfigMap"):
            return self._watch_one(kind, selectors["field_selector"].removeprefix("metadata.name="),
                                   resource_version, timeout_s)
        if kind == "Event":
            # On the informer's own thread: it waits a little real time for what is written and
            # never moves a fake clock (the job's pod watch alone does).
            return self._tracked("Event", resource_version, timeout_s, EVENT_WATCH_SPAN_S)
        if kind == "ResourceQuota":
            with self.lock:
                self.quota_watches += 1
        self._maybe_fail("watch", kind)
        return self._tracked(kind, resource_version, timeout_s)

    def _watch_pods(self, namespace: str | None, resource_version: str, timeout_s: float) -> Iterator[tuple[str, dict]]:
        if namespace is None:  # the cluster's pods (free GPUs followed), not the job's scripts
            with self.lock:
                self.cluster_pod_watches += 1
            yield from self._tracked("Pod", resource_version, timeout_s)
            return
        with self.lock:
            self._act("watch", "Pod", "")
        if self.on_pod_watch is not None:
            yield from self.on_pod_watch(self, timeout_s)
            return
        yield from self.play_next_script(timeout_s)

    def play_next_script(self, timeout_s: float) -> Iterator[tuple[str, dict]]:
        """The next of ``pod_watches``, as a watch plays it (also for an ``on_pod_watch``)."""
        assert self.manager is not None or self.pod_watches, "the CLI watched beyond the scripted events"
        script = self.pod_watches.pop(0) if self.pod_watches else None
        if script is None:  # nothing (more) scripted: the watch waits out its timeout
            self.clock.sleep(timeout_s)
            return
        for step in script:
            if isinstance(step, BaseException):
                raise step
            yield self.apply(*(step(self) if callable(step) else step))

    def apply(self, first: str, second: dict) -> tuple[str, dict]:
        """(event type, pod) as given (a BOOKMARK changes nothing), or (pod name, status) applied to the pod held."""
        with self.lock:
            if first == "BOOKMARK":
                return first, copy.deepcopy(second)
            if first in ("ADDED", "MODIFIED", "DELETED"):
                name = second["metadata"]["name"]
                if first == "DELETED":
                    self._written(first, self.pods.pop(name, None) or copy.deepcopy(second))
                else:
                    self.pods[name] = copy.deepcopy(second)
                    self._written(first, self.pods[name])
                return first, copy.deepcopy(second)
            pod = self.pods[first]
            pod["status"] = second
            if any(c["type"] == "PodScheduled" and c["status"] == "True" for c in second.get("conditions", ())):
                pod["spec"]["nodeName"] = inventory.pinned_node(pod["spec"])  # as the scheduler binds it
            self._written("MODIFIED", pod)
            return "MODIFIED", copy.deepcopy(pod)

    def _tracked(self, kind: str, resource_version: str, timeout_s: float,
                 real_span_s: float | None = None) -> Iterator[tuple[str, dict]]:
        """A watch of ``kind``: every write after ``resource_version``, then each as it is
        written, until ``timeout_s`` passes. On a fake clock nothing else moves time: with
        nothing written, the story's watch waits out its time at once; another thread's
        waits a little real time and ends, leaving the clock to the story. ``real_span_s``:
        a watch that waits only that much real time, and never moves the clock."""
        self.changes.note()
        real = isinstance(self.clock, RealClock)
        in_background = not real and threading.current_thread() is not self.story_thread
        span_s = real_span_s if real_span_s is not None else (BACKGROUND_WATCH_SPAN_S if in_background else None)
        ends_at = time.monotonic() + (span_s if span_s is not None else timeout_s if real else 0)
        clock_ends_at = self.clock.monotonic() + timeout_s
        seen = int(resource_version or 0)
        while self.clock.monotonic() < clock_ends_at:
            with self.one_changed:
                due = self._written_since(seen, kind)
                while not due and (left := ends_at - time.monotonic()) > 0:
                    self.one_changed.wait(min(left, timeout_s))
                    due = self._written_since(seen, kind)
            if not due:
                if not real and real_span_s is None and not in_background:
                    self.clock.sleep(clock_ends_at - self.clock.monotonic())
                return
            for version, _, event_type, obj in due:
                seen = version
                if isinstance(obj, BaseException):
                    raise obj
                yield event_type, copy.deepcopy(obj)

    # -- the user's commands' own calls (cli.jobs.api.JobsKube) ---------------------------
    def create(self, obj: dict, dry_run: bool = False) -> dict:
        """A Pod or batch/v1 Job, as admission leaves it (``on_create``); AlreadyExists if the name is taken."""
        if obj["kind"] == "Lease":
            return self._create_lease(obj)
        admitted = copy.deepcopy(obj)
        for mutate in self.on_create:
            mutate(admitted)
        with self.lock:
            if obj["metadata"]["name"] in self._store(obj["kind"]):
                raise errors.AlreadyExists(f"{obj['kind']} {obj['metadata']['name']} already exists")
            (self.dry_runs if dry_run else self.created).append(copy.deepcopy(obj))
            if dry_run:
                return copy.deepcopy(admitted)
            stored = self._store(obj["kind"])[obj["metadata"]["name"]] = copy.deepcopy(admitted)
            self._act("create", obj["kind"], obj["metadata"]["name"])
            self._emit(obj["kind"], "ADDED", stored)
            return copy.deepcopy(stored)

    def _delete_batch_job(self, name: str) -> bool:
        """The Job goes, and with it its manager pod and what that owns (the garbage collector)."""
        with self.lock:
            if self.batch_jobs.pop(name, None) is None:
                return False
            self._act("delete", "Job", name)
            for pod in _selected(self.pods, f"{names.job_selector(name)},{names.LABEL_ROLE}={names.ROLE_MANAGER}"):
                del self.pods[pod["metadata"]["name"]]
                self._delete_owned_by(pod["metadata"]["name"])
            return True

    def pod_log(self, namespace: str, pod: str, container: str, follow: bool) -> Iterator[str]:
        yield from self.logs[(pod, container)].splitlines(keepends=True)

    # -- leases ---------------------------------------------------------------------------
    def _leases_named(self, name: str) -> dict | None:
        """The placement Lease is ``lease``; others (the survey's surveyor) ``other_leases``."""
        return self.lease if name == names.LOCK_LEASE_NAME else self.other_leases.get(name)

    def _watch_one(self, kind: str, name: str, resource_version: str, timeout_s: float) -> Iterator[tuple[str, dict]]:
        """The object's next change after ``resource_version``: at once if it changed since,
        else when it is created or written, or nothing once ``timeout_s`` has passed. On a
        fake clock the story's thread waits a moment of real time for a change, then its
        whole timeout (the clock moved on); another thread only that moment."""
        real = isinstance(self.clock, RealClock)
        ends_at = (self.clock.monotonic() if real else time.monotonic()) + (timeout_s if real else BACKGROUND_WATCH_SPAN_S)
        with self.one_changed:
            self._act("watch", kind, name)
            while True:
                current = self._leases_named(name) if kind == "Lease" else self.config_maps.get(name)
                if current is not None and current["metadata"].get("resourceVersion") != resource_version:
                    changed = copy.deepcopy(current)
                    break
                left = ends_at - (self.clock.monotonic() if real else time.monotonic())
                if left <= 0:
                    if not real and threading.current_thread() is self.story_thread:
                        self.clock.sleep(timeout_s)
                    return
                self.one_changed.wait(left)
        yield "MODIFIED", changed

    def update(self, obj: dict) -> dict:
        """A Lease or ConfigMap updated as read: ``Conflict`` if it changed since."""
        if obj["kind"] == "Lease":
            return self._update_lease(obj)
        with self.lock:
            store = self._store(obj["kind"])
            current = store.get(obj["metadata"]["name"])
            if current is None:
                raise errors.NotFound(f'{obj["kind"]} {obj["metadata"]["name"]} not found')
            version = current["metadata"].get("resourceVersion", "0")
            if obj["metadata"].get("resourceVersion") != version:
                raise errors.Conflict(f'{obj["kind"]} {obj["metadata"]["name"]}: the object has been modified')
            replaced = copy.deepcopy(obj)
            store[obj["metadata"]["name"]] = replaced
            self._act("update", obj["kind"], obj["metadata"]["name"])
            self._emit(obj["kind"], "MODIFIED", replaced)
            return copy.deepcopy(replaced)

    def _create_lease(self, lease: dict) -> dict:
        with self.lock:
            name = lease["metadata"]["name"]
            if self._leases_named(name) is not None:
                raise errors.AlreadyExists(f'leases "{name}" already exists')
            created = copy.deepcopy(lease)
            self._put_lease(name, created, "ADDED")
            self._act("create", "Lease", name)
            return copy.deepcopy(created)

    def _put_lease(self, name: str, lease: dict, event_type: str) -> None:
        if name == names.LOCK_LEASE_NAME:
            self.lease = lease
        else:
            self.other_leases[name] = lease
        self._emit("Lease", event_type, lease)

    def _update_lease(self, lease: dict) -> dict:
        with self.lock:
            name = lease["metadata"]["name"]
            current = (self._leases_named(name) or {}).get("metadata", {}).get("resourceVersion", "0")
            if lease["metadata"].get("resourceVersion") not in (None, current):  # as the API server checks it
                raise errors.Conflict(f'leases "{name}": the object has been modified')
            replaced = copy.deepcopy(lease)
            self._put_lease(name, replaced, "MODIFIED")
            self._act("update", "Lease", name)
            return copy.deepcopy(replaced)


def _key(obj: dict) -> str:
    """How its store holds it: ResourceSlices and ResourceClaims by namespace and name, the rest by name."""
    metadata = obj["metadata"]
    if obj["kind"] not in ("ResourceSlice", "ResourceClaim"):
        return metadata["name"]
    return f"{metadata['namespace']}/{metadata['name']}" if metadata.get("namespace") else metadata["name"]


def _matches(pod: dict, label_selector: str = "", field_selector: str = "", **_: str) -> bool:
    """The selectors the manager uses: label ``k=v``, ``k in (a,b)`` and ``k`` (it exists) terms; field
    ``metadata.name!=x`` terms (any other field term selects every pod, as the lists'
    phase selector is not what the fake tests)."""
    labels = pod["metadata"].get("labels") or {}
    for term in re.findall(r"[^,(]+(?:\([^)]*\))?", label_selector):
        key, _, value = term.partition("=")
        if " in (" in term:
            key, _, values = term.partition(" in (")
            if labels.get(key.strip()) not in values.rstrip(")").split(","):
                return False
        elif "=" not in term:
            if key.strip() not in labels:
                return False
        elif labels.get(key.strip()) != value:
            return False
    excluded = [term.split("!=", 1)[1] for term in field_selector.split(",") if term.startswith("metadata.name!=")]
    return pod["metadata"]["name"] not in excluded


def _selected(store: dict[str, dict], label_selector: str) -> list[dict]:
    """Copies of the objects whose labels match ``label_selector``."""
    return [copy.deepcopy(o) for o in store.values() if _matches(o, label_selector=label_selector)]


def _merge(target: dict, patch: dict) -> None:
    """A merge patch: maps merged key by key, anything else replaced, None removing."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _json_patch(target: dict, operations: list[dict]) -> None:
    """The ``test`` and ``remove`` operations of RFC 6902, all or nothing, as the apiserver
    applies them (a failed test is its 422 Invalid)."""
    trial = copy.deepcopy(target)
    for operation in operations:
        *parents, last = [int(p) if p.isdigit() else p for p in operation["path"].strip("/").split("/")]
        holder = trial
        for part in parents:
            holder = holder[part]
        if operation["op"] == "test":
            if holder[last] != operation["value"]:
                raise errors.Invalid(f"the server rejected our request due to an error in our request: "
                                     f"testing value {operation['path']} failed")
        elif operation["op"] == "remove":
            del holder[last]
        else:
            raise NotImplementedError(operation["op"])
    target.clear()
    target.update(trial)


def _annotations_only(patch: dict | list[dict]) -> dict | None:
    """The annotations a merge patch sets, where that is all it does; else None."""
    if isinstance(patch, dict) and list(patch) == ["metadata"] and list(patch["metadata"]) == ["annotations"]:
        return patch["metadata"]["annotations"]
    return None
