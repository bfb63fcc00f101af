"""The job's pods followed on the informer: an attempt's start, a pod or a node lost, and the pods
deleted and waited out (``teardown``)."""
