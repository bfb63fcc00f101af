#!/bin/sh
# The manager pod's entry point, as in the seeds' Manager.sh: pre-training plans the GPUs
# and creates workers then the chief; post-training follows the chief and tears down.
# Both get the same arguments. Clean-up runs even when pre-training fails, and SIGTERM
# (pod deletion) is forwarded so the running phase tears the job down itself.
set -u

# Every interpreter runs isolated (python -I, Python 3.11: -E -s -P): no PYTHON* variable, no
# user site-packages, and neither the working directory nor a script's directory on sys.path,
# so nothing a pod spec can set (a working directory holding a package named distributetrain,
# or a csv.py that importlib.metadata would import) runs in place of the manager's own code.

child=0
terminating=0
# A signal between phases (no child yet, or one just started) is remembered: no new
# phase starts after it but the teardown.
forward() { terminating=1; [ "$child" -ne 0 ] && kill -TERM "$child" 2>/dev/null; }
trap forward TERM INT

phase() {
  python -I -m distributetrain "$@" &
  child=$!
  [ "$terminating" -eq 1 ] && [ "$1" != teardown ] && kill -TERM "$child" 2>/dev/null
  wait "$child"
  phase_status=$?
  # A trapped signal interrupts `wait`; wait again for the phase's own exit code.
  while [ "$phase_status" -gt 128 ] && kill -0 "$child" 2>/dev/null; do
    wait "$child"
    phase_status=$?
  done
  child=0
  return "$phase_status"
}

# Help is pre-training's (both phases take the same flags): print it once and stop.
for arg in "$@"; do
  case "$arg" in
    --) break ;;
    -h|--help) exec python -I -m distributetrain pre-training --help ;;
  esac
done

version="$(python -I -c 'from importlib.metadata import version; print(version("distributetrain"))' 2>/dev/null)"
echo "manager.sh: distributetrain ${version:-unknown} running as uid $(id -u)" >&2
phase pre-training "$@"
pre_training_status=$?
if [ "$pre_training_status" -eq 2 ]; then
  exit 2  # bad input: nothing was created
fi
if [ "$pre_training_status" -ne 0 ]; then
  # Pre-training cleans up after itself; this covers a hard crash (unless the pod's
  # restartPolicy restarts this container, which then adopts the job).
  phase teardown --unless-restarting --failed-with "$pre_training_status" "$@"
  exit "$pre_training_status"
fi
if [ "$terminating" -eq 1 ]; then
  # The pod is being deleted just as pre-training finished: no training, only teardown.
  phase teardown --unless-restarting --failed-with 143 "$@"
  exit 143
fi
phase post-training "$@"
post_training_status=$?
if [ "$post_training_status" -gt 128 ]; then
  # Killed by a signal, perhaps before its own teardown: make sure (idempotent).
  phase teardown --unless-restarting --failed-with "$post_training_status" "$@"
fi
exit "$post_training_status"
