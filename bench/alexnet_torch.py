"""PyTorch peer for `zt train --model alexnet` (scripts/gpu_check.sh section vision): the CIFAR
AlexNet of DeepSpeed's pipeline tutorial (the same layers as nn/models/alexnet.h), trained on
CIFAR-10 binary files with the same batch, precision (bf16 autocast, fp32 weights) and optimizer
(AdamW), each step's batch taken from the host as zt takes it (indexed, normalised with
ImageNet's statistics, copied to the GPU). Prints one JSON line: images/s over the median step
after warm-up.

--make-data DIR --images N writes DIR/data_batch_1.bin (N records: a label byte and 3072 pixel
bytes, learnable: each class a bright square at its own place over noise) and
DIR/test_batch.bin, the files both trainers read, and exits."""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn as nn


class AlexNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=5), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2))
        self.classifier = nn.Linear(256, num_classes)

    def forward(self, x):
        x = self.features(x)
        return self.classifier(x.view(x.size(0), -1))


def make_data(out, n):
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    for name, count in (("data_batch_1.bin", n), ("test_batch.bin", max(n // 10, 100))):
        labels = torch.randint(0, 10, (count,), generator=g)
        img = torch.randint(0, 96, (count, 3, 32, 32), generator=g, dtype=torch.uint8)
        for k in range(10):
            r0, c0 = 8 * (k % 3), min(3 * k, 24)
            sel = labels == k
            for ch in range(3):
                img[sel, ch, r0:r0 + 8, c0:c0 + 8] = 200 + 20 * ch
        rec = torch.cat([labels.to(torch.uint8).view(-1, 1), img.view(count, -1)], dim=1)
        with open(os.path.join(out, name), "wb") as f:
            f.write(rec.numpy().tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-data")
    ap.add_argument("--images", type=int, default=10000)
    ap.add_argument("--data")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    args = ap.parse_args()
    if args.make_data:
        make_data(args.make_data, args.images)
        return
    raw = open(os.path.join(args.data, "data_batch_1.bin"), "rb").read()
    rec = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(-1, 3073)
    labels, pixels = rec[:, 0].long(), rec[:, 1:].reshape(-1, 3, 32, 32)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    model = AlexNet().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, fused=True)
    n = rec.shape[0]
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        idx = torch.arange(step * args.batch, (step + 1) * args.batch) % n
        x = ((pixels[idx].float() / 255 - mean) / std).to(dev, non_blocking=True)
        y = labels[idx].to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # (synchronises, as zt's loss readback does)
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"impl": "torch-eager", "model": "alexnet", "batch": args.batch,
                      "images_per_s": args.batch / med, "step_ms_median": med * 1e3,
                      "peak_mem_bytes": torch.cuda.max_memory_allocated(),
                      "first_loss": losses[0], "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
