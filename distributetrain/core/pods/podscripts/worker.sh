# Worker: sshd on the job's port with the job's host key, started by this shell, which
# the image's entrypoint execs as the container's PID 1. sshd passes no SIGTERM on: alone,
# it would exit and the ranks horovodrun started over SSH would die with the container,
# unwarned. So the shell sends SIGTERM to every other process of the container (its own
# PID namespace: `kill -1` reaches nothing outside) and waits, reaping them, until all
# have ended: the ranks have the grace period to save their work. sshd ending on its own
# still ends the container (`wait` returns its status).
# Every sshd setting is on its command line (`-f /dev/null`, @SSHD_OPTIONS@ from
# manifests.SSHD_OPTIONS), so no sshd_config in the image can weaken it. sshd runs as the
# pod's non-root user: `sshd -t` first turns an image whose sshd cannot (missing, or
# refusing its keys or options) into one line and a failed pod, not a worker never Ready.
# A bounded life: a worker whose manager has not answered for DT_ORPHAN_AFTER_S (its
# node hung: the manager pod stays Terminating and no garbage collector deletes this
# one), with no SSH session open (no chief trains through it), stops sshd and ends,
# freeing its GPUs. Any HTTP answer of the manager, an error status included, is one.
set -eu
@JOB_USER_CHECK@
@SSHD_SESSIONS@
set -- -f /dev/null -p "$DT_PORT" -h @HOST_KEY@ -o AuthorizedKeysFile=@AUTHORIZED_KEYS@ @SSHD_OPTIONS@
if ! [ -x /usr/sbin/sshd ]; then
  echo "distributetrain: the image has no /usr/sbin/sshd (install openssh-server): workers run it" >&2
  exit @IMAGE_UNFIT@
fi
if ! refused=$(/usr/sbin/sshd -t "$@" 2>&1); then
  echo "distributetrain: sshd cannot run as uid $(id -u) ($(id -un)): $(echo "$refused" | tr -s '\r\n' ' ')" >&2
  exit @IMAGE_UNFIT@
fi
trap 'kill -TERM -1 2>/dev/null || true; while kill -0 -1 2>/dev/null; do sleep 0.1; done; exit 143' TERM
/usr/sbin/sshd -D -e "$@" &
sshd=$!
(
  answered=$(date +%s)
  while sleep "$DT_ORPHAN_CHECK_S"; do
    if python -c 'import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=5)
except urllib.error.HTTPError:
    pass' "$DT_MANAGER_URL" 2>/dev/null; then
      answered=$(date +%s)
    elif [ $(($(date +%s) - answered)) -ge "$DT_ORPHAN_AFTER_S" ] \
        && ! chief_connected /proc; then
      echo "distributetrain: the manager at $DT_MANAGER_URL has not answered for ${DT_ORPHAN_AFTER_S}s and no chief is connected: ending" >&2
      kill -TERM "$sshd"
      exit 0
    fi
  done
) &
wait "$sshd"
