"""Hostname and the kubelet-managed /etc/hosts."""

from localcluster.agent.sandbox import hosts_file, pod_hostname


def pod(**spec):
    return {"metadata": {"name": "job-worker-0", "namespace": "team"}, "spec": spec}


def test_hostname_is_the_pod_name_or_spec_hostname_or_the_node_with_host_network():
    assert pod_hostname(pod(), "gpu-a") == "job-worker-0"
    assert pod_hostname(pod(hostname="w0"), "gpu-a") == "w0"
    assert pod_hostname(pod(hostNetwork=True), "gpu-a") == "gpu-a"
    long = {"metadata": {"name": "a" * 62 + "-b" * 5, "namespace": "n"}, "spec": {}}
    assert pod_hostname(long, "gpu-a") == "a" * 62


def test_hosts_file_lists_the_pod_and_its_aliases():
    text = hosts_file(pod(hostAliases=[{"ip": "10.0.0.9", "hostnames": ["store", "store.local"]}]),
                      "10.233.1.2", "job-worker-0")
    assert text.startswith("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
    assert "10.233.1.2\tjob-worker-0\n" in text
    assert text.endswith("# Entries added by HostAliases.\n10.0.0.9\tstore\tstore.local\n")


def test_hosts_file_with_subdomain_has_the_fqdn():
    text = hosts_file(pod(subdomain="workers"), "10.233.1.2", "w0")
    assert "10.233.1.2\tw0.workers.team.svc.cluster.local\tw0\n" in text
