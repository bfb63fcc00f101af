"""How the agent asks podman for a container: whole command lines, compared."""

from localcluster.agent.runtime import LaunchSpec, _start_error_message, create_arguments, security_options
from localcluster.agent.volumes import Mount


def test_create_command_line():
    spec = LaunchSpec(
        name="k8s_worker_job-worker-0_team_0123abcd_0", image_id="sha256id", netns_path="/run/netns/dt-p1-2",
        hostname="job-worker-0",
        mounts=(Mount("/pods/x/etc-hosts", "/etc/hosts", False), Mount("/pods/x/volumes/ssh", "/etc/ssh/job", True)),
        argv=("/opt/nvidia/nvidia_entrypoint.sh", "sh", "-c", "exec sshd -D"), env={"DT_PORT": "12345"},
        user="1000:1000", workdir="/work", security=("--cap-drop=ALL",), labels={"io.kubernetes.pod.uid": "u"},
    )
    assert create_arguments(spec) == [
        "create", "--name", "k8s_worker_job-worker-0_team_0123abcd_0", "--pull=never", "--log-driver=none",
        "--network=ns:/run/netns/dt-p1-2", "--hostname=job-worker-0", "--no-hosts",
        '--entrypoint=["/opt/nvidia/nvidia_entrypoint.sh", "sh", "-c", "exec sshd -D"]',
        "--label=io.kubernetes.pod.uid=u", "--env=DT_PORT=12345", "--user=1000:1000", "--workdir=/work",
        "--mount=type=bind,source=/pods/x/etc-hosts,destination=/etc/hosts",
        "--mount=type=bind,source=/pods/x/volumes/ssh,destination=/etc/ssh/job,ro=true",
        "--cap-drop=ALL", "sha256id",
    ]


def test_security_context_options():
    pod = {"spec": {"securityContext": {"supplementalGroups": [5], "fsGroup": 7}}}
    container = {"securityContext": {"capabilities": {"add": ["SYS_PTRACE"], "drop": ["NET_RAW"]},
                                     "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                     "seccompProfile": {"type": "RuntimeDefault"}}}
    assert security_options(pod, container) == [
        "--cap-add=SYS_PTRACE", "--cap-drop=NET_RAW", "--read-only", "--security-opt=no-new-privileges",
        "--group-add=5", "--group-add=7",
    ]
    assert security_options({"spec": {}}, {"securityContext": {"privileged": True}}) == [
        "--privileged", "--security-opt=seccomp=unconfined"]


def test_start_error_message_is_runcs_reason_as_the_kubelet_words_it():
    stderr = ('runc create failed: unable to start container process: exec: "manager.sh": executable file not found '
              'in $PATH\nError: runc: runc create failed: unable to start container process: exec: "manager.sh": '
              'executable file not found in $PATH: OCI runtime attempted to invoke a command that was not found\n')
    assert _start_error_message(stderr) == (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        'failed: unable to start container process: exec: "manager.sh": executable file not found in $PATH: unknown')
