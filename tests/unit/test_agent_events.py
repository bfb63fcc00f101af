"""Kubelet-style pod events."""

import datetime

from localcluster.agent.events import PodEvent, event_object

NOW = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def test_event_names_the_pod_container_and_node():
    event = PodEvent(namespace="ns", pod_name="p", pod_uid="u", node="gpu-a", reason="BackOff",
                     message="Back-off restarting failed container main", field_path="spec.containers{main}")
    assert event_object(event, "p.1", NOW) == {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "p.1", "namespace": "ns"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "p", "uid": "u",
                           "fieldPath": "spec.containers{main}"},
        "reason": "BackOff", "message": "Back-off restarting failed container main", "type": "Warning",
        "source": {"component": "kubelet", "host": "gpu-a"}, "reportingComponent": "kubelet",
        "reportingInstance": "gpu-a", "firstTimestamp": "2030-01-02T03:04:05Z",
        "lastTimestamp": "2030-01-02T03:04:05Z", "count": 1,
    }
