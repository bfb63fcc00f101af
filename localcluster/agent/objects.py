"""Reads of the objects a pod refers to: Secrets, ConfigMaps, claims, volumes, tokens.

Volume and environment code takes this small interface rather than the API
client, so it can be tested with dictionaries; "not found" is a value (None),
since for optional references it is not an error.
"""

from __future__ import annotations

from localcluster.agent.kubeapi import KubeApi, NotFound, namespaced_path

TOKEN_REQUEST_API_VERSION = "authentication.k8s.io/v1"


class ApiObjects:
    """ObjectSource (see containerenv) plus what volumes need, over the live API."""

    def __init__(self, api: KubeApi):
        self._api = api

    def _get(self, path: str) -> dict | None:
        try:
            return self._api.get(path)
        except NotFound:
            return None

    def secret(self, namespace: str, name: str) -> dict | None:
        return self._get(namespaced_path("secrets", namespace, name))

    def config_map(self, namespace: str, name: str) -> dict | None:
        return self._get(namespaced_path("configmaps", namespace, name))

    def claim(self, namespace: str, name: str) -> dict | None:
        return self._get(namespaced_path("persistentvolumeclaims", namespace, name))

    def persistent_volume(self, name: str) -> dict | None:
        return self._get(f"/api/v1/persistentvolumes/{name}")

    def service_account_token(
        self, pod: dict, audience: str | None, expiration_s: int
    ) -> str:
        """A token for the pod's ServiceAccount, bound to the pod (TokenRequest)."""
        metadata = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        spec: dict = {
            "expirationSeconds": expiration_s,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "uid": metadata["uid"]},
        }
        if audience:
            spec["audiences"] = [audience]
        body = {"apiVersion": TOKEN_REQUEST_API_VERSION, "kind": "TokenRequest", "spec": spec}
        path = namespaced_path("serviceaccounts", metadata["namespace"], account) + "/token"
        return self._api.create(path, body)["status"]["token"]
