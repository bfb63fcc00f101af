"""The kubelet's image rules, as the agent applies them: command line, user, pull policy."""

import pytest

from localcluster.agent.containerenv import ContainerConfigError
from localcluster.agent.images import (
    ERR_IMAGE_NEVER_PULL, ERR_IMAGE_PULL, ImageConfig, container_argv, pull_policy, run_as, unavailable,
)

NGC_LIKE = ImageConfig(image_id="sha", entrypoint=("/opt/nvidia/nvidia_entrypoint.sh",), cmd=("bash",))
MANAGER_LIKE = ImageConfig(image_id="sha", entrypoint=("manager.sh",), user="65532:65532")


@pytest.mark.parametrize("container, image, expected", [
    # command replaces ENTRYPOINT and drops CMD
    ({"command": ["sh", "-c", "x"]}, NGC_LIKE, ["sh", "-c", "x"]),
    ({"command": ["sh"], "args": ["-c", "x"]}, NGC_LIKE, ["sh", "-c", "x"]),
    # args alone replace CMD and keep ENTRYPOINT (what job pods rely on)
    ({"args": ["sh", "-c", "x"]}, NGC_LIKE, ["/opt/nvidia/nvidia_entrypoint.sh", "sh", "-c", "x"]),
    # neither: ENTRYPOINT + CMD
    ({}, NGC_LIKE, ["/opt/nvidia/nvidia_entrypoint.sh", "bash"]),
    ({"args": ["--num-gpus=2"]}, MANAGER_LIKE, ["manager.sh", "--num-gpus=2"]),
    ({}, ImageConfig(image_id="sha", cmd=("python3",)), ["python3"]),
])
def test_command_line_follows_the_kubelet(container, image, expected):
    assert container_argv({"name": "main", **container}, image, {}) == expected


def test_command_and_args_are_expanded_with_the_kubelet_environment():
    container = {"name": "main", "command": ["horovodrun", "-np", "$(NP)"], "args": ["$(SCRIPT)", "$$(NP)", "$(HOME)"]}
    assert container_argv(container, NGC_LIKE, {"NP": "4", "SCRIPT": "train.py"}) == [
        "horovodrun", "-np", "4", "train.py", "$(NP)", "$(HOME)"
    ]


def test_nothing_to_run_is_a_config_error():
    with pytest.raises(ContainerConfigError, match="no command specified"):
        container_argv({"name": "main"}, ImageConfig(image_id="sha"), {})


def pod(security_context=None):
    return {"spec": {"securityContext": security_context or {}}}


@pytest.mark.parametrize("pod_context, container_context, image_user, expected", [
    ({}, {}, "", ""),  # the image's USER (root) applies: podman needs no --user
    ({}, {}, "65532:65532", "65532:65532"),
    ({"runAsUser": 1000}, {}, "65532:65532", "1000"),  # the group then comes from the image's passwd
    ({"runAsUser": 1000, "runAsGroup": 2000}, {}, "", "1000:2000"),
    ({"runAsUser": 1000}, {"runAsUser": 0}, "", "0"),  # the container's context wins
    ({}, {"runAsGroup": 5}, "65532", "65532:5"),
])
def test_user_is_the_security_context_over_the_image(pod_context, container_context, image_user, expected):
    container = {"name": "main", "securityContext": container_context}
    assert run_as(pod(pod_context), container, ImageConfig(image_id="sha", user=image_user)) == expected


@pytest.mark.parametrize("image_user, context, message", [
    ("", {"runAsNonRoot": True}, "image will run as root"),
    ("root", {"runAsNonRoot": True}, "image will run as root"),
    ("nobody", {"runAsNonRoot": True}, "non-numeric user"),
])
def test_run_as_non_root_refuses_root(image_user, context, message):
    with pytest.raises(ContainerConfigError, match=message):
        run_as(pod(), {"name": "main", "securityContext": context}, ImageConfig(image_id="sha", user=image_user))
    assert run_as(pod(), {"name": "m", "securityContext": {"runAsNonRoot": True, "runAsUser": 7}},
                  ImageConfig(image_id="sha", user=image_user)) == "7"


@pytest.mark.parametrize("container, expected", [
    ({"image": "distributetrain/base:0.1.0"}, "IfNotPresent"),
    ({"image": "distributetrain/base"}, "Always"),
    ({"image": "distributetrain/base:latest"}, "Always"),
    ({"image": "registry:5000/base"}, "Always"),
    ({"image": "base@sha256:abc"}, "IfNotPresent"),
    ({"image": "base:1", "imagePullPolicy": "Never"}, "Never"),
])
def test_pull_policy_defaults_as_the_apiserver(container, expected):
    assert pull_policy(container) == expected


def test_absent_image_reasons_and_messages_are_the_kubelets():
    never = unavailable({"image": "x/y:1", "imagePullPolicy": "Never"}, "image not known")
    assert (never.reason, never.message) == (
        ERR_IMAGE_NEVER_PULL, 'Container image "x/y:1" is not present with pull policy of Never')
    pulled = unavailable({"image": "x/y:1"}, "x/y:1: image not known")
    assert pulled.reason == ERR_IMAGE_PULL
    assert pulled.message.startswith('failed to pull image "x/y:1": x/y:1: image not known')
