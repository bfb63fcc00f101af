"""distributetrain: Horovod/TensorFlow distributed training on Kubernetes.

Four layers, each importing only the ones before it:

- ``core``: pure rules and builders (the plan, the inventory, every manifest);
- ``kube``: the API layer (every call with a deadline, Events, the placement Lease, waits);
- ``manager``: what the manager pod runs, one loop of attempts (``manager.job.job``) between
  pre-training and post-training;
- ``cli``: the command line, for users (``submit``, ``list``, ...) and for ``manager.sh``.
"""
