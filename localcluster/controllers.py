"""What the controllers the local cluster runs beside its control plane share (Kueue,
Karpenter): both run as processes of the host with the admin kubeconfig, answer a health
endpoint on the loopback, and leave finalizers that `down` removes from what is gone."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

READYZ_TIMEOUT_S = 2.0


def readyz(port: int) -> bool:
    """Whether the controller-runtime health endpoint on ``port`` answers /readyz with 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=READYZ_TIMEOUT_S) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def ignore_gone(call: Callable[[], object]) -> None:
    """Run one cleanup call; an object already gone (404) is what it wanted."""
    from kubernetes import client

    try:
        call()
    except client.ApiException as error:
        if error.status != 404:
            raise
