#!/usr/bin/env python3
"""`zt launch` across two and three "machines" (network namespaces with their own sshd, nslab.py) through
the ssh runner, the master launcher running on node 0 as a user would run it there, with the
user's ~/.ssh/config (key, host aliases) and nothing else telling it how to reach the nodes:

a) a probe PROGRAM on 2 nodes x 2 CPU slots (-H hostfile, --num_procs 2): each rank runs on the
   node the hostfile gives it, with DeepSpeed's numbering (ranks host by host in file order:
   node0 -> 0,1, node1 -> 2,3; LOCAL_RANK, WORLD_SIZE=4, CROSS_RANK/CROSS_SIZE), the job's
   working directory, one ZT_JOB_TOKEN, MASTER_ADDR = node 0's address (DeepSpeed's default: the
   first host's address), the .deepspeed_env variables of ~ and the working directory and the
   launcher's ZT_* variables; every output line comes back prefixed "[rank R] "; and the same
   with three nodes of one CPU rank each; a ZT_* value and PROGRAM arguments full of shell
   characters reach the remote ranks unchanged and nothing of them runs;
b) --enable_each_rank_log DIR: one DIR/<timestamp>_rank<R>.log per rank holding that rank's
   output, written on the rank's own node, and nothing of the ranks on the terminal;
c) `zt train` (gpt2-tiny, ZeRO-1, SGD) on the 4 ranks over Gloo: the loss at every step equals
   the single-process run's within 1e-5 relative (oracle: the single-process run, as in
   tests/dist/zero_equivalence.py), the launcher exits 0 and no process is left on any node;
d) --launcher_args "-F CONFIG" with the same run works when the config is not in ~;
e) --no_ssh --node_rank=I on each node (as a scheduler starts it), the same training: equal loss;
f) --launcher pdsh (Debian's pdsh with its ssh module): the probe's placement and variables, and
   the training's loss, as through ssh.

Usage: ssh_train_test.py ZT_BINARY SOURCE_DIR
"""
import os
import re
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nslab  # noqa: E402
from nslab import check, log  # noqa: E402

ZT = os.path.abspath(sys.argv[1])
STEPS = 8
signal.alarm(280)  # under the ctest TIMEOUT, so the lab still cleans up if something hangs

lab = nslab.Lab(3, "ssh_train").start()
work = nslab.make_workdir(lab)
hf = nslab.hostfile(lab, slots=2, hosts=lab.host[:2])
env = nslab.base_env(lab, ZT_NETNS_MARK="mark")

# --- a) where and as what each rank runs ---
probe = nslab.write_probe(lab)
port = nslab.free_port()
job = lab.spawn("probe", lab.master_cmd([ZT, "launch", "-H", hf, "--num_procs", "2",
                                         "--master_port", port, probe, "x y"], cwd=work), env)
rc = job.wait(90)
out, err = job.out(), job.err()
check("probe: exit 0", rc == 0, f"rc {rc}\n{err[-3000:]}")
ranks = nslab.probe_lines(out)
check("probe: 4 ranks reported", sorted(ranks) == ["0", "1", "2", "3"], out[-3000:] + err[-2000:])
for r, f in sorted(ranks.items()):
    node = int(r) // 2
    want = {"prefix": f"[rank {r}] ", "local": str(int(r) % 2), "world": "4",
            "cross": f"{node}/2", "host": f"node{node}", "master": f"{lab.addr[0]}:{port}",
            "cwd": work, "envs": "cwd-env/home-env/mark", "args": f"--local_rank={int(r) % 2}"}
    bad = {k: (f.get(k), v) for k, v in want.items() if f.get(k) != v}
    check(f"probe: rank {r} on node{node} with DeepSpeed's variables", not bad,
          f"(got, want): {bad}")
check("probe: one job token on every node", len({f.get("token") for f in ranks.values()}) == 1
      and re.fullmatch(r"[0-9a-f]{32}", next(iter(ranks.values()), {}).get("token", "")),
      str({r: f.get("token") for r, f in ranks.items()}))
stderr_lines = [l for l in err.splitlines() if "probe-stderr" in l]
check("probe: stderr lines prefixed too",
      sorted(stderr_lines) == [f"[rank {r}] probe-stderr rank={r}" for r in range(4)],
      "\n".join(stderr_lines) or err[-2000:])
unprefixed = [l for l in out.splitlines() if l and not l.startswith("[rank ")]
check("probe: every stdout line is rank-prefixed", not unprefixed, "\n".join(unprefixed[:10]))
left = lab.leftovers_after(10)
check("probe: nothing left on any node", not left, str(left))

# --- a'') values and arguments with shell characters arrive as they were, never run ---
nasty = "a b;touch PWNED $(touch PWNED) `touch PWNED` 'q' \"dq\" \\ * ~ &|<>"
quoting = os.path.join(lab.tmp, "quoting.sh")
with open(quoting, "w") as f:
    f.write('#!/bin/sh\nprintf "env<%s>\\n" "$ZT_NETNS_NASTY"\n'
            'for a in "$@"; do printf "arg<%s>\\n" "$a"; done\n')
os.chmod(quoting, 0o755)
job = lab.spawn("quoting", lab.master_cmd([ZT, "launch", "-H", hf, "--num_procs", "1",
                                           "--no_local_rank", "--master_port", nslab.free_port(),
                                           quoting, nasty, ""], cwd=work),
                dict(env, ZT_NETNS_NASTY=nasty))
rc = job.wait(90)
want = sorted([f"[rank {r}] env<{nasty}>" for r in range(2)] +
              [f"[rank {r}] arg<{nasty}>" for r in range(2)] +
              [f"[rank {r}] arg<>" for r in range(2)])
check("quoting: a ZT_* value and PROGRAM's arguments with shell characters arrive unchanged",
      rc == 0 and sorted(job.out().splitlines()) == want,
      f"rc {rc}\n{job.out()[-2000:]}\n{job.err()[-2000:]}")
check("quoting: nothing of them ran", not os.path.exists(os.path.join(work, "PWNED")),
      "a PWNED file appeared in the working directory")

# --- a') three nodes, one CPU rank each: rank i on node i, CROSS_SIZE 3 ---
hf3 = nslab.hostfile(lab, slots=1, name="hostfile3")
job = lab.spawn("probe3", lab.master_cmd([ZT, "launch", "-H", hf3, "--num_procs", "1",
                                          "--master_port", nslab.free_port(), probe], cwd=work),
                env)
rc = job.wait(90)
ranks = nslab.probe_lines(job.out())
check("3 nodes: exit 0, rank i on node i with CROSS_RANK i of 3",
      rc == 0 and sorted(ranks) == ["0", "1", "2"] and
      all(f.get("host") == f"node{r}" and f.get("cross") == f"{r}/3" and f.get("world") == "3"
          and f.get("local") == "0" for r, f in ranks.items()),
      f"rc {rc}: {ranks}\n{job.err()[-2000:]}")

# --- b) per-rank logs ---
logs = os.path.join(lab.tmp, "logs")
job = lab.spawn("logs", lab.master_cmd([ZT, "launch", "-H", hf, "--num_procs", "2",
                                        "--master_port", nslab.free_port(),
                                        "--enable_each_rank_log", logs, probe], cwd=work), env)
rc = job.wait(90)
check("logs: exit 0", rc == 0, f"rc {rc}\n{job.err()[-3000:]}")
check("logs: nothing of the ranks on the terminal", "probe" not in job.out() + job.err(),
      job.out()[-2000:])
for r in range(4):
    files = [f for f in os.listdir(logs)] if os.path.isdir(logs) else []
    mine = [f for f in files if re.fullmatch(rf"\d{{14}}_rank{r}\.log", f)]
    text = open(os.path.join(logs, mine[0])).read() if mine else ""
    check(f"logs: rank {r}'s log holds its output, from node{r // 2}",
          len(mine) == 1 and f"probe rank={r} " in text and f"host=node{r // 2}" in text
          and f"probe-stderr rank={r}" in text, f"files {files}: {text[:500]}")

# --- c) training equals the single process ---
ref = nslab.single_process_losses(lab, ZT, work, STEPS)
metrics = os.path.join(lab.tmp, "ssh.jsonl")
t0 = time.monotonic()
job = lab.spawn("train", lab.master_cmd(
    [ZT, "launch", "-H", hf, "--num_procs", "2", "--master_port", nslab.free_port()]
    + nslab.train_args(ZT, work, metrics, STEPS), cwd=work), env)
rc = job.wait(180)
log(f"2 nodes x 2 ranks, {STEPS} steps through ssh: {time.monotonic() - t0:.1f} s")
check("train: exit 0", rc == 0, f"rc {rc}\n{job.err()[-3000:]}\n{job.out()[-2000:]}")
nslab.check_training("train", metrics, ref, 4)
check("train: rank 0's progress lines come back prefixed",
      re.search(r"^\[rank 0\] .*step \d+/\d+ \| loss", job.out() + job.err(), re.M),
      job.out()[-2000:])
left = lab.leftovers_after(10)
check("train: nothing left on any node", not left, str(left))

# --- d) the ssh config given with --launcher_args instead of ~ ---
other = os.path.join(lab.tmp, "elsewhere.conf")
with open(lab.ssh_config) as f, open(other, "w") as g:
    g.write(f.read())
os.chmod(other, 0o600)
empty_home = os.path.join(lab.tmp, "empty_home")
os.makedirs(empty_home)
saved_home, lab.home = lab.home, empty_home  # the master now sees an ~ without .ssh
metrics = os.path.join(lab.tmp, "ssh_f.jsonl")
job = lab.spawn("train_F", lab.master_cmd(
    [ZT, "launch", "-H", hf, "--num_procs", "2", "--master_port", nslab.free_port(),
     "--launcher_args", f"-F {other}"] + nslab.train_args(ZT, work, metrics, STEPS), cwd=work),
    env)
rc = job.wait(180)
lab.home = saved_home
check("--launcher_args '-F CONFIG': exit 0", rc == 0, f"rc {rc}\n{job.err()[-3000:]}")
nslab.check_training("--launcher_args '-F CONFIG'", metrics, ref, 4)

# --- e) --no_ssh --node_rank: a scheduler starts `zt launch` on every node itself ---
metrics = os.path.join(lab.tmp, "no_ssh.jsonl")
port = nslab.free_port()
nodes = []
for i in range(2):
    cmd = [ZT, "launch", "--no_ssh", f"--node_rank={i}", "-H", hf, "--num_procs", "2",
           "--master_addr", lab.addr[0], "--master_port", port] + \
        nslab.train_args(ZT, work, metrics, STEPS)
    nodes.append(lab.spawn(f"no_ssh{i}", lab.on_node(i, ["unshare", "-u", "sh", "-c",
                                                          f'hostname node{i} && exec "$@"',
                                                          "sh"] + cmd), env, work))
rcs = [n.wait(180) for n in nodes]
check("--no_ssh --node_rank: both nodes exit 0", rcs == [0, 0],
      f"rcs {rcs}\n{nodes[0].err()[-2000:]}\n{nodes[1].err()[-2000:]}")
nslab.check_training("--no_ssh --node_rank", metrics, ref, 4)

# --- f) --launcher pdsh (Debian's pdsh, through its ssh module, as DeepSpeed runs it) ---
if shutil.which("pdsh"):
    clear = [f for f in os.listdir(lab.tmp) if f.startswith("started.")]
    for f in clear:
        os.remove(os.path.join(lab.tmp, f))
    job = lab.spawn("pdsh_probe", lab.master_cmd(
        [ZT, "launch", "--launcher", "pdsh", "-H", hf, "--num_procs", "2", "--master_port",
         nslab.free_port(), probe], cwd=work), env)
    rc = job.wait(90)
    ranks = nslab.probe_lines(job.out())
    check("pdsh probe: exit 0, ranks 0..3 on their nodes with their variables",
          rc == 0 and sorted(ranks) == ["0", "1", "2", "3"] and
          all(f.get("host") == f"node{int(r) // 2}" and f.get("local") == str(int(r) % 2)
              and f.get("cross") == f"{int(r) // 2}/2" and f.get("cwd") == work
              for r, f in ranks.items()),
          f"rc {rc}: {ranks}\n{job.err()[-2000:]}")
    metrics = os.path.join(lab.tmp, "pdsh.jsonl")
    job = lab.spawn("pdsh_train", lab.master_cmd(
        [ZT, "launch", "--launcher", "pdsh", "-H", hf, "--num_procs", "2", "--master_port",
         nslab.free_port()] + nslab.train_args(ZT, work, metrics, STEPS), cwd=work), env)
    rc = job.wait(180)
    check("pdsh train: exit 0", rc == 0, f"rc {rc}\n{job.err()[-3000:]}")
    nslab.check_training("pdsh train", metrics, ref, 4)
    left = lab.leftovers_after(10)
    check("pdsh: nothing left on any node", not left, str(left))
else:
    log("pdsh: not run (pdsh is not installed; scripts/install_deps.sh installs it)")

lab.close()
nslab.finish("ssh_train_test")
