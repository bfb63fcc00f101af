"""Kubeconfig files for the admin and the control-plane components.

Credentials are embedded (not file references) so a kubeconfig can be copied
or mounted on its own. JSON is valid YAML, which every client accepts.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from localcluster.certs import ClientIdentity, Pki

CLUSTER_NAME = "localcluster"
LOCAL_SERVER_URL = "https://127.0.0.1:6443"


def render(pki: Pki, identity: ClientIdentity, server_url: str = LOCAL_SERVER_URL) -> dict:
    """The kubeconfig document authenticating as `identity` with its client certificate."""
    context = f"{identity.name}@{CLUSTER_NAME}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {
                    "server": server_url,
                    "certificate-authority-data": _b64(pki.ca_cert),
                },
            }
        ],
        "users": [
            {
                "name": identity.name,
                "user": {
                    "client-certificate-data": _b64(pki.cert(identity.name)),
                    "client-key-data": _b64(pki.key(identity.name)),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": CLUSTER_NAME, "user": identity.name}}],
        "current-context": context,
    }


def write(path: Path, document: dict) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")
