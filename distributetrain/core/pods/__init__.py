"""The objects a job creates, built pure: its pods (``manifests``) and what goes into them,
the Secret, its PodGroups, its NetworkPolicies. Planning measures these pods (``placement.podfit``)."""
