# Whether a chief trains through this worker: whether sshd has a session open. Each
# session is a process of sshd's beside the listener: a forked `sshd` before OpenSSH 9.8,
# an `sshd-session` from 9.8 on. The argument is the /proc to read (tests give a fake one).
chief_connected() {
  [ "$(grep -lxE 'sshd|sshd-session' "$1"/[0-9]*/comm 2>/dev/null | wc -l)" -gt 1 ]
}
