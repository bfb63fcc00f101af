"""The unit tests' one harness: the fake Kube (``kube``) and API server (``apiserver``),
the builders of the objects they hold (``builders``), the Events fake (``events``), the
pod list's protobuf (``podproto``), the chief's discovery script run as the chief runs it
(``discoverscript``), text sinks (``streams``) and the one poll helper (``polling``,
which the cluster tiers use too)."""
