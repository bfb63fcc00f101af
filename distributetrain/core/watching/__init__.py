"""An attempt's start as its pods' Events tell it: slow starts (an image pulled, a node awaited) are
progress, and ``--worker-ready-timeout`` counts only the rest."""
