# Chief: hostfile (itself first, so rank 0 and its logs and checkpoints are here), a
# bounded SSH check of every worker (horovodrun's own failure is opaque), then horovodrun;
# elastic jobs (DT_MIN_PROCS set) get a discovery script (discover.py) that asks the manager.
set -eu
# First: every ssh from here on, horovodrun's included, checks the job's host key.
@SSH_WRAPPER@
hostfile=/tmp/distributetrain-hostfile
printf '%s slots=%s\n' "$DT_CHIEF_ADDRESS" "$DT_CHIEF_SLOTS" > "$hostfile"
for worker in $DT_WORKERS; do
  printf '%s slots=%s\n' "${worker%:*}" "${worker##*:}" >> "$hostfile"
done
for worker in $DT_WORKERS; do
  address="${worker%:*}"
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
if [ -n "$DT_WORKERS" ] && [ "$DT_SAME_INTERFACES" = true ]; then
  interface=$(python -c 'import sys, psutil
print(next((name for name, addresses in psutil.net_if_addrs().items()
            if any(a.address == sys.argv[1] for a in addresses)), ""))' "$DT_CHIEF_ADDRESS") || interface=""
fi
if [ -z "${DT_MIN_PROCS:-}" ]; then
  echo "distributetrain: horovodrun -np $DT_NUM_PROCS on $(tr '\n' ' ' < "$hostfile")${interface:+ over $interface}"
  # Importing TensorFlow in every rank can take longer than horovodrun's 30 s default.
  # --gloo: the image's Horovod is built without MPI; saying so skips a probe for it.
  exec horovodrun --gloo ${interface:+--network-interface "$interface"} -np "$DT_NUM_PROCS" -hostfile "$hostfile" \
    -p "$DT_PORT" --start-timeout 120 python "$DT_FILENAME" "$@"
fi
# Elastic: horovodrun runs the discovery script every second and reshapes the job when
# its answer changes. The script asks the manager (which lists Ready workers only) and
# falls back to its last good answer, first the hosts above, so a manager that is
# briefly unreachable never makes Horovod see every host gone.
hosts=/tmp/distributetrain-hosts
sed 's/ slots=/:/' "$hostfile" > "$hosts"
discover=/tmp/distributetrain-discover
cat > "$discover" <<'DISCOVER'
@DISCOVER_PY@DISCOVER
chmod +x "$discover"
echo "distributetrain: elastic horovodrun, $DT_MIN_PROCS to $DT_NUM_PROCS processes, hosts from $DT_DISCOVERY_URL"
# New hosts get new names and addresses (the manager never reuses a worker's), so
# Horovod's blacklist of a failed host never blocks its replacement.
exec horovodrun --gloo ${interface:+--network-interface "$interface"} -np "$DT_NUM_PROCS" \
  --min-np "$DT_MIN_PROCS" --max-np "$DT_NUM_PROCS" --host-discovery-script "$discover" \
  --elastic-timeout "$DT_ELASTIC_TIMEOUT" --gloo-timeout-seconds 120 \
  -p "$DT_PORT" --start-timeout 120 python "$DT_FILENAME" "$@"
