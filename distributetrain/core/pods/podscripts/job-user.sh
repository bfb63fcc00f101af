# Job pods run as whichever non-root UID their security context or the platform gives
# them (core.podsecurity): 1000, the namespace's own under OpenShift, any --run-as-user.
# ssh and sshd look their user up (getpwuid, getpwnam) and refuse to run without an
# entry, so a UID the image does not know gets one: nss_wrapper (Debian's and Ubuntu's
# libnss-wrapper, RHEL's nss_wrapper-libs; the base image has it), preloaded, serves the
# image's passwd and group files and the entry, written on the pod's scratch volume, not
# the root filesystem (read-only under some policies). Everything this shell starts
# inherits the preload, ssh and sshd included, and horovodrun forwards it with the rest
# of the chief's environment to every rank it starts on a worker, whose own script wrote
# the same files. An image without it (and no entry for the UID) fails here, in one line
# that the pod's termination message shows, with an exit code (exitcodes.IMAGE_UNFIT) no
# training script's exit(1) is mistaken for. Where distributions put the library:
# manifests.NSS_WRAPPER_LIBRARIES.
# A home the user cannot write (none, or the image's under a read-only root filesystem)
# gives way to one on the scratch volume: Keras, pip and TensorFlow write there.
scratch_home=@SCRATCH@/distributetrain-home
if ! id -un >/dev/null 2>&1; then
  entry="distributetrain-$(id -u):x:$(id -u):$(id -g):distributetrain job user:$scratch_home:/bin/sh"
  nss_wrapper=""
  for library in @NSS_WRAPPER_LIBRARIES@; do
    if [ -e "$library" ]; then
      nss_wrapper=$library
      break
    fi
  done
  if [ -n "$nss_wrapper" ]; then
    nss=@SCRATCH@/distributetrain-nss
    mkdir -p "$nss"
    printf '%s\n' "$(cat /etc/passwd)" "$entry" > "$nss/passwd"
    if cut -d: -f3 /etc/group | grep -qx "$(id -g)"; then
      cp /etc/group "$nss/group"
    else
      printf '%s\n' "$(cat /etc/group)" "distributetrain-$(id -g):x:$(id -g):" > "$nss/group"
    fi
    LD_PRELOAD="$nss_wrapper${LD_PRELOAD:+ $LD_PRELOAD}"
    NSS_WRAPPER_PASSWD=$nss/passwd
    NSS_WRAPPER_GROUP=$nss/group
    export LD_PRELOAD NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
  else
    echo "distributetrain: the image has no user with uid $(id -u) and no nss_wrapper to give it one (install libnss-wrapper, as base_image/ does, or add an /etc/passwd entry): ssh and sshd cannot run without one" >&2
    exit @IMAGE_UNFIT@
  fi
  HOME=$scratch_home
fi
if [ -z "${HOME:-}" ] || ! [ -w "$HOME" ]; then
  HOME=$scratch_home
fi
mkdir -p "$HOME"
export HOME
