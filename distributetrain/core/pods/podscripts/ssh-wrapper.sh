# The chief's ssh, first on PATH (chief.sh runs this before anything else): every ssh the
# chief runs checks the job's host key, horovodrun's own included. Those carry
# `-o StrictHostKeyChecking=no` (horovod 0.28.1, runner/util/remote.py: its checks, its
# task servers, every rank on a worker, elastic replacements too), and an option on ssh's
# command line beats ~/.ssh/config. But ssh keeps the first value it is given for an
# option, so this ssh puts `=yes` before the caller's options and runs the real one by
# its absolute path, with the job's config file (its keys are not in the user's ~/.ssh,
# whose place is the image's choice). horovodrun forwards PATH to every rank: on the workers the directory
# does not exist, and is skipped. An image without ssh runs jobs on the chief alone.
ssh_wrapper_dir=/tmp/distributetrain-ssh
if real_ssh=$(command -v ssh); then
  mkdir -p "$ssh_wrapper_dir"
  cat > "$ssh_wrapper_dir/ssh" <<SSH
#!/bin/sh
exec '$real_ssh' -F @SSH_CONFIG@ -o StrictHostKeyChecking=yes "\$@"
SSH
  chmod +x "$ssh_wrapper_dir/ssh"
  PATH="$ssh_wrapper_dir:$PATH"
  export PATH
fi
