# The chief's view of the job's hosts, Horovod's `address:slots` lines with the chief
# first (rank 0, its logs and checkpoints stay here). The workers come from the manager
# (DT_HOSTS_URL), which answers 503 until every worker of the attempt is Ready.
#   discover --wait SECONDS   ask until the manager answers (the chief's start)
#   discover                  ask once (horovodrun --host-discovery-script, every second);
#                             the last good answer while the manager is unreachable, so
#                             Horovod never sees every host gone for a manager's brief absence
# Horovod 0.28.1 splits each `host:slots` (hostfile and discovery lines alike) on every
# colon, so an IPv6 address cannot be a host: such a host is named `ipv6-fd00--a` for
# Horovod and ssh, and the chief's ssh config maps that name to the address (HostName)
# in @SSH_HOSTS_CONFIG@, which its ~/.ssh/config includes.
#!/usr/bin/env python
import http.client, os, sys, time, urllib.request
url = os.environ["DT_HOSTS_URL"]
last = "/tmp/distributetrain-workers"
def named(address):
    return "ipv6-" + address.replace(":", "-") if ":" in address else address
# Asked again: 503 (not yet), an unreachable manager, an answer cut short (the manager
# process that was answering ended: HTTPException, IncompleteRead among them).
UNANSWERED = (OSError, http.client.HTTPException)
def ask():
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.read().decode()
if sys.argv[1:2] == ["--wait"]:
    give_up_at = time.monotonic() + float(sys.argv[2])
    while True:
        try:
            workers = ask()
            break
        except UNANSWERED as error:
            if time.monotonic() >= give_up_at:
                sys.exit(f"distributetrain: no hosts from the manager at {url} within {sys.argv[2]}s ({error})")
            time.sleep(1)
else:
    try:
        workers = ask()
    except UNANSWERED:
        with open(last) as previous:
            workers = previous.read()
with open(last + ".partial", "w") as partial:
    partial.write(workers)
os.replace(last + ".partial", last)
# Horovod tells the hosts that are this one by their IPv4 addresses alone (its
# get_local_host_addresses): named by its IPv6 address, the chief would ssh to itself,
# where no sshd runs. It is `localhost` then, which Horovod runs on without ssh.
chief = os.environ["DT_CHIEF_ADDRESS"]
hosts = [("localhost" if ":" in chief else chief, os.environ["DT_CHIEF_SLOTS"])]
hosts += [line.rsplit(":", 1) for line in workers.splitlines() if line.strip()]
with open("@SSH_HOSTS_CONFIG@.partial", "w") as config:
    config.writelines(f"Host {named(address)}\n  HostName {address}\n" for address, _ in hosts if ":" in address)
os.replace("@SSH_HOSTS_CONFIG@.partial", "@SSH_HOSTS_CONFIG@")
sys.stdout.write("".join(f"{named(address)}:{slots}\n" for address, slots in hosts))
