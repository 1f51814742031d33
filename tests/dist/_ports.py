"""`zt launch --master_port` for the multi-process tests (not a test: no main).

Ports come from below Linux's ephemeral range (32768 and up), where the ranks' own Gloo and NCCL
sockets, and any connection's local port, are drawn from, so a rank of an earlier run that is
still exiting cannot hold the port a later run asks for. Each call moves on from the last port
handed out and skips any that cannot be bound right now."""
import os
import socket

_LOW, _HIGH = 20000, 32000
_next = [_LOW + (os.getpid() * 37) % (_HIGH - _LOW)]


def _free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def next_port():
    """The next port of this process's sequence that is free now."""
    for _ in range(_HIGH - _LOW):
        p = _next[0]
        _next[0] = _LOW + (p + 1 - _LOW) % (_HIGH - _LOW)
        if _free(p):
            return p
    raise RuntimeError(f"no free port in [{_LOW}, {_HIGH})")
