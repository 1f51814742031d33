#!/usr/bin/env python3
"""`zt launch --launcher openmpi` across two "machines" (nslab.py): Debian's Open MPI `mpirun`
reaches node 1 through the lab's sshd (its plain `ssh` reads the user's ~/.ssh/config), starts
the ranks there, and the ranks find their place from mpirun's OMPI_COMM_WORLD_* variables:

a) a probe PROGRAM on 2 nodes x 2 slots: ranks 0,1 on node0 and 2,3 on node1 (mpirun's
   by-slot placement from the hostfile, which is DeepSpeed's order), MASTER_ADDR/MASTER_PORT
   exported to every rank, the working directory's .deepspeed_env exported (as DeepSpeed's
   OpenMPIRunner passes each exported variable with -x);
b) `zt train` (gpt2-tiny, ZeRO-1, SGD) on the 4 ranks over Gloo equals the single-process run
   within 1e-5 relative at every step (oracle: the single-process run);
c) kill -9 of a rank on node 1 mid-training: mpirun ends the job, the launcher exits non-zero,
   and no process (rank or orted) is left on any node within 10 s + the grace.

As root, mpirun refuses to run unless OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set (Open MPI's own rule); the test sets them.

Usage: mpi_train_test.py ZT_BINARY SOURCE_DIR
"""
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nslab  # noqa: E402
from nslab import check, log  # noqa: E402

ZT = os.path.abspath(sys.argv[1])
STEPS = 8
GRACE_S = 1
signal.alarm(280)
if shutil.which("mpirun") is None or shutil.which("orted") is None:
    nslab.skip("Open MPI's mpirun/orted are not installed (apt-get install openmpi-bin; "
               "scripts/install_deps.sh does)")

lab = nslab.Lab(2, "mpi").start()
work = nslab.make_workdir(lab)
hf = nslab.hostfile(lab, slots=2)
# Open MPI's session directories (/tmp/ompi.HOST.UID) go into the lab, which is removed.
env = nslab.base_env(lab, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                     OMPI_MCA_orte_tmpdir_base=lab.tmp,
                     ZT_LAUNCH_GRACE_S=GRACE_S, ZT_NETNS_MARK="mark")


def launch(name, program_args, extra=()):
    return lab.spawn(name, lab.master_cmd([ZT, "launch", "--launcher", "openmpi", "-H", hf,
                                           "--master_port", nslab.free_port(), *extra]
                                          + program_args, cwd=work), env)


# --- a) placement and environment ---
probe = nslab.write_probe(lab)
job = launch("probe", [probe])
rc = job.wait(120)
out, err = job.out(), job.err()
check("probe: exit 0", rc == 0, f"rc {rc}\n{err[-3000:]}\n{out[-2000:]}")
ranks = nslab.probe_lines(out)
check("probe: 4 ranks reported", sorted(ranks) == ["0", "1", "2", "3"], out[-3000:])
for r, f in sorted(ranks.items()):
    node = int(r) // 2
    bad = {k: (f.get(k), v) for k, v in {"host": f"node{node}", "cwd": work,
                                           "master": f"{lab.addr[0]}:"}.items()
           if not (f.get(k) or "").startswith(v)}
    if "cwd-env" not in f.get("envs", ""):
        bad["envs"] = (f.get("envs"), "cwd-env/...")
    check(f"probe: rank {r} on node{node}, MASTER_ADDR, cwd and .deepspeed_env", not bad, str(bad))
left = lab.leftovers_after(10)
check("probe: nothing left on any node (orted included)", not left, str(left))

# --- b) training equals the single process ---
ref = nslab.single_process_losses(lab, ZT, work, STEPS)
metrics = os.path.join(lab.tmp, "mpi.jsonl")
t0 = time.monotonic()
job = launch("train", nslab.train_args(ZT, work, metrics, STEPS))
rc = job.wait(180)
log(f"2 nodes x 2 ranks, {STEPS} steps through mpirun: {time.monotonic() - t0:.1f} s")
check("train: exit 0", rc == 0, f"rc {rc}\n{job.err()[-3000:]}\n{job.out()[-2000:]}")
nslab.check_training("train", metrics, ref, 4)
left = lab.leftovers_after(10)
check("train: nothing left on any node", not left, str(left))

# --- c) a remote rank killed ---
metrics = os.path.join(lab.tmp, "mpi_kill.jsonl")
job = launch("kill", nslab.train_args(ZT, work, metrics, 1000000))
ok = nslab.wait_for(lambda: len(nslab.steps_in(metrics)) >= 2 or not job.running(), 90)
victim = lab.rank_pids(1).get(2)
if check("kill: training runs with rank 2 on node1", ok and job.running() and victim,
         f"running {job.running()}, ranks on node1 {lab.rank_pids(1)}\n{job.err()[-2000:]}"):
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()
    rc = job.wait(10 + GRACE_S + 20)
    left = lab.leftovers_after(max(0.0, 10 + GRACE_S - (time.monotonic() - t0)))
    log(f"kill: launcher exit {rc} after {time.monotonic() - t0:.1f} s")
    check("kill: the launcher exits non-zero", rc not in (None, 0), f"rc {rc}")
    check(f"kill: every process on every node gone within {10 + GRACE_S} s", not left, str(left))

lab.close()
nslab.finish("mpi_train_test")
