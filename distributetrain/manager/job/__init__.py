"""The job's one loop of attempts (``job``) and its phases, pre-training and post-training, each
of which ``lifecycle`` runs with one way out: teardown, then the outcome."""
