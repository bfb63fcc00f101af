"""What the job's pods need of the cluster before they are created (Secrets, a pod network, the
RuntimeClass, NetworkPolicies), and the hosts the chief is served."""
