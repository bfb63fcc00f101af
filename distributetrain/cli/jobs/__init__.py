"""The user's side of distributetrain: submit, list, status, logs and cancel jobs.

The manager pod runs a job; these commands create that pod (or a batch/v1 Job around
it) with the user's own credentials, and read back what the manager reports on it.
"""
