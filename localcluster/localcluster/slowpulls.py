"""The nodes' way to the registry, which can be made slow, per image and per node.

On a real cluster the base image is a multi-GB NGC image and a node's first pull of it
takes a minute. The local registry answers in a second, so every node pulls through
this proxy: it passes requests to the registry unchanged, but holds the answer to a
manifest by tag (the first request of a pull) for the delay set for that image and
the node asking (known by its address). The kubelet then shows what it shows on a real
node: the pod ContainerCreating, a Pulling Event, and Pulled after the delay.

Delays live in a JSON file that `Cluster.set_pull_delays` writes and every request
reads, so they change while the cluster runs:
    {"all": {"docker.io/distributetrain/base:0.1.0": 60},
     "nodes": {"10.233.0.12": {"docker.io/distributetrain/base:0.1.0": 0}}}
Run as `python -m localcluster.slowpulls --listen HOST:PORT --registry HOST:PORT --delays FILE`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
UPSTREAM_TIMEOUT_S = 60.0
# /v2/<registry>/<repository>/manifests/<tag>, as the nodes' mirror configuration asks.
MANIFEST_BY_TAG = re.compile(r"^/v2/(?P<repository>.+)/manifests/(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
DOCKER_HUB = "docker.io"


def normalize(image: str) -> str:
    """An image reference as containerd resolves it: python:3.11 is docker.io/library/python:3.11."""
    first, slash, rest = image.partition("/")
    if not slash:
        return f"{DOCKER_HUB}/library/{image}"
    if "." in first or ":" in first or first == "localhost":
        return image
    return f"{DOCKER_HUB}/{image}"


def delay_for(delays: dict, node_ip: str, image: str) -> float:
    """The node's own delay for `image` when set, else the cluster's, else none."""
    per_node = delays.get("nodes", {}).get(node_ip, {})
    if image in per_node:
        return float(per_node[image])
    return float(delays.get("all", {}).get(image, 0.0))


def set_delays(path: Path, delays: Mapping[str, float], node_ips: Sequence[str] | None = None) -> None:
    """Replace the delays (image: seconds) of every node, or with `node_ips` of those nodes
    alone (over every node's), in the delays file at `path`."""
    current = read_delays(path)
    normalized = {normalize(image): seconds for image, seconds in delays.items()}
    if node_ips is None:
        current["all"] = normalized
    else:
        for ip in node_ips:
            current.setdefault("nodes", {})[ip] = normalized
    write_delays(path, current)


def write_delays(path: Path, delays: dict) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(delays, indent=2, sort_keys=True) + "\n")
    temporary.replace(path)


def read_delays(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    registry: tuple[str, int]
    delays_file: Path

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._forward()

    def do_HEAD(self) -> None:  # noqa: N802
        self._forward()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        log.debug("%s " + format, self.client_address[0], *args)

    def _forward(self) -> None:
        self._hold_if_slow()
        upstream = http.client.HTTPConnection(*self.registry, timeout=UPSTREAM_TIMEOUT_S)
        try:
            headers = {key: value for key, value in self.headers.items() if key.lower() not in HOP_BY_HOP}
            upstream.request(self.command, self.path, headers=headers)
            reply = upstream.getresponse()
            self.send_response(reply.status, reply.reason)
            for key, value in reply.getheaders():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                while chunk := reply.read(CHUNK_BYTES):
                    self.wfile.write(chunk)
        finally:
            upstream.close()

    def _hold_if_slow(self) -> None:
        match = MANIFEST_BY_TAG.match(self.path.split("?", 1)[0])
        if not match:
            return
        image = f"{match['repository']}:{match['tag']}"
        delay = delay_for(read_delays(self.delays_file), self.client_address[0], image)
        if delay > 0:
            log.info("holding %s's pull of %s for %.0f s", self.client_address[0], image, delay)
            time.sleep(delay)


def serve(listen: tuple[str, int], registry: tuple[str, int], delays_file: Path) -> None:
    handler = type("Proxy", (_Proxy,), {"registry": registry, "delays_file": delays_file})
    server = ThreadingHTTPServer(listen, handler)
    server.daemon_threads = True
    log.info("passing pulls on %s:%d to %s:%d", *listen, *registry)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m localcluster.slowpulls", description=__doc__.split("\n")[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT the nodes pull from")
    parser.add_argument("--registry", required=True, help="HOST:PORT of the registry")
    parser.add_argument("--delays", required=True, type=Path, help="the delays file (JSON)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(_host_port(args.listen), _host_port(args.registry), args.delays)


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


if __name__ == "__main__":
    main()
