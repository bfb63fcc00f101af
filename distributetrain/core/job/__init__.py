"""The job as asked and as recorded: its fields declared once (``jobspec``), its record on the
manager pod, its restarts."""
