#!/bin/bash
# As NGC's /opt/nvidia/nvidia_entrypoint.sh: set up the environment, then run the
# arguments (a shell when there are none). The CUDA compatibility set-up has no CPU
# counterpart; what remains is that arguments are run with `exec`, keeping their PID.
if [ "$#" -eq 0 ]; then
  exec /bin/bash
fi
exec "$@"
