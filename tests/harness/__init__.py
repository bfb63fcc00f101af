"""The unit tests' one harness: the fake Kube (``kube``) and API server (``apiserver``),
the builders of the objects they hold (``builders``), the Events fake (``events``) and
the one poll helper (``polling``, which the cluster tiers use too)."""
