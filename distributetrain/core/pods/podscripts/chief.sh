# Chief: the hosts from the manager (discover.py, itself first), a bounded SSH check of
# every worker (horovodrun's own failure is opaque), then horovodrun; elastic jobs
# (DT_MIN_PROCS set) give horovodrun the same discovery script.
set -eu
@JOB_USER_CHECK@
# Then: every ssh from here on, horovodrun's included, checks the job's host key.
@SSH_WRAPPER@
# Created with the workers, so its GPUs are held from the start (a multi-GB image pull
# included): the workers' addresses come from the manager once all are Ready.
discover=/tmp/distributetrain-discover
cat > "$discover" <<'DISCOVER'
@DISCOVER_PY@DISCOVER
chmod +x "$discover"
hosts=/tmp/distributetrain-hosts
"$discover" --wait "$DT_HOSTS_WAIT_S" > "$hosts"
hostfile=/tmp/distributetrain-hostfile
sed 's/:\([0-9]*\)$/ slots=\1/' "$hosts" > "$hostfile"
workers=$(tail -n +2 "$hostfile" | cut -d' ' -f1)
for address in $workers; do
  attempt=1
  until ssh -o ConnectTimeout=5 -p "$DT_PORT" "$address" true; do
    if [ "$attempt" -ge "$DT_SSH_ATTEMPTS" ]; then
      echo "distributetrain: worker $address does not accept SSH on port $DT_PORT after $attempt attempts" >&2
      exit 255
    fi
    attempt=$((attempt + 1))
    sleep 1
  done
done
# Pods of one cluster share the CNI's layout, so the interface holding this pod's IP is
# the one to use everywhere: naming it spares horovodrun its probe of every interface on
# every host (an SSH round and a Python start per host) before the job starts. Not so on
# the nodes' own networks (--host-network), whose interface names may differ by node,
# nor for a job on the chief alone (loopback, which horovodrun finds by itself).
interface=""
if [ -n "$workers" ] && [ "$DT_SAME_INTERFACES" = true ]; then
  interface=$(python -c 'import sys, psutil
print(next((name for name, addresses in psutil.net_if_addrs().items()
            if any(a.address == sys.argv[1] for a in addresses)), ""))' "$DT_CHIEF_ADDRESS") || interface=""
fi
if [ -z "${DT_MIN_PROCS:-}" ]; then
  echo "distributetrain: horovodrun -np $DT_NUM_PROCS on $(tr '\n' ' ' < "$hostfile")${interface:+ over $interface}"
  # Importing TensorFlow in every rank can take longer than horovodrun's 30 s defaults:
  # its start, and the ranks' rendezvous, where each waits for the slowest (--gloo-timeout).
  # --gloo: the image's Horovod is built without MPI; saying so skips a probe for it.
  exec horovodrun --gloo ${interface:+--network-interface "$interface"} -np "$DT_NUM_PROCS" -hostfile "$hostfile" \
    -p "$DT_PORT" --start-timeout 120 --gloo-timeout-seconds "$DT_GLOO_TIMEOUT" python "$DT_FILENAME" "$@"
fi
# Elastic: horovodrun runs the discovery script every second and reshapes the job when
# its answer changes.
echo "distributetrain: elastic horovodrun, $DT_MIN_PROCS to $DT_NUM_PROCS processes, hosts from $DT_HOSTS_URL"
# New hosts get new names and addresses (the manager never reuses a worker's), so
# Horovod's blacklist of a failed host never blocks its replacement. A host whose rank
# died while its pod lives on (a crash, an OOM kill, a Gloo error at a peer's loss; the
# chief's own pod among them) is not blacklisted for good, which would leave its GPUs
# idle for the rest of the job: it is tried again after 10-15 s, then after twice as
# long at each new failure, at most 300 s.
exec horovodrun --gloo ${interface:+--network-interface "$interface"} -np "$DT_NUM_PROCS" \
  --min-np "$DT_MIN_PROCS" --max-np "$DT_NUM_PROCS" --host-discovery-script "$discover" \
  --elastic-timeout "$DT_ELASTIC_TIMEOUT" --gloo-timeout-seconds "$DT_GLOO_TIMEOUT" --blacklist-cooldown-range 5 300 \
  -p "$DT_PORT" --start-timeout 120 python "$DT_FILENAME" "$@"
