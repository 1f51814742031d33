"""Peer of zt_bench_pinned_alloc: --gib of page-locked host memory in buffers of --piece-mib,
each zeroed, as PyTorch allocates it (torch.empty(pin_memory=True), then zero_()). Prints one
JSON line: seconds and GiB/s."""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=16)
    ap.add_argument("--piece-mib", type=float, default=768)
    a = ap.parse_args()
    torch.cuda.set_device(0)
    torch.cuda.synchronize()
    piece = int(a.piece_mib * 2**20)
    count = int(a.gib * 2**30 / piece)
    t0 = time.perf_counter()
    bufs = []
    for _ in range(count):
        bufs.append(torch.empty(piece, dtype=torch.uint8, pin_memory=True).zero_())
    secs = time.perf_counter() - t0
    total = piece * count / 2**30
    print(json.dumps({"impl": "torch", "way": "pin_memory", "gib": round(total, 3),
                      "piece_mib": a.piece_mib, "threads": torch.get_num_threads(),
                      "seconds": round(secs, 3), "gib_per_s": round(total / secs, 3)}),
          flush=True)


if __name__ == "__main__":
    main()
