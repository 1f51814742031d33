"""Timing of the PyTorch peers' training steps, shared by bench/gpt2_torch.py and
bench/llama_torch.py: each step between CUDA events after warm-up (time_steps), and the
kernel-by-kernel GPU time of more steps through torch.profiler (kernel_trace), the peers'
counterpart of zt_bench_gpt2 --kernel-trace (bench/kernel_trace.h)."""
import sys

import torch


def time_steps(step, warmup, steps):
    """Runs `step` (returning the loss) warmup + steps times, each between CUDA events; the peak
    memory counts from the first timed step. Returns (milliseconds of the timed steps, losses)."""
    times, losses = [], []
    for s in range(warmup + steps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if s == warmup:
            torch.cuda.reset_peak_memory_stats()
        start.record()
        loss = step()
        stop.record()
        stop.synchronize()
        losses.append(loss.item())
        if s >= warmup:
            times.append(start.elapsed_time(stop))
    return times, losses


def kernel_trace(step, n, step_ms, top=40):
    """Runs `step` n more times under the profiler; per-step milliseconds by kernel name, printed
    on stderr; returns the `top` largest rows for the JSON line."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    totals = {}
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = ev.name if len(ev.name) <= 96 else ev.name[:93] + "..."
        t = totals.setdefault(name, [0.0, 0])
        t[0] += ev.device_time / 1000.0  # us -> ms
        t[1] += 1
    rows = sorted(totals.items(), key=lambda kv: -kv[1][0])
    total = sum(v[0] for _, v in rows)
    print(f"kernel trace: {total / n:.2f} ms of GPU work per step in "
          f"{sum(v[1] for _, v in rows) / n:.0f} launches (step {step_ms:.2f} ms, busy "
          f"{100 * total / n / step_ms:.1f}%)", file=sys.stderr)
    for name, (ms, cnt) in rows[:top]:
        print(f"  {ms / n:8.3f} ms {100 * ms / total:5.1f}% {cnt / n:6.0f}x  {name}",
              file=sys.stderr)
    return [{"name": k, "ms_per_step": v[0] / n, "launches_per_step": v[1] / n}
            for k, v in rows[:top]]
