#!/usr/bin/env python3
"""The network-namespace lab itself (nslab.py), before anything of ZeroTrain runs in it: three
nodes, each reachable from node 0 by ssh with the lab's key and config (and with no other key),
each answering with its own hostname and address; a node's cut cable makes it unreachable and its restored cable
reachable again; the launcher-style run (node 0's namespace with the lab's home over ~) uses the
config without -F; and closing the lab leaves no namespace, sshd, mount or file behind.

Oracle: what the kernel and OpenSSH report (`hostname`, `ip -4 addr`, `ip netns list`, /proc).

Usage: harness_test.py ZT_BINARY SOURCE_DIR
"""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nslab  # noqa: E402
from nslab import check, log  # noqa: E402

signal.alarm(120)
lab = nslab.Lab(3, "harness").start()
for i in range(3):
    p = lab.ssh(i, "hostname; ip -4 -o addr show dev eth0")
    check(f"ssh node0 -> node{i}", p.returncode == 0 and p.stdout.split("\n")[0] == f"node{i}"
          and f"inet {lab.addr[i]}/24" in p.stdout, f"rc {p.returncode}: {p.stdout}{p.stderr}")

# Key-only: without the lab's key, node1's sshd lets nobody in.
other_key = os.path.join(lab.tmp, "other_key")
nslab.sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other_key)
p = nslab.sh(*lab.on_node(0, ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o",
                               "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                               "-o", "IdentitiesOnly=yes", "-i", other_key, "-l", "root",
                               lab.addr[1], "true"]), check_rc=False)
check("sshd is key-only", p.returncode == 255 and "Permission denied" in p.stderr,
      f"rc {p.returncode}: {p.stderr}")

# The other nodes' names resolve inside a node (the per-namespace /etc/hosts).
p = nslab.sh(*lab.on_node(1, ["getent", "hosts", "node2"]), check_rc=False)
check("node2 resolves on node1", p.stdout.split()[:1] == [lab.addr[2]], p.stdout + p.stderr)

# The master's way: plain `ssh node1` in node 0's namespace reads the lab's ~/.ssh/config.
p = subprocess.run(lab.master_cmd(["ssh", "node1", "hostname"]), capture_output=True, text=True,
                   timeout=30)
check("plain ssh honours the config in ~ (master_cmd)", p.stdout.strip() == "node1",
      f"rc {p.returncode}: {p.stdout}{p.stderr}")
p = subprocess.run(lab.master_cmd(["hostname"]), capture_output=True, text=True)
check("the master runs as node0", p.stdout.strip() == "node0", p.stdout + p.stderr)
check("the real ~ is untouched", not os.path.exists(os.path.expanduser("~root/.ssh/id_ed25519"))
      or open(os.path.expanduser("~root/.ssh/id_ed25519.pub")).read()
      != open(os.path.join(lab.home, ".ssh/id_ed25519.pub")).read(), "")

# A cut cable: node1 unreachable (no reply at all), then back.
lab.set_link(1, False)
p = nslab.sh(*lab.on_node(0, ["ping", "-c", "1", "-W", "1", lab.addr[1]]), check_rc=False) \
    if nslab.shutil.which("ping") else lab.ssh(1, "true", timeout=15)
check("cut link: node1 unreachable", p.returncode != 0, p.stdout + p.stderr)
lab.set_link(1, True)
p = lab.ssh(1, "hostname")
check("restored link: node1 reachable", p.stdout.strip() == "node1", p.stdout + p.stderr)

# Nothing but the sshd listeners is left in the namespaces after those sessions.
left = lab.leftovers_after(5)
check("no process left on any node after the sessions", not left, str(left))

# Teardown leaves nothing behind.
made, tmp, pids = list(lab.made_ns), lab.tmp, lab.sshd_pids()
lab.close()
listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
check("teardown: no namespace left", not any(ns in listed for ns in made), listed)
check("teardown: no sshd left", not any(nslab.alive(p) for p in pids), str(pids))
check("teardown: no /etc/netns entry left", not any(os.path.exists(f"/etc/netns/{ns}")
                                                   for ns in made), "")
check("teardown: temp dir removed", not os.path.exists(tmp), tmp)
p = subprocess.run(["pgrep", "-f", f"{tmp}/sshd"], capture_output=True, text=True)
check("teardown: pgrep finds no sshd of the lab", p.returncode == 1, p.stdout)
nslab.finish("harness_test")
