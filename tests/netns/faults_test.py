#!/usr/bin/env python3
"""Whole-job teardown across "machines" (nslab.py): a 2 nodes x 2 CPU ranks `zt train` through the
ssh runner, hit mid-training in five ways. Each case checks the launcher's exit code, that its
error line names the failing rank or node and its host, and that every process of the job on
every node (node launchers, ranks, ssh clients; anything in the namespaces but the sshd
listeners) is gone within the bound: 10 s + the teardown grace (ZT_LAUNCH_GRACE_S=1) after the
fault, or after the detection timeout for faults that only a timeout can see.

a) kill -9 of a rank on node 1: exit 137 (128 + SIGKILL, as on one machine), names rank 2, node1;
b) kill -9 of node 1's whole process tree (its node launcher and its ranks): non-zero, names node1;
c) node 1's cable cut (its bridge port down: packets vanish, no reset) mid-training: the master
   notices the silent link, node 1 notices its silent master (ZT_NODE_LINK_TIMEOUT_S), both
   sides stop: non-zero, names node1; node 1's ranks are gone although no packet reaches it;
d) SIGTERM to the master launcher: exit 143 (128 + SIGTERM), every node's ranks stopped;
e) a rank on node 1 frozen (SIGSTOP) with ZT_HEARTBEAT_TIMEOUT_S=5: exit 124 naming rank 2,
   node1 and its last step, within the heartbeat timeout + 10 s + grace (never the 30-minute
   collective hang).

Oracle: the behaviour issue 19 and docs/launcher.md specify; process presence from the kernel
(`ip netns pids`, /proc).

Usage: faults_test.py ZT_BINARY SOURCE_DIR
"""
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nslab  # noqa: E402
from nslab import check, log  # noqa: E402

ZT = os.path.abspath(sys.argv[1])
GRACE_S = 1
LINK_TIMEOUT_S = 4
# The master sees a silent node when ssh's keep-alives give up: ServerAliveInterval 2 s x
# ServerAliveCountMax 5 (multi_node.h), so 10 s.
SSH_ALIVE_S = 10
HEARTBEAT_S = 5  # a loaded 2-core machine must not starve a healthy rank that long
BOUND_S = 10 + GRACE_S
signal.alarm(400)

lab = nslab.Lab(2, "faults").start()
work = nslab.make_workdir(lab)
hf = nslab.hostfile(lab, slots=2)


def start(name, **extra_env):
    metrics = os.path.join(lab.tmp, name + ".jsonl")
    env = nslab.base_env(lab, ZT_LAUNCH_GRACE_S=GRACE_S, ZT_NODE_LINK_TIMEOUT_S=LINK_TIMEOUT_S,
                         **extra_env)
    job = lab.spawn(name, lab.master_cmd(
        [ZT, "launch", "-H", hf, "--num_procs", "2", "--master_port", nslab.free_port()]
        + nslab.train_args(ZT, work, metrics, 1000000), cwd=work), env)
    ok = nslab.wait_for(lambda: len(nslab.steps_in(metrics)) >= 2 or not job.running(), 90)
    ranks = lab.rank_pids(1)
    if not check(f"{name}: training runs on both nodes",
                 ok and job.running() and sorted(ranks) == [2, 3],
                 f"running {job.running()}, node1 ranks {ranks}\n{job.err()[-3000:]}"):
        job.kill()
        return None, None
    return job, ranks


def node_launcher(i):
    for pid in lab.node_pids(i):
        cmd = nslab.proc_cmdline(pid)
        if "launch" in cmd and any(a.startswith("--node_rank") for a in cmd):
            return pid
    return None


def descendants(root):
    pids = {root}
    grew = True
    while grew:
        grew = False
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) not in pids and nslab.proc_ppid(int(d)) in pids:
                pids.add(int(d))
                grew = True
    return pids


def judge(name, job, t_fault, bound, want_rc, names, ignore_sshd=False):
    """Waits for the launcher, then checks its code, its message and that nothing is left."""
    rc = job.wait(max(1.0, bound + 20 - (time.monotonic() - t_fault)))
    t_exit = time.monotonic() - t_fault

    def left_now():
        out = {}
        for i, pids in lab.all_node_pids().items():
            pids = [p for p in pids if not (ignore_sshd and
                                            nslab.proc_cmdline(p)[:1] and
                                            nslab.proc_cmdline(p)[0].startswith("sshd"))]
            if pids:
                out[i] = [nslab.describe(p) for p in pids]
        return out

    deadline = t_fault + bound
    left = left_now()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = left_now()
    t_gone = time.monotonic() - t_fault
    err = job.err()
    tail = "\n".join(l for l in err.splitlines()[-15:])
    log(f"{name}: launcher exit {rc} after {t_exit:.1f} s; all gone after {t_gone:.1f} s")
    log("  " + "\n  ".join(l for l in err.splitlines() if l.startswith("zt launch")))
    if want_rc == "nonzero":
        check(f"{name}: the launcher exits non-zero", rc not in (None, 0), f"rc {rc}\n{tail}")
    else:
        check(f"{name}: the launcher exits {want_rc}", rc == want_rc, f"rc {rc}\n{tail}")
    check(f"{name}: the launcher ended within {bound} s", rc is not None and t_exit <= bound,
          f"{t_exit:.1f} s")
    check(f"{name}: every process on every node gone within {bound} s", not left, str(left))
    # The master's own last line ("zt launch: ..."; a node launcher's lines read
    # "zt launch (node I, HOST): ...") is what must name the failure.
    last = ([l for l in err.splitlines() if l.startswith("zt launch: ")] or [""])[-1]
    for pattern in names:
        check(f"{name}: the launcher's message names {pattern}", re.search(pattern, last), tail)


# --- a) kill -9 of a remote rank ---
job, ranks = start("kill_rank")
if job:
    os.kill(ranks[2], signal.SIGKILL)
    judge("kill_rank", job, time.monotonic(), BOUND_S, 137, [r"rank 2\b", r"node1\b"])

# --- b) kill -9 of node 1's node launcher and its ranks ---
job, ranks = start("kill_node")
if job:
    nl = node_launcher(1)
    if check("kill_node: node 1's launcher found", nl, str(lab.node_pids(1))):
        tree = descendants(nl)
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        judge("kill_node", job, time.monotonic(), BOUND_S, "nonzero", [r"node1\b"])
    else:
        job.kill()

# --- c) node 1's cable cut ---
job, ranks = start("link_down")
if job:
    lab.set_link(1, False)
    t = time.monotonic()

    def node1_job_pids():
        return [p for p in lab.node_pids(1)
                if not (nslab.proc_cmdline(p)[:1] or [""])[0].startswith("sshd")]

    # Node 1 hears nothing from the master: its launcher stops its ranks after the link timeout.
    nslab.wait_for(lambda: not node1_job_pids(), LINK_TIMEOUT_S + GRACE_S + 5)
    t1 = time.monotonic() - t
    log(f"link_down: node 1's launcher and ranks gone after {t1:.1f} s")
    check(f"link_down: node 1 stops its ranks within ZT_NODE_LINK_TIMEOUT_S + grace + 3 s",
          not node1_job_pids() and t1 <= LINK_TIMEOUT_S + GRACE_S + 3,
          f"{t1:.1f} s; left: {[nslab.describe(p) for p in node1_job_pids()]}")
    judge("link_down", job, t, max(LINK_TIMEOUT_S, SSH_ALIVE_S) + BOUND_S, "nonzero", [r"node1\b"],
          ignore_sshd=True)
    lab.set_link(1, True)

# --- d) SIGTERM to the master ---
job, ranks = start("sigterm")
if job:
    os.kill(job.proc.pid, signal.SIGTERM)
    judge("sigterm", job, time.monotonic(), BOUND_S, 143, [])

# --- e) a frozen remote rank: the heartbeat names it ---
job, ranks = start("frozen", ZT_HEARTBEAT_TIMEOUT_S=HEARTBEAT_S)
if job:
    time.sleep(2)  # a heartbeat (one a second) with a step number has left rank 2
    os.kill(ranks[2], signal.SIGSTOP)
    judge("frozen", job, time.monotonic(), HEARTBEAT_S + BOUND_S, 124,
          [r"rank 2\b", r"node1\b", r"last step \d+"])

lab.close()
nslab.finish("faults_test")
