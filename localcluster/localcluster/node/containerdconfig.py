"""containerd's configuration, as pure functions: a node's (with the CRI, its registry
mirror and, on a DRA node, CDI) and the image cache's seed's (images only)."""

from __future__ import annotations

import json
from pathlib import Path

from localcluster.node.config import CNI_BIN_DIR, SANDBOX_IMAGE, Mirror, NodePaths


def containerd_config(paths: NodePaths, cdi: bool = False) -> str:
    """containerd's config (TOML, version 2). `restrict_oom_score_adj` because this machine lacks
    CAP_SYS_RESOURCE: without it every sandbox fails ("can't get final child's PID from pipe").
    With `cdi` (a DRA node's containerd 1.7), containers get the CDI devices the kubelet names
    from the specs in the node's CDI directory."""
    cdi_settings = f"""
  enable_cdi = true
  cdi_spec_dirs = [{toml_string(paths.cdi_dir)}]""" if cdi else ""
    return f"""version = 2
root = {toml_string(paths.image_store)}
state = {toml_string(paths.containerd_state / "state")}

[grpc]
  address = {toml_string(paths.containerd_socket)}

[ttrpc]
  address = {toml_string(f"{paths.containerd_socket}.ttrpc")}

[plugins."io.containerd.internal.v1.opt"]
  path = {toml_string(paths.containerd_state / "opt")}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {toml_string(SANDBOX_IMAGE)}
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true{cdi_settings}

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = {toml_string(paths.runc_root)}

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {toml_string(CNI_BIN_DIR)}
    conf_dir = {toml_string(paths.cni_config_dir)}
    # An ipv6_only node's egress network is a second one (eth1); others have one.
    max_conf_num = 2

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = {toml_string(paths.registry_hosts)}
"""


def registry_hosts(mirror: Mirror) -> dict[str, str]:
    """{registry: hosts.toml}: each registry's pulls go to the mirror, under a path of its own
    (docker.io/library/python is <mirror>/v2/docker.io/library/python), so two registries'
    repositories of one name never meet."""
    return {
        registry: f"""server = "https://{registry}"

[host."{mirror.url}/v2/{registry}"]
  capabilities = ["pull", "resolve"]
  override_path = true
"""
        for registry in mirror.registries
    }


def seed_containerd_config(root: Path, state: Path, socket: Path) -> str:
    """containerd for the machine's image cache (imagecache.py): images only, so no CRI."""
    return f"""version = 2
root = {toml_string(root)}
state = {toml_string(state / "state")}
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = {toml_string(socket)}

[ttrpc]
  address = {toml_string(f"{socket}.ttrpc")}

[plugins."io.containerd.internal.v1.opt"]
  path = {toml_string(state / "opt")}
"""


def containerd_command(containerd: Path, paths: NodePaths) -> list[str]:
    return [str(containerd), f"--config={paths.containerd_config}"]


def toml_string(value: object) -> str:
    """A TOML basic string (JSON's string escapes are TOML's)."""
    return json.dumps(str(value))
