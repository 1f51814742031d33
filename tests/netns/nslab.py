"""A few "machines" on this one: network namespaces joined by a bridge, each with its own address,
hostname and a real sshd, for testing `zt launch` across nodes (tests/netns/*_test.py).

Layout of a lab of N nodes (names unique to this process, so parallel runs do not collide):
- namespace <tag>br holds a bridge br0; namespace <tag>n<i> (node i) holds eth0, one end of a veth
  pair whose other end (p<i>) is a port of br0, with address 10.77.<S>.<i+1>/24;
- /etc/netns/<tag>n<i>/hosts (which `ip netns exec` mounts over /etc/hosts) names every node
  node0..nodeN-1, so host names resolve on every node as they would on a cluster;
- node i's sshd (Debian's openssh-server) listens on its address only, key-only, with a host key
  and a client key made on the spot; it runs in its own UTS namespace whose hostname is node<i>;
- the client side: a home directory whose .ssh/config has the key, StrictHostKeyChecking no,
  UserKnownHostsFile /dev/null, BatchMode yes and an alias per node. The master launcher runs
  inside node 0's namespace in a private mount namespace where that home is mounted over the
  user's (ssh reads ~/.ssh/config from the passwd home, not $HOME), so the launcher's plain `ssh`
  honours it exactly as it would honour a user's own config.

Every namespace, process, bind mount and file a lab makes is removed when it closes (also on
SIGTERM/SIGINT/SIGALRM); labs left behind by a SIGKILLed run (their owner pid gone) are removed
by the next one. A test that cannot build a lab (not root, no `ip netns`, no sshd) exits with
SKIP (77, the tests' SKIP_RETURN_CODE) and says why.
"""
import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
PREFIX = "ztlab"
SSHD = "/usr/sbin/sshd"
failures, passed = [], 0


def log(msg):
    print(msg, flush=True)


def check(name, cond, detail=""):
    """One assertion: prints ok/FAIL, counts it, never raises."""
    global passed
    if cond:
        passed += 1
        log(f"ok: {name}")
    else:
        failures.append(name)
        log(f"FAIL: {name}: {detail}")
    return bool(cond)


def finish(name):
    log(f"{name}: {passed} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


def skip(why):
    log(f"SKIP: {why}")
    sys.exit(SKIP)


def sh(*cmd, check_rc=True, timeout=30, **kw):
    """Runs a short command; returns CompletedProcess (text). Raises on failure if check_rc."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, **kw)
    if check_rc and p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {p.returncode}: "
                           f"{p.stderr.strip() or p.stdout.strip()}")
    return p


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def proc_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(kv.decode(errors="replace").split("=", 1)
                        for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return {}


def proc_ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid):
    return proc_state(pid) not in (None, "Z")


def describe(pid):
    return f"{pid} ({' '.join(proc_cmdline(pid))[:160]})"


def ns_pids(ns):
    p = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def free_port():
    """A port number free on this machine; namespaces have their own ports, so any is free there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reap_stale_labs():
    """Removes the namespaces (and their processes) of labs whose owner is gone (a run killed by
    SIGKILL, e.g. a ctest timeout, cannot clean up after itself)."""
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        m = re.match(rf"^({PREFIX}(\d+)(?:n\d+|br|probe))\b", line)
        if not m or alive(int(m.group(2))):  # a zombie owner is gone too
            continue
        for pid in ns_pids(m.group(1)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", m.group(1)], capture_output=True)
        try:
            with open(f"/etc/netns/{m.group(1)}/zt-lab-tmp") as f:
                shutil.rmtree(f.read().strip(), ignore_errors=True)
        except OSError:
            pass
        shutil.rmtree(f"/etc/netns/{m.group(1)}", ignore_errors=True)


class Lab:
    def __init__(self, nodes=2, name="netns"):
        self.n = nodes
        self.tag = f"{PREFIX}{os.getpid()}"
        # A subnet per run: not needed for isolation (each lab is its own set of namespaces),
        # but it makes a leftover of one run impossible to confuse with another's in messages.
        self.subnet = f"10.77.{os.getpid() % 250}"
        self.br = f"{self.tag}br"
        self.ns = [f"{self.tag}n{i}" for i in range(nodes)]
        self.addr = [f"{self.subnet}.{i + 1}" for i in range(nodes)]
        self.host = [f"node{i}" for i in range(nodes)]
        self.name = name
        self.tmp = self.home = self.keys = None           # made by start(), once it can run
        self.sshd = [None] * nodes                      # Popen of each node's sshd
        self.sshd_mounts = [[] for _ in range(nodes)]   # (src, dst) bind mounts for its sshd
        self.jobs = []
        self.closed = False
        self.made_ns = []

    # --- building ---------------------------------------------------------------------------
    def preflight_or_skip(self):
        if os.geteuid() != 0:
            skip("needs root (network namespaces and sshd); CI runs the suite as root")
        for tool in ("ip", "ssh", "ssh-keygen", "unshare", "mount"):
            if shutil.which(tool) is None:
                skip(f"`{tool}` is not installed (scripts/install_deps.sh installs it)")
        if not os.access(SSHD, os.X_OK):
            skip(f"{SSHD} is missing: apt-get install openssh-server (scripts/install_deps.sh)")
        probe = f"{self.tag}probe"
        p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if p.returncode != 0:
            skip(f"cannot create a network namespace here: {p.stderr.strip()}")
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)

    def start(self):
        reap_stale_labs()
        self.preflight_or_skip()
        self.tmp = tempfile.mkdtemp(prefix=f"zt_{self.name}_")
        os.chmod(self.tmp, 0o755)
        self.home = os.path.join(self.tmp, "home")      # mounted over ~ for the master
        self.keys = os.path.join(self.tmp, "sshd")
        atexit.register(self.close)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        try:
            self._make_network()
            self._make_keys()
            for i in range(self.n):
                self.start_sshd(i)
            for i in range(self.n):
                self.wait_sshd(i)
        except Exception:
            self.close()
            raise
        return self

    def _on_signal(self, signum, _frame):
        log(f"FAIL: stopped by signal {signum}; cleaning up")
        self.close()
        os._exit(1)

    def _make_network(self):
        sh("ip", "netns", "add", self.br)
        self.made_ns.append(self.br)
        sh("ip", "-n", self.br, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.br, "link", "set", "br0", "up")
        # Where this lab's files are, for the reaper of a lab whose owner was SIGKILLed (nothing
        # runs `ip netns exec` in the bridge's namespace, so no file here is ever mounted).
        os.makedirs(f"/etc/netns/{self.br}", exist_ok=True)
        with open(f"/etc/netns/{self.br}/zt-lab-tmp", "w") as f:
            f.write(self.tmp)
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{a} {h}\n" for a, h in zip(self.addr, self.host))
        for i, ns in enumerate(self.ns):
            sh("ip", "netns", "add", ns)
            self.made_ns.append(ns)
            sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}",
               "netns", self.br)
            sh("ip", "-n", self.br, "link", "set", f"p{i}", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr[i]}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write(hosts)

    def _make_keys(self):
        os.makedirs(self.keys)
        os.makedirs(os.path.join(self.home, ".ssh"), mode=0o700)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{self.keys}/host_key")
        key = os.path.join(self.home, ".ssh", "id_ed25519")
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "zt-netns-test", "-f", key)
        shutil.copy(key + ".pub", f"{self.keys}/authorized_keys")
        os.chmod(f"{self.keys}/authorized_keys", 0o600)
        # The client config: written to the home mounted over ~ for the master launcher, and kept
        # as a file of its own for `ssh -F` / --launcher_args.
        cfg = "".join(f"Host {h}\n  HostName {a}\n" for h, a in zip(self.host, self.addr))
        cfg += (f"Host *\n  User root\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
                "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n"
                "  LogLevel ERROR\n  ConnectTimeout 5\n")
        self.ssh_config = os.path.join(self.home, ".ssh", "config")
        with open(self.ssh_config, "w") as f:
            f.write(cfg)
        os.chmod(self.ssh_config, 0o600)
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory

    def _write_sshd_conf(self, i, setenv):
        with open(f"{self.keys}/sshd{i}.conf", "w") as f:
            f.write(f"ListenAddress {self.addr[i]}\nPort 22\nHostKey {self.keys}/host_key\n"
                    f"PidFile none\nAuthorizedKeysFile {self.keys}/authorized_keys\n"
                    "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\n"
                    "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                    "UsePAM no\nStrictModes no\nMaxStartups 200\nMaxSessions 200\n"
                    "LogLevel ERROR\nPrintMotd no\n")
            if setenv:
                f.write("SetEnv " + " ".join(f"{k}={v}" for k, v in setenv.items()) + "\n")

    def start_sshd(self, i, mounts=None, setenv=None):
        """(Re)starts node i's sshd; `mounts` [(src, dst)] are bind-mounted in its own mount
        namespace, so every session it opens sees them (a different file on one node); `setenv`
        {K: V} is set in every session's environment (sshd's SetEnv)."""
        if mounts is not None:
            self.sshd_mounts[i] = list(mounts)
        self._write_sshd_conf(i, setenv)
        script = f"hostname {self.host[i]}"
        for src, dst in self.sshd_mounts[i]:
            script += f" && mount --bind '{src}' '{dst}'"
        script += f" && exec {SSHD} -D -e -f '{self.keys}/sshd{i}.conf'"
        out = open(os.path.join(self.tmp, f"sshd{i}.log"), "a")
        self.sshd[i] = subprocess.Popen(
            ["ip", "netns", "exec", self.ns[i], "unshare", "-u", "-m", "--propagation", "private",
             "sh", "-c", script], stdout=out, stderr=out, stdin=subprocess.DEVNULL,
            start_new_session=True)
        out.close()

    def wait_sshd(self, i, seconds=20):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.sshd[i].poll() is not None:
                raise RuntimeError(f"sshd of node {i} exited {self.sshd[i].returncode}: "
                                   f"{self.read(f'sshd{i}.log')}")
            p = subprocess.run(["ip", "netns", "exec", self.ns[i], "ss", "-Hltn",
                                f"src {self.addr[i]}:22"], capture_output=True, text=True)
            if "LISTEN" in p.stdout:
                return
            time.sleep(0.05)
        raise RuntimeError(f"sshd of node {i} did not listen on {self.addr[i]}:22 in {seconds} s")

    def stop_sshd(self, i):
        p = self.sshd[i]
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.sshd[i] = None

    def sshd_pids(self):
        return {p.pid for p in self.sshd if p is not None and p.poll() is None}

    # --- running ---------------------------------------------------------------------------
    def master_cmd(self, args, cwd=None):
        """argv that runs `args` as the master launcher would be run on node 0: inside node 0's
        namespace, hostname node0, with the lab's home mounted over the user's ~."""
        pw_home = os.path.expanduser("~root") if os.geteuid() == 0 else os.path.expanduser("~")
        script = (f"hostname {self.host[0]} && mount --bind '{self.home}' '{pw_home}' && "
                  + (f"cd '{cwd}' && " if cwd else "") + 'exec "$@"')
        return ["ip", "netns", "exec", self.ns[0], "unshare", "-u", "-m", "--propagation",
                "private", "sh", "-c", script, "sh"] + [str(a) for a in args]

    def on_node(self, i, args):
        """argv that runs `args` in node i's namespace (as a process on that machine would)."""
        return ["ip", "netns", "exec", self.ns[i]] + [str(a) for a in args]

    def ssh(self, i, remote, source=0, timeout=20):
        """ssh from node `source` to node i (through the lab's client config) runs `remote`."""
        return sh(*self.on_node(source, ["ssh", "-F", self.ssh_config, self.host[i], remote]),
                  check_rc=False, timeout=timeout)

    def spawn(self, name, cmd, env=None, cwd=None):
        job = Job(self, name, cmd, env, cwd)
        self.jobs.append(job)
        return job

    def node_pids(self, i):
        """Live processes in node i's namespace other than its sshd listener."""
        keep = self.sshd_pids()
        return [p for p in ns_pids(self.ns[i]) if p not in keep and alive(p)]

    def all_node_pids(self):
        return {i: self.node_pids(i) for i in range(self.n)}

    def leftovers_after(self, seconds):
        """Waits up to `seconds` for every node to have no process but its sshd listener; returns
        {node: [description]} of what is still alive then (empty when all is gone)."""
        deadline = time.monotonic() + seconds
        while True:
            left = {i: p for i, p in self.all_node_pids().items() if p}
            if not left or time.monotonic() > deadline:
                return {i: [describe(x) for x in p] for i, p in left.items()}
            time.sleep(0.1)

    def rank_pids(self, i):
        """{rank: pid} of the ranks in node i's namespace: processes with the rank in their
        environment (RANK from zt launch, or mpirun's / srun's own variable), not launchers."""
        out = {}
        for pid in self.node_pids(i):
            env = proc_environ(pid)
            cmd = proc_cmdline(pid)
            if not cmd or "launch" in cmd[1:2]:
                continue
            for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
                if var in env:
                    out[int(env[var])] = pid
                    break
        return out

    def read(self, rel):
        try:
            with open(os.path.join(self.tmp, rel), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def set_link(self, i, up):
        """Cuts (or restores) node i's cable: its bridge port goes down, so its packets vanish
        with no reset, as when a switch port or a machine dies."""
        sh("ip", "-n", self.br, "link", "set", f"p{i}", "up" if up else "down")

    # --- teardown --------------------------------------------------------------------------
    def close(self):
        if self.closed:
            return
        self.closed = True
        for job in self.jobs:
            job.kill()
        for i in range(self.n):
            try:
                self.stop_sshd(i)
            except Exception:
                pass
        for ns in reversed(self.made_ns):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                for pid in ns_pids(ns):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
        deadline = time.monotonic() + 5
        while any(ns_pids(ns) for ns in self.made_ns) and time.monotonic() < deadline:
            time.sleep(0.05)
        for ns in reversed(self.made_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        try:
            os.rmdir("/etc/netns")  # only when empty: another lab's or the admin's stays
        except OSError:
            pass
        left = [l for l in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                          text=True).stdout.splitlines()
                if l.split(" ")[0] in self.made_ns]
        if left:
            log(f"FAIL: namespaces left behind: {left}")
            failures.append("teardown")
        if os.environ.get("ZT_NETNS_KEEP") != "1":
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            log(f"kept {self.tmp}")


class Job:
    """One started command (its stdout and stderr each in a file: an undrained pipe would stall
    the ranks), in its own session so it can be killed whole if a test fails."""

    def __init__(self, lab, name, cmd, env=None, cwd=None):
        self.lab, self.name = lab, name
        self.out_path = os.path.join(lab.tmp, name + ".out")
        self.err_path = os.path.join(lab.tmp, name + ".err")
        self.t0 = time.monotonic()
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen([str(c) for c in cmd], env=env, cwd=cwd, stdout=out,
                                         stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self.elapsed = None

    def out(self):
        return self.lab.read(self.name + ".out")

    def err(self):
        return self.lab.read(self.name + ".err")

    def wait(self, seconds):
        """Exit code, or None when still running after `seconds`."""
        try:
            rc = self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None
        if self.elapsed is None:
            self.elapsed = time.monotonic() - self.t0
        return rc

    def running(self):
        return self.proc.poll() is None

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def steps_in(metrics):
    """The step records of a `zt train --metrics-out` file (its first line is the run record)."""
    try:
        with open(metrics) as f:
            recs = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        return []
    return [r for r in recs if "step" in r and "loss" in r]


def wait_for(cond, seconds, poll=0.1):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(poll)
    return cond()


# --- what the tests run ------------------------------------------------------------------------
# Training: SGD with momentum (linear in the gradients, so N ranks reproduce the single process
# up to the order of floating-point sums: 1e-5 relative, as tests/dist/zero_equivalence.py).
LOSS_TOL = 1e-5
TRAIN_CONFIG = {"train_batch_size": 16, "gradient_accumulation_steps": 1,
                "gradient_clipping": 0.5, "zero_allow_untested_optimizer": True,
                "optimizer": {"type": "SGD",
                              "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}},
                "zero_optimization": {"stage": 1}}
# The environment every test process starts from: this script's, less anything that would make a
# rank of the launcher, plus threads pinned to one per rank (2-core CI machines).
DROP = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "ZT_JOB_TOKEN", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID",
        "SLURM_NTASKS", "PMI_RANK", "PMI_SIZE", "CROSS_RANK", "CROSS_SIZE")


def base_env(lab, **extra):
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    env.update(XDG_CACHE_HOME=os.path.join(lab.tmp, "cache"), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", ZT_LAUNCH_GRACE_S="1", ZT_COMM_TIMEOUT_S="30")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def make_workdir(lab):
    """The job's working directory (the same path on every node: they share this filesystem as a
    cluster shares NFS). Its .deepspeed_env carries what the ranks need that the launcher does not
    export by itself (a remote rank's environment is sshd's, not the launcher's)."""
    work = os.path.join(lab.tmp, "work")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, ".deepspeed_env"), "w") as f:
        f.write(f"XDG_CACHE_HOME={lab.tmp}/cache\nOMP_NUM_THREADS=1\nOPENBLAS_NUM_THREADS=1\n"
                "FROM_CWD_ENV=cwd-env\n")
    with open(os.path.join(lab.home, ".deepspeed_env"), "w") as f:
        f.write("FROM_HOME_ENV=home-env\n")
    with open(os.path.join(work, "ds_config.json"), "w") as f:
        json.dump(TRAIN_CONFIG, f)
    return work


def hostfile(lab, slots=2, hosts=None, name="hostfile"):
    path = os.path.join(lab.tmp, name)
    with open(path, "w") as f:
        for h in hosts or lab.host:
            f.write(f"{h} slots={slots}\n")
    return path


def train_args(zt, work, metrics, steps):
    return [zt, "train", "--config", os.path.join(work, "ds_config.json"), "--device", "cpu",
            "--model", "gpt2-tiny", "--steps", str(steps), "--seq-len", "32", "--sample-tokens",
            "0", "--order", "sequential", "--metrics-out", metrics]


def single_process_losses(lab, zt, work, steps):
    """The oracle: the same training as one process, outside every namespace."""
    metrics = os.path.join(lab.tmp, "single.jsonl")
    p = subprocess.run(train_args(zt, work, metrics, steps), env=base_env(lab), cwd=work,
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"the single-process run failed ({p.returncode}): {p.stderr[-2000:]}")
    return [r["loss"] for r in steps_in(metrics)]


def run_record(metrics):
    try:
        with open(metrics) as f:
            first = json.loads(f.readline())
        return first if first.get("type") == "run" else {}
    except (OSError, ValueError):
        return {}


def check_training(name, metrics, ref, world):
    """The run was one job of `world` ranks (not `world` single processes, which would also
    reproduce the single-process loss) and its loss equals the single process's at every step."""
    rec = run_record(metrics)
    check(f"{name}: one job of {world} ranks (rank 0's run record)",
          rec.get("world_size") == world, str(rec)[:300])
    return compare_losses(f"{name}: loss every step equals the single process",
                          [r["loss"] for r in steps_in(metrics)], ref)


def compare_losses(name, got, ref):
    if len(got) != len(ref) or not ref:
        return check(name, False, f"{len(got)} steps recorded, expected {len(ref)}")
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    return check(name, worst <= LOSS_TOL,
                 f"worst relative loss difference {worst:.3g} > {LOSS_TOL}: {got} vs {ref}")


def write_probe(lab, name="probe.sh", body=""):
    """A PROGRAM that reports where and as what it runs (one line per rank), marks that it started
    (started.<rank> in the lab dir) and then runs `body`."""
    path = os.path.join(lab.tmp, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                'R=${RANK:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-none}}}}\n'
                f'touch "{lab.tmp}/started.$R"\n'
                'echo "probe rank=$R local=${LOCAL_RANK:-} world=${WORLD_SIZE:-} '
                'cross=${CROSS_RANK:-}/${CROSS_SIZE:-} host=$(hostname) '
                'master=${MASTER_ADDR:-}:${MASTER_PORT:-} cwd=$(pwd) '
                'envs=${FROM_CWD_ENV:-}/${FROM_HOME_ENV:-}/${ZT_NETNS_MARK:-} '
                'token=${ZT_JOB_TOKEN:-} args=$*"\n'
                'echo "probe-stderr rank=$R" >&2\n' + body)
    os.chmod(path, 0o755)
    return path


def probe_lines(text):
    """{rank: {field: value}} from the probe's lines (prefix before 'probe' kept as 'prefix')."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(.*?)probe rank=(\S+) (.*)$", line)
        if not m:
            continue
        fields = dict(re.findall(r"(\w+)=(\S*)", m.group(3)))
        fields["prefix"] = m.group(1)
        out[m.group(2)] = fields
    return out


def started_ranks(lab):
    return sorted(f[len("started."):] for f in os.listdir(lab.tmp) if f.startswith("started."))
