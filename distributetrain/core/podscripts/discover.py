# The chief's view of the job's hosts, Horovod's `address:slots` lines with the chief
# first (rank 0, its logs and checkpoints stay here). The workers come from the manager
# (DT_HOSTS_URL), which answers 503 until every worker of the attempt is Ready.
#   discover --wait SECONDS   ask until the manager answers (the chief's start)
#   discover                  ask once (horovodrun --host-discovery-script, every second);
#                             the last good answer while the manager is unreachable, so
#                             Horovod never sees every host gone for a manager's brief absence
#!/usr/bin/env python
import os, sys, time, urllib.request
url = os.environ["DT_HOSTS_URL"]
last = "/tmp/distributetrain-workers"
def ask():
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.read().decode()
if sys.argv[1:2] == ["--wait"]:
    give_up_at = time.monotonic() + float(sys.argv[2])
    while True:
        try:
            workers = ask()
            break
        except OSError as error:  # 503 (not yet) is one too, as is an unreachable manager
            if time.monotonic() >= give_up_at:
                sys.exit(f"distributetrain: no hosts from the manager at {url} within {sys.argv[2]}s ({error})")
            time.sleep(1)
else:
    try:
        workers = ask()
    except OSError:
        with open(last) as previous:
            workers = previous.read()
with open(last + ".partial", "w") as partial:
    partial.write(workers)
os.replace(last + ".partial", last)
sys.stdout.write(f"{os.environ['DT_CHIEF_ADDRESS']}:{os.environ['DT_CHIEF_SLOTS']}\n{workers}")
