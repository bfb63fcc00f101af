"""The job's one loop of attempts (``job``, ``nextattempt``) and its phases, pre-training and
post-training, each of which ``lifecycle`` runs with one way out (``ending``): teardown,
then the outcome."""
