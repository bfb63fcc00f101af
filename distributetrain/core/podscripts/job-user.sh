# Job pods run as a non-root uid (names.JOB_USER_UID) that the image must know: ssh and
# sshd look their user up in /etc/passwd and refuse to run without an entry. An image
# without one fails here, in one line that the pod's termination message shows, with an
# exit code (exitcodes.IMAGE_UNFIT) no training script's exit(1) is mistaken for.
if ! id -un >/dev/null 2>&1; then
  echo "distributetrain: the image has no user with uid $(id -u) (an /etc/passwd entry with a home directory, as base_image/Dockerfile creates): ssh and sshd cannot run without one" >&2
  exit @IMAGE_UNFIT@
fi
