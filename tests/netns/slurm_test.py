#!/usr/bin/env python3
"""`zt launch --launcher slurm` inside a (pretend) SLURM allocation of two lab nodes. A real
slurmctld + slurmd (with munge) does not fit CI's time, so `srun` is fake_srun.py: it starts the
tasks on the nodes (namespaces) with the environment srun gives each task, so this tests the
command line the launcher builds for srun and the ranks' reading of srun's environment:

a) srun's command line: `srun -n 4` (the world size), the hostfile's hosts as the node list,
   and the launcher's exported variables (MASTER_ADDR, MASTER_PORT, the working directory's
   .deepspeed_env, ZT_*) reaching every task through --export (DeepSpeed's SlurmRunner);
b) a probe PROGRAM: task i runs on the node srun's block distribution gives it (0,1 on node0,
   2,3 on node1) with MASTER_ADDR = node 0's address;
c) `zt train` on the 4 tasks, each finding RANK/WORLD_SIZE/LOCAL_RANK from SLURM_PROCID/
   SLURM_NTASKS/SLURM_LOCALID: the loss equals the single-process run's within 1e-5 relative.

Usage: slurm_test.py ZT_BINARY SOURCE_DIR
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nslab  # noqa: E402
from nslab import check, log  # noqa: E402

ZT = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 8
signal.alarm(200)

lab = nslab.Lab(2, "slurm").start()
work = nslab.make_workdir(lab)
hf = nslab.hostfile(lab, slots=2)
bindir = os.path.join(lab.tmp, "bin")
os.makedirs(bindir)
mapfile, record = os.path.join(lab.tmp, "srun_map.json"), os.path.join(lab.tmp, "srun_argv")
with open(mapfile, "w") as f:
    json.dump({"hosts": dict(zip(lab.host, lab.ns)), "nodelist": lab.host}, f)
with open(os.path.join(bindir, "srun"), "w") as f:
    f.write(f"#!/bin/sh\nexec python3 '{HERE}/fake_srun.py' --zt-map '{mapfile}' "
            f"--zt-record '{record}' \"$@\"\n")
os.chmod(os.path.join(bindir, "srun"), 0o755)
# Inside an allocation, as sbatch/salloc leave it (the launcher itself is not a task).
env = nslab.base_env(lab, PATH=bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                     SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="node[0-1]", SLURM_NNODES="2",
                     ZT_NETNS_MARK="mark")


def launch(name, program_args):
    return lab.spawn(name, lab.master_cmd([ZT, "launch", "--launcher", "slurm", "-H", hf,
                                           "--master_port", nslab.free_port()] + program_args,
                                          cwd=work), env)


# --- a) + b) the command line and where each task runs ---
probe = nslab.write_probe(lab)
job = launch("probe", [probe])
rc = job.wait(60)
out, err = job.out(), job.err()
check("probe: exit 0", rc == 0, f"rc {rc}\n{err[-3000:]}\n{out[-2000:]}")
argvs = [json.loads(l) for l in open(record)] if os.path.exists(record) else []
check("srun: run once", len(argvs) == 1, str(argvs))
argv = argvs[0] if argvs else []
words = " ".join(argv)
check("srun: -n 4", "-n 4" in words or "-n4" in words or "--ntasks=4" in words
      or "--ntasks 4" in words, words)
ranks = nslab.probe_lines(out)
check("probe: 4 tasks reported", sorted(ranks) == ["0", "1", "2", "3"], out[-3000:] + err[-2000:])
for r, f in sorted(ranks.items()):
    node = int(r) // 2
    bad = {k: (f.get(k), v) for k, v in {"host": f"node{node}", "cwd": work,
                                           "envs": "cwd-env/home-env/mark"}.items()
           if f.get(k) != v}
    if not f.get("master", "").startswith(f"{lab.addr[0]}:"):
        bad["master"] = (f.get("master"), f"{lab.addr[0]}:PORT")
    check(f"probe: task {r} on node{node}, MASTER_ADDR, cwd and exported variables", not bad,
          str(bad))

# --- c) training ---
ref = nslab.single_process_losses(lab, ZT, work, STEPS)
metrics = os.path.join(lab.tmp, "slurm.jsonl")
t0 = time.monotonic()
job = launch("train", nslab.train_args(ZT, work, metrics, STEPS))
rc = job.wait(120)
log(f"2 nodes x 2 tasks, {STEPS} steps through srun: {time.monotonic() - t0:.1f} s")
check("train: exit 0", rc == 0, f"rc {rc}\n{job.err()[-3000:]}\n{job.out()[-2000:]}")
nslab.check_training("train", metrics, ref, 4)
left = lab.leftovers_after(10)
check("train: nothing left on any node", not left, str(left))

lab.close()
nslab.finish("slurm_test")
