#!/usr/bin/env python3
"""A stand-in for SLURM's `srun` inside a job allocation, for the network-namespace lab: it starts
the tasks of one job step on the allocation's nodes (each node a namespace of the lab) with the
environment srun gives a task (srun(1) "OUTPUT ENVIRONMENT VARIABLES"): SLURM_PROCID (global task
id), SLURM_NTASKS/SLURM_NPROCS, SLURM_LOCALID (task id on its node), SLURM_NODEID (the node's
index in the step), SLURM_NNODES, SLURM_NODELIST/SLURM_JOB_NODELIST/SLURM_STEP_NODELIST,
SLURM_TASKS_PER_NODE ("2(x2)"), SLURMD_NODENAME, SLURM_JOB_ID, SLURM_STEP_ID. Tasks are placed by
block distribution (srun's default: consecutive ids fill a node before the next). --export is
read as srun reads it (ALL, NONE, or ALL,K=V,...). Without -K (--kill-on-bad-exit) a failing task
leaves the others running, as srun's default; SIGINT/SIGTERM to srun are passed to every task.
The exit code is the highest task exit code (128 + signal for a killed task).

It records its own argv (one JSON line) in the file named by --zt-record, so a test can check the
command line the launcher built. Options it does not know make it fail as srun does.

Usage (by a wrapper script named srun on PATH):
  fake_srun.py --zt-map MAPFILE --zt-record FILE [srun options] PROGRAM [ARGS...]
MAPFILE: JSON {"hosts": {host: namespace}, "nodelist": [hosts of the allocation]}.
"""
import json
import os
import re
import signal
import subprocess
import sys


def die(msg):
    sys.stderr.write(f"srun: error: {msg}\n")
    sys.exit(1)


def expand(nodelist):
    """SLURM's hostlist syntax, the common part: a,b,c[0-2,5]."""
    hosts = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist):
        base, ranges = m.group(1), m.group(2)
        if not ranges:
            hosts.append(base)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{base}{str(i).zfill(len(lo))}")
    return hosts


def tasks_per_node_spec(counts):
    out, i = [], 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        out.append(f"{counts[i]}(x{j - i})" if j - i > 1 else str(counts[i]))
        i = j
    return ",".join(out)


def main(argv):
    if argv[:1] != ["--zt-map"] or argv[2:3] != ["--zt-record"]:
        die("fake_srun.py must be called through its wrapper")
    with open(argv[1]) as f:
        lab = json.load(f)
    with open(argv[3], "a") as f:
        f.write(json.dumps(argv[4:]) + "\n")
    args = argv[4:]
    ntasks, nodes, per_node, export, kill_bad, label = None, None, None, "ALL", False, False
    with_value = {"-n": "ntasks", "--ntasks": "ntasks", "-w": "nodelist", "--nodelist": "nodelist",
                  "-N": "nodes", "--nodes": "nodes", "--ntasks-per-node": "per_node",
                  "--export": "export", "--mpi": None, "--cpu-bind": None, "--cpu_bind": None,
                  "-c": None, "--cpus-per-task": None, "--gpus-per-task": None,
                  "--distribution": None, "-m": None, "-J": None, "--job-name": None,
                  "-p": None, "--partition": None}
    switches = {"-K": "kill", "--kill-on-bad-exit": "kill", "-l": "label", "--label": "label",
                "-u": None, "--unbuffered": None, "--exact": None, "--overlap": None}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        name, eq, val = a.partition("=")
        if name in with_value:
            if not eq:
                i += 1
                if i >= len(args):
                    die(f"option {a} requires an argument")
                val = args[i]
            what = with_value[name]
            if what == "ntasks":
                ntasks = int(val)
            elif what == "nodelist":
                nodes = expand(val)
            elif what == "per_node":
                per_node = int(val)
            elif what == "export":
                export = val
        elif re.fullmatch(r"-n\d+", a):
            ntasks = int(a[2:])
        elif name in switches and not eq:
            kill_bad = kill_bad or switches[name] == "kill"
            label = label or switches[name] == "label"
        elif a == "--":
            i += 1
            break
        else:
            die(f"unrecognized option '{a}'")
        i += 1
    program = args[i:]
    if not program:
        die("No command given to execute.")
    nodes = nodes or expand(os.environ.get("SLURM_JOB_NODELIST", "") or ",".join(lab["nodelist"]))
    for h in nodes:
        if h not in lab["hosts"]:
            die(f"Invalid node name specified: {h}")
    if ntasks is None:
        ntasks = len(nodes) * (per_node or 1)
    if per_node is None:
        base, extra = divmod(ntasks, len(nodes))
        counts = [base + (1 if k < extra else 0) for k in range(len(nodes))]
    else:
        counts = [min(per_node, max(0, ntasks - k * per_node)) for k in range(len(nodes))]
    if sum(counts) != ntasks:
        die(f"cannot place {ntasks} tasks on {len(nodes)} nodes")
    used = [h for h, c in zip(nodes, counts) if c > 0]
    counts = [c for c in counts if c > 0]

    if export.startswith("NONE"):
        base_env = {}
        extra_kv = export.split(",")[1:]
    else:
        base_env = dict(os.environ)
        extra_kv = export.split(",")[1:] if export.startswith("ALL") else export.split(",")
    for kv in extra_kv:
        if "=" in kv:
            k, v = kv.split("=", 1)
            base_env[k] = v
        elif kv in os.environ:
            base_env[kv] = os.environ[kv]
    nodelist = ",".join(used)
    procs = []
    rank = 0
    for node_id, (host, count) in enumerate(zip(used, counts)):
        for local in range(count):
            env = dict(base_env, SLURM_PROCID=str(rank), SLURM_NTASKS=str(ntasks),
                       SLURM_NPROCS=str(ntasks), SLURM_LOCALID=str(local),
                       SLURM_NODEID=str(node_id), SLURM_NNODES=str(len(used)),
                       SLURM_STEP_NUM_TASKS=str(ntasks), SLURM_STEP_NUM_NODES=str(len(used)),
                       SLURM_NODELIST=nodelist, SLURM_JOB_NODELIST=nodelist,
                       SLURM_STEP_NODELIST=nodelist,
                       SLURM_TASKS_PER_NODE=tasks_per_node_spec(counts),
                       SLURM_STEP_TASKS_PER_NODE=tasks_per_node_spec(counts),
                       SLURMD_NODENAME=host, SLURM_JOB_ID="4242", SLURM_STEP_ID="0")
            cmd = ["ip", "netns", "exec", lab["hosts"][host], "unshare", "-u", "sh", "-c",
                   f'hostname {host} && exec "$@"', "sh"] + program
            procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL))
            rank += 1

    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    codes = [None] * len(procs)
    while any(c is None for c in codes):
        pid, status = os.wait()
        for k, p in enumerate(procs):
            if p.pid == pid:
                code = os.waitstatus_to_exitcode(status)
                codes[k] = 128 - code if code < 0 else code
                p.returncode = code
                if codes[k] != 0 and kill_bad:
                    sys.stderr.write(f"srun: error: task {k} exited with {codes[k]}; "
                                     "terminating the step\n")
                    forward(signal.SIGKILL, None)
    return max(codes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
