"""distributetrain: Horovod/TensorFlow distributed training on Kubernetes.

An in-cluster manager pod plans GPUs (``placement``) from the cluster's free inventory
(``inventory``), creates SSH-ready worker pods and then a chief that runs ``horovodrun``
(``manifests``, ``pretraining``), watches the job to its end and tears it down
(``posttraining``, ``teardown``). ``cli`` wires it together.
"""

__version__ = "0.1.0"
