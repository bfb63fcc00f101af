"""What the controllers the local cluster runs beside its control plane share (Kueue,
Karpenter): both run as processes of the host with the admin kubeconfig, answer a health
endpoint on the loopback, and leave finalizers that `down` removes from what is gone."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import yaml

READYZ_TIMEOUT_S = 2.0
# A controller's CRDs are megabytes of YAML: libyaml's loader reads them several times
# faster than the pure-Python one, which Kueue's start waited on for seconds.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_crds(paths: Iterable[Path]) -> list[dict]:
    """The CRDs in ``paths``, one document each, in that order."""
    return [yaml.load(path.read_text(), Loader=YAML_LOADER) for path in paths]


def readyz(port: int) -> bool:
    """Whether the controller-runtime health endpoint on ``port`` answers /readyz with 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=READYZ_TIMEOUT_S) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def finalizers_without(finalizers: Iterable[str] | None, prefix: str) -> list[str] | None:
    """``finalizers`` without the stopped controller's (those starting with ``prefix``), which
    no one would remove any more; None when there are none of them (nothing to patch)."""
    finalizers = list(finalizers or ())
    kept = [finalizer for finalizer in finalizers if not finalizer.startswith(prefix)]
    return kept if len(kept) != len(finalizers) else None


def ignore_gone(call: Callable[[], object]) -> None:
    """Run one cleanup call; an object already gone (404) is what it wanted."""
    from kubernetes import client

    try:
        call()
    except client.ApiException as error:
        if error.status != 404:
            raise


def all_objects(custom, group: str, version: str, plural: str) -> list[dict]:
    """Every object of a controller's kind (``custom`` a CustomObjectsApi), in every
    namespace; none when the controller's CRDs were never installed (404)."""
    from kubernetes import client

    try:
        return custom.list_cluster_custom_object(group, version, plural)["items"]
    except client.ApiException as error:
        if error.status != 404:
            raise
        return []


POD_PAGE = 500
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def every_pod_metadata(api_client) -> Iterator[dict]:
    """The metadata of every pod in every namespace: paged, and only the metadata (as
    PartialObjectMetadata), so a cluster of 150,000 pods costs seconds and little memory
    rather than minutes and gigabytes of client models."""
    token = ""
    while True:
        query = [("limit", POD_PAGE)] + ([("continue", token)] if token else [])
        response = api_client.call_api("/api/v1/pods", "GET", query_params=query,
                                       header_params={"Accept": METADATA_ONLY}, auth_settings=["BearerToken"],
                                       _return_http_data_only=True, _preload_content=False)
        page = json.loads(response.data)
        yield from (item["metadata"] for item in page.get("items") or ())
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def with_version(obj: dict, resource_version: str) -> dict:
    """``obj`` as a replace must send it: with the resourceVersion it replaces."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": resource_version}}


REPLACE_ATTEMPTS = 5  # a CRD's status moves on while it is established: its version with it


def create_or_replace(create: Callable[[], object], replace: Callable[[str], object],
                      read: Callable[[], object]) -> None:
    """``create``; if the object exists (409), ``replace`` it at the version ``read`` gives,
    read again while another writer changed it in between (409 Conflict, as client-go's
    RetryOnConflict does)."""
    from kubernetes import client

    try:
        create()
        return
    except client.ApiException as error:
        if error.status != 409:
            raise
    for attempt in range(1, REPLACE_ATTEMPTS + 1):
        try:
            replace(read().metadata.resource_version)
            return
        except client.ApiException as error:
            if error.status != 409 or attempt == REPLACE_ATTEMPTS:
                raise


def all_have_condition(read: Callable[[str], object], names: Iterable[str], condition: str) -> bool:
    """Whether each object ``read(name)`` returns has ``condition`` True."""
    for name in names:
        conditions = read(name).status.conditions or ()
        if not any(c.type == condition and c.status == "True" for c in conditions):
            return False
    return True


def install_crds(api_client, namespace: str, crds: list[dict]) -> list[str]:
    """The controller's namespace and CRDs (created or replaced), idempotently; returns the CRDs' names."""
    from kubernetes import client

    try:
        client.CoreV1Api(api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    except client.ApiException as error:
        if error.status != 409:
            raise
    extensions = client.ApiextensionsV1Api(api_client)
    for crd in crds:
        name = crd["metadata"]["name"]
        create_or_replace(
            lambda: extensions.create_custom_resource_definition(crd),
            lambda version: extensions.replace_custom_resource_definition(name, with_version(crd, version)),
            lambda: extensions.read_custom_resource_definition(name))
    return [crd["metadata"]["name"] for crd in crds]


def crds_established(api_client, names: Iterable[str]) -> bool:
    """Whether the API server serves every one of these CRDs: a controller's informers need them."""
    from kubernetes import client

    return all_have_condition(client.ApiextensionsV1Api(api_client).read_custom_resource_definition, names,
                              "Established")
