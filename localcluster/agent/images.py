"""Images as the kubelet sees them: present in local storage or not, and their config.

No registry is reachable, so "pulling" is looking the reference up in the project's
podman storage (where `make setup` built the images and their base stand-ins). An
absent image leaves the container waiting with the kubelet's reasons and messages:
ErrImageNeverPull under `imagePullPolicy: Never`, otherwise ErrImagePull, then
ImagePullBackOff while it is retried with back-off.

A pull can be made slow, per image (the cluster's or the node's pull-delays
file, see controls.py), as a multi-GB image is on a real node: the container waits in
ContainerCreating with `Pulling` and `Pulled` Events as the kubelet records them.
Each node remembers what it pulled, so a later pod there finds the image present;
pulls on one node run one at a time, as under the kubelet's default
serializeImagePulls. An image without a delay is pulled at once (and cached too).

The command line follows the kubelet's rules against the image's ENTRYPOINT and CMD
(`command` replaces ENTRYPOINT and drops CMD; `args` alone replaces CMD).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from localcluster.agent import controls
from localcluster.agent.containerenv import ContainerConfigError
from localcluster.agent.expansion import expand, mapping_for
from localcluster.agent.gotime import go_duration
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
    size: int = 0

    @classmethod
    def from_inspect(cls, document: dict) -> ImageConfig:
        config = document.get("Config") or {}
        return cls(
            image_id=document["Id"],
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
            user=config.get("User") or "",
            stop_signal=config.get("StopSignal") or "",
            size=int(document.get("Size") or 0),
        )


@dataclass(frozen=True)
class Pull:
    """One image pull on a node, in monotonic seconds: asked for, begun (after the pulls
    before it), done."""

    image: str
    requested_at: float
    started_at: float
    done_at: float


def pulling_message(image: str) -> str:
    return f'Pulling image "{image}"'


def pulled_message(pull: Pull, size: int) -> str:
    """The kubelet's message once a pull has succeeded."""
    return (f'Successfully pulled image "{pull.image}" in {go_duration(pull.done_at - pull.started_at)} '
            f"({go_duration(pull.done_at - pull.requested_at)} including waiting). Image size: {size} bytes.")


def present_message(image: str) -> str:
    return f'Container image "{image}" already present on machine'


class NodeImages:
    """One node's image cache (a file, so it outlives the agent like a node's disk) and its pulls.

    Shared by the node's pod workers, hence the lock.
    """

    def __init__(self, cache_file: Path, delays_files: tuple[Path | None, ...]):
        """`delays_files`: {image: seconds} files, a later file's entries over an earlier's."""
        self._cache_file = cache_file
        self._delays_files = delays_files
        self._lock = threading.Lock()
        self._pulls: dict[str, Pull] = {}
        self._busy_until = 0.0

    def pull(self, image: str, now: float) -> Pull | None:
        """None once the node has `image`; until then the pull that brings it, begun if none is under way."""
        with self._lock:
            pull = self._pulls.get(image)
            if pull is not None and now < pull.done_at:
                return pull
            if pull is not None:
                del self._pulls[image]
                controls.add_pulled_image(self._cache_file, image)
                return None
            if image in controls.read_pulled_images(self._cache_file):
                return None
            delay_s = controls.read_pull_delays(*self._delays_files).get(image, 0.0)
            if delay_s <= 0:
                controls.add_pulled_image(self._cache_file, image)
                return None
            started_at = max(now, self._busy_until)
            pull = Pull(image, requested_at=now, started_at=started_at, done_at=started_at + delay_s)
            self._busy_until = pull.done_at
            self._pulls[image] = pull
            return pull


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

