"""Images as the kubelet sees them: present in local storage or not, and their config.

No registry is reachable, so "pulling" is looking the reference up in the project's
podman storage (where `make setup` built the images and their base stand-ins). An
absent image leaves the container waiting with the kubelet's reasons and messages:
ErrImageNeverPull under `imagePullPolicy: Never`, otherwise ErrImagePull, then
ImagePullBackOff while it is retried with back-off.

The command line follows the kubelet's rules against the image's ENTRYPOINT and CMD
(`command` replaces ENTRYPOINT and drops CMD; `args` alone replaces CMD).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from localcluster.agent.containerenv import ContainerConfigError
from localcluster.agent.expansion import expand, mapping_for
from localcluster.podman import PodmanError, podman

ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"


@dataclass(frozen=True)
class ImageConfig:
    """What of an image's config the runtime applies itself (podman applies ENV, USER, WORKDIR)."""

    image_id: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    stop_signal: str = ""

    @classmethod
    def from_inspect(cls, document: dict) -> ImageConfig:
        config = document.get("Config") or {}
        return cls(
            image_id=document["Id"],
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
            user=config.get("User") or "",
            stop_signal=config.get("StopSignal") or "",
        )


class ImageUnavailable(Exception):
    """The image is not in local storage: the container waits with ``reason``."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


def pull_policy(container: dict) -> str:
    """The apiserver defaults it (Always for :latest or no tag); a bare dict may lack it."""
    policy = container.get("imagePullPolicy")
    if policy:
        return policy
    image = container.get("image", "")
    tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
    return "IfNotPresent" if tagged and not image.endswith(":latest") else "Always"


def unavailable(container: dict, detail: str) -> ImageUnavailable:
    """The kubelet's waiting reason and message for an image that is not present."""
    image = container.get("image", "")
    if pull_policy(container) == "Never":
        return ImageUnavailable(ERR_IMAGE_NEVER_PULL,
                                f'Container image "{image}" is not present with pull policy of Never')
    return ImageUnavailable(ERR_IMAGE_PULL, f'failed to pull image "{image}": {detail}; no image registry is '
                                            "reachable from the local cluster (build it with `make setup`)")


def lookup(container: dict) -> ImageConfig:
    """The container's image from local storage; ImageUnavailable when it is not there."""
    image = container.get("image", "")
    if not image:
        raise ImageUnavailable("InvalidImageName", "container has no image")
    result = podman(["image", "inspect", "--format", "json", image], check=False)
    if result.returncode != 0:
        raise unavailable(container, (result.stderr.strip().splitlines() or ["image not known"])[-1]
                          .removeprefix("Error: "))
    try:
        return ImageConfig.from_inspect(json.loads(result.stdout)[0])
    except (ValueError, IndexError, KeyError) as error:
        raise PodmanError(f"podman image inspect {image}: unreadable answer ({error})") from error


def container_argv(container: dict, image: ImageConfig, kubelet_vars: Mapping[str, str]) -> list[str]:
    """The process's command line under the kubelet's rules, `$(NAME)` expanded in command and args."""
    mapping = mapping_for(kubelet_vars)
    command = [expand(item, mapping) for item in container.get("command") or []]
    args = [expand(item, mapping) for item in container.get("args") or []]
    if command:
        argv = command + args
    else:
        argv = list(image.entrypoint) + (args or list(image.cmd))
    if not argv:
        raise ContainerConfigError(f"container {container['name']!r}: no command specified (the image has "
                                   "neither ENTRYPOINT nor CMD, and the pod sets neither command nor args)")
    return argv


def run_as(pod: dict, container: dict, image: ImageConfig) -> str:
    """`--user` for podman: the securityContext's runAsUser/runAsGroup over the image's USER."""
    pod_context = pod["spec"].get("securityContext") or {}
    context = container.get("securityContext") or {}
    uid = context.get("runAsUser", pod_context.get("runAsUser"))
    gid = context.get("runAsGroup", pod_context.get("runAsGroup"))
    image_user, _, image_group = image.user.partition(":")
    user = str(uid) if uid is not None else image_user
    group = str(gid) if gid is not None else (image_group if uid is None else "")
    if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
        if user in ("", "0", "root"):
            raise ContainerConfigError("container has runAsNonRoot and image will run as root")
        if not user.isdigit():
            raise ContainerConfigError(f'container has runAsNonRoot and image has non-numeric user ({user}), '
                                       "cannot verify user is non-root")
    if not user:
        return ""
    return f"{user}:{group}" if group else user

