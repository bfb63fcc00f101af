"""The inventory's list of every pod of the cluster, read as the API server serves it best.

A consistent list (no resourceVersion) comes from the API server's watch cache from
Kubernetes 1.31 on (ConsistentListFromCache: beta and on by default in 1.31, GA in 1.34;
where etcd answers progress requests, 3.4.31+ or 3.5.13+). There one unpaginated request
is one snapshot of the cache, streamed item by item from 1.33, cheaper than pages
(docs/benchmarks.md §4). Elsewhere (1.29 and 1.30, ``--watch-cache=false``, an older etcd)
the server reads a consistent list from etcd: unpaginated, that is one read of every pod
of the cluster, held whole and encoded before the first byte goes out, past any read
timeout on a large cluster. There the list is read in pages (``limit``, ``continue``):
each page a bounded read, all of them one snapshot (the first page's revision), each
decoded whole before its pods are visited, so a page that fails is asked again with its
own continue token and the pages before it are kept. A token too old (etcd compacted its
revision: 410 Gone) starts the list over.

Which way is decided once per manager: from the server's version (``/version``, readable
by every client), then from what it does: an unpaginated list it leaves silent for the
read timeout is read in pages from then on, and that request is not tried whole again.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import urllib3
from kubernetes import client

from distributetrain.core import errors
from distributetrain.kube import podwire
from distributetrain.kube.calls import drain, read_json, send

log = logging.getLogger(__name__)

T = TypeVar("T")

CHUNK_BYTES = 1 << 18  # an unpaginated pod list is read this much at a time (some 250 pods)
PAGE_SIZE = 500  # pods a page, as kubectl pages: a page of pods is some 0.5 MB of protobuf
LIST_FROM_CACHE_SINCE = (1, 31)  # ConsistentListFromCache on by default (KEP-2340)
MAX_LIST_STARTS = 3  # a list whose continue token expires part way is started this often at most
VERSION = re.compile(r"^v?(\d+)\.(\d+)")  # gitVersion: v1.30.4-eks-a737599, v1.31.1-gke.1678000
# (operation, what, retryable=...) -> its result: the client's one retried call
Call = Callable[..., T]
Query = Sequence[tuple[str, str]]


def lists_from_cache(version: dict) -> bool:
    """Whether a server of this ``/version`` serves a consistent list from its watch cache
    (by default: it may have the cache off, which only its answers tell)."""
    found = VERSION.match(version.get("gitVersion") or "")
    return bool(found) and (int(found.group(1)), int(found.group(2))) >= LIST_FROM_CACHE_SINCE


class PodLister:
    """``each_pod`` for one API server, which it reads whole or in pages (decided once)."""

    def __init__(self, api_client: client.ApiClient, call: Call,
                 retryable: Callable[[errors.DistributeTrainError], bool]):
        self.api_client = api_client
        self._call = call
        self._retryable = retryable
        self._in_pages: bool | None = None  # None: not decided yet
        self._lock = threading.Lock()

    def in_pages(self) -> bool:
        """Whether the list is read in pages: the server reads it from etcd."""
        with self._lock:
            if self._in_pages is None:
                self._in_pages = not self._server_lists_from_cache()
            return self._in_pages

    def _server_lists_from_cache(self) -> bool:
        try:
            version = self._call(lambda: self._get_json("/version"), "read the API server's version")
        except errors.TransientApiError:
            raise
        except errors.DistributeTrainError as e:  # a proxy that hides it: pages work on any server
            log.info("the API server's version is unknown (%s): pod lists in pages", e)
            return False
        log.info("the API server is %s: pod lists %s", version.get("gitVersion"),
                 "whole, from its watch cache" if lists_from_cache(version) else "in pages")
        return lists_from_cache(version)

    def each_pod(self, visit: Callable[[dict], None], restart: Callable[[], None], query: Query, what: str) -> str:
        """Every selected pod, cut to what an inventory reads (``podwire``), to ``visit``;
        returns the list's resourceVersion. ``restart`` forgets the pods visited, before a
        list starts over."""
        if not self.in_pages():
            try:
                return self._call(lambda: self._whole(visit, restart, query), what,
                                  retryable=lambda error: not self._in_pages and self._retryable(error))
            except errors.TransientApiError:
                if not self._in_pages:
                    raise
                log.info("%s: the API server sent nothing for a read timeout (it reads the list from etcd: "
                         "its watch cache is off); lists in pages from now on", what)
        return self._pages(visit, restart, query, what)

    def _whole(self, visit: Callable[[dict], None], restart: Callable[[], None], query: Query) -> str:
        """One unpaginated request, decoded as it arrives: the manager holds a chunk at a
        time, never the list; tried again whole after ``restart``."""
        restart()
        try:
            response = self._request(query)
            chunks = iter(lambda: response.read(CHUNK_BYTES), b"")
            try:
                version, _ = podwire.read_pod_list(response.headers.get("Content-Type", ""), chunks, visit)
            except BaseException:
                response.close()  # the rest of a list nobody will read: drop the connection
                raise
        except urllib3.exceptions.ReadTimeoutError:
            self._in_pages = True
            raise
        drain(response)  # the envelope's last bytes: the connection goes back to the pool
        return version

    def _pages(self, visit: Callable[[dict], None], restart: Callable[[], None], query: Query, what: str) -> str:
        expired: errors.Gone | None = None
        for _ in range(MAX_LIST_STARTS):
            restart()
            token = ""
            try:
                while True:
                    pods, version, token = self._call(lambda: self._page(query, token), f"{what} (a page)")
                    for pod in pods:
                        visit(pod)
                    if not token:
                        return version
            except errors.Gone as e:
                expired = e
                log.info("%s: the list's snapshot expired part way (%s); listing again", what, e)
        raise expired

    def _page(self, query: Query, token: str) -> tuple[list[dict], str, str]:
        """One page, whole: its pods, the list's resourceVersion, the next page's token."""
        response = self._request([*query, ("limit", str(PAGE_SIZE)), *((("continue", token),) if token else ())])
        pods: list[dict] = []
        try:
            version, next_token = podwire.read_pod_list(response.headers.get("Content-Type", ""),
                                                        iter(lambda: response.read(CHUNK_BYTES), b""), pods.append)
        except BaseException:
            response.close()
            raise
        drain(response)
        return pods, version, next_token

    def _request(self, query: Query):
        return send(self.api_client, "GET", "/api/v1/pods", query, accept=podwire.ACCEPT)

    def _get_json(self, path: str) -> dict:
        return read_json(send(self.api_client, "GET", path))
