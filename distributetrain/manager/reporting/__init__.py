"""What the manager tells the world: the job's record and Events on its pod, its exit codes, a
queued job's place in its queue."""
