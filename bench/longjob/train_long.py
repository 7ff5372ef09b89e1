"""A long data-parallel training run (CPU, gloo) for the open-speed benchmark.

Every rank trains a small MLP, all-reduces its gradients and logs each step the way a
verbose trainer does: the step's loss and throughput, then per-layer gradient and weight
statistics computed from the real tensors. A per-rank checkpoint is written every
--save-every steps with torch.save; the fault is the environment's (the driver mounts a tiny
tmpfs under one rank's checkpoint folder, whose ENOSPC is the kernel's own).
"""
import argparse
import logging
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--save-every", type=int, default=500)
    p.add_argument("--ckpt-dir", default="checkpoints")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--timeout", type=float, default=30.0)
    args = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format=f"%(asctime)s %(levelname)s [rank{rank}/{world}] train: %(message)s")
    log = logging.getLogger("train")
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    log.info("Initialized process group: backend=gloo world_size=%d", world)
    torch.manual_seed(1234)
    dims = [16] * (args.layers + 1)
    model = nn.Sequential(*[nn.Linear(dims[i], dims[i + 1]) for i in range(args.layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(64, 16, generator=g)
    y = torch.randn(64, 16, generator=g)
    ckpt = os.path.join(args.ckpt_dir, f"rank{rank}")
    os.makedirs(ckpt, exist_ok=True)
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        flat = torch.cat([q.grad.flatten() for q in model.parameters()])
        dist.all_reduce(flat)
        flat /= world
        i = 0
        for q in model.parameters():
            n = q.numel()
            q.grad.copy_(flat[i:i + n].view_as(q))
            i += n
        opt.step()
        dt = (time.perf_counter() - t0) * 1000
        log.info("step %d/%d | loss %.6f | lr %.3e | step_time %.2fms | samples/s %.1f",
                 step, args.steps, loss.item(), 3e-4, dt, 64 / max(dt, 1e-3) * 1000)
        for li, layer in enumerate(model):
            w, gr = layer.weight, layer.weight.grad
            log.info("  layer %02d | w_norm %.5f | w_mean %+.6f | g_norm %.6f | g_max %.6f | update_ratio %.3e",
                     li, w.norm().item(), w.mean().item(), gr.norm().item(), gr.abs().max().item(),
                     (3e-4 * gr.norm() / (w.norm() + 1e-12)).item())
        if args.save_every and step % args.save_every == 0:
            path = os.path.join(ckpt, f"step_{step:06d}.pt")
            log.info("Saving checkpoint step %d to %s", step, path)
            try:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path)
            except Exception:
                log.error("Checkpoint save failed for step %d, giving up", step)
                raise
            dist.barrier()
    log.info("Training finished")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
