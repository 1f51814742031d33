#!/usr/bin/env python3
"""The rendezvous store of a job across "machines" (nslab.py): while a 2 nodes x 2 ranks
`zt train` runs (--master_addr = node 0's address),

a) on node 0, the master port is listened on at that address only (`ss -ltnp` in node 0's
   namespace: one listener, LOCAL = ADDR:PORT, owned by rank 0's `zt`; not 0.0.0.0, [::] or
   127.0.0.1), and a connection to 127.0.0.1:PORT on node 0 is refused;
b) from node 1, a client speaking the store's protocol (src/zt/comm/store/store_wire.h: a frame is
   a u32 little-endian length and the payload; a request payload is u8 op, then the token as u32
   length + bytes; kHello = 1; the reply's first byte is 0 ok, 1 bad token) is refused with
   "bad token" for a wrong token and for no token at all, and the server then closes the
   connection; the job's own token (read from a rank's environment) gets kOk and the store's
   magic "zt-store-1", so the refusals are about the token and nothing else;
c) the job goes on training after the refused clients (the refusals hurt nobody), and SIGTERM
   then ends it with 143.

Usage: store_test.py ZT_BINARY SOURCE_DIR
"""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nslab  # noqa: E402
from nslab import check, log  # noqa: E402

ZT = os.path.abspath(sys.argv[1])
signal.alarm(200)

CLIENT = r"""
import socket, struct, sys
host, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
s = socket.create_connection((host, port), timeout=10)
payload = bytes([1]) + struct.pack('<I', len(token)) + token
s.sendall(struct.pack('<I', len(payload)) + payload)
def recv_exact(n):
    b = b''
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError
        b += c
    return b
try:
    n = struct.unpack('<I', recv_exact(4))[0]
    body = recv_exact(n)
    msg = body[5:].decode(errors='replace') if len(body) > 5 else ''
    print('code', body[0], msg)
except EOFError:
    print('closed before a reply')
try:
    s.settimeout(5)
    print('then closed' if s.recv(1) == b'' else 'then open')
except socket.timeout:
    print('then open')
except OSError:
    print('then closed')
"""

lab = nslab.Lab(2, "store").start()
work = nslab.make_workdir(lab)
hf = nslab.hostfile(lab, slots=2)
port = nslab.free_port()
metrics = os.path.join(lab.tmp, "store.jsonl")
job = lab.spawn("train", lab.master_cmd(
    [ZT, "launch", "-H", hf, "--num_procs", "2", "--master_port", port, "--master_addr",
     lab.addr[0]] + nslab.train_args(ZT, work, metrics, 1000000), cwd=work), nslab.base_env(lab))
ok = nslab.wait_for(lambda: len(nslab.steps_in(metrics)) >= 2 or not job.running(), 90)
if not check("training runs", ok and job.running(), job.err()[-3000:]):
    lab.close()
    nslab.finish("store_test")

# --- a) what listens on the master port on node 0 ---
ss = subprocess.run(lab.on_node(0, ["ss", "-Hltnp", f"sport = :{port}"]), capture_output=True,
                    text=True).stdout
listeners = [l.split() for l in ss.splitlines() if l.strip()]
log(f"listeners on :{port} in node 0: {ss.strip()}")
rank0 = lab.rank_pids(0).get(0)
check("one listener on the master port, at the master address only",
      len(listeners) == 1 and listeners[0][3] == f"{lab.addr[0]}:{port}", ss)
check("the listener is rank 0's process", rank0 is not None and f"pid={rank0}," in ss,
      f"rank 0 pid {rank0}: {ss}")
p = subprocess.run(lab.on_node(0, ["python3", "-c", CLIENT, "127.0.0.1", str(port), "x"]),
                   capture_output=True, text=True, timeout=30)
check("127.0.0.1:PORT on node 0 refuses connections", "ConnectionRefused" in p.stderr,
      p.stdout + p.stderr[-500:])

# --- b) clients from node 1 ---
token = nslab.proc_environ(lab.rank_pids(1).get(2, 0)).get("ZT_JOB_TOKEN", "")
check("rank 2 on node 1 has the job token", len(token) == 32, repr(token))


def client(tok):
    p = subprocess.run(lab.on_node(1, ["python3", "-c", CLIENT, lab.addr[0], str(port), tok]),
                       capture_output=True, text=True, timeout=30)
    return p.stdout.strip() + p.stderr.strip()[-300:]


wrong = "0" * 32 if token != "0" * 32 else "1" * 32
r = client(wrong)
check("a wrong token is refused (bad token) and the connection closed",
      r.startswith("code 1") and r.endswith("then closed"), r)
r = client("")
check("no token is refused (bad token)", r.startswith("code 1") and r.endswith("then closed"), r)
r = client(token)
check("the job's token is answered with the store's magic",
      r.startswith("code 0") and "zt-store-1" in r, r)

# --- c) the job goes on ---
n = len(nslab.steps_in(metrics))
ok = nslab.wait_for(lambda: len(nslab.steps_in(metrics)) >= n + 3 or not job.running(), 30)
check("training goes on after the refused clients", ok and job.running(), job.err()[-2000:])
check("rank 0 logged the refusal", "another job's token" in job.out() + job.err(),
      job.err()[-2000:])
os.kill(job.proc.pid, signal.SIGTERM)
rc = job.wait(20)
check("SIGTERM ends the job with 143", rc == 143, f"rc {rc}\n{job.err()[-2000:]}")
left = lab.leftovers_after(12)
check("nothing left on any node", not left, str(left))

lab.close()
nslab.finish("store_test")
