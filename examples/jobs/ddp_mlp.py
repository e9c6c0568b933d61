"""A torchrun-style PyTorch DDP script under OAK's job contract (docs/jobs.md).

Nothing here is OAK-specific but four calls of ``oak.job``: the rendezvous is torch.distributed's ``env://``
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK — set by OAK as by torchrun), the checkpoint goes to
``OAK_CHECKPOINT_DIR`` through ``commit`` (which refuses a rank of an incarnation a newer one replaced), and
``report`` / ``should_stop`` tell the scheduler the step and hear its SIGTERM. The
same file runs under ``torchrun --nproc-per-node 2 examples/jobs/ddp_mlp.py`` or by hand.

It fits a linear regression target with a small MLP on synthetic data (the batch of rank r at step s is drawn
from a generator seeded with (s, r), so a resumed run sees the data it would have seen). A stop request is
all-reduced every step, so every rank stops at the same step boundary and rank 0 checkpoints it.

    python examples/jobs/ddp_mlp.py --steps 200 --batch 64 --ckpt-every 20
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

import oak.job


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64, help="global batch, split over the ranks")
    ap.add_argument("--ckpt-every", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--step-sleep", type=float, default=0.0, help="seconds to wait each step (to watch a run)")
    a = ap.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if world > 1:
        dist.init_process_group(
            "nccl" if cuda else "gloo", init_method="env://", timeout=datetime.timedelta(seconds=120)
        )
    torch.manual_seed(0)
    model: nn.Module = nn.Sequential(nn.Linear(16, a.hidden), nn.Tanh(), nn.Linear(a.hidden, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    path = oak.job.checkpoint_dir() / "model.pt"
    step = 0
    if path.exists():
        state = torch.load(path, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = int(state["step"])
    print(f"rank {rank}/{world}: resuming at step {step} (on {socket.gethostname()})", flush=True)
    oak.job.should_stop()  # installs the SIGTERM handler now: a stop from here on is checkpointed
    net = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    if world > 1:
        # DDP regroups its gradient buckets after the first backward, and a gradient's sum over the ranks depends
        # on its place in its bucket (gloo reduces a bucket in chunks that start at different ranks): one backward
        # of zero loss first makes every step — of an uninterrupted run and after a resume alike — run on the
        # regrouped buckets, so a resumed run ends bit-identical to an uninterrupted one
        (net(torch.zeros(1, 16, device=device)).sum() * 0.0).backward()
        opt.zero_grad()
    target = torch.linspace(-1, 1, 16, device=device)

    def save() -> None:
        if rank == 0:
            tmp = path.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
            # atomic (a kill leaves the old checkpoint or the new one), and only while this incarnation is the
            # job's current one: a rank of an older one, woken up after a partition, writes nothing
            if not oak.job.commit(tmp, path):
                print(f"rank {rank}: fenced at step {step}: a newer incarnation runs this job", flush=True)
                raise SystemExit(3)

    loss = torch.tensor(0.0)
    while step < a.steps:
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(a.batch // world, 16, generator=g).to(device)
        y = (x @ target).unsqueeze(1)
        loss = nn.functional.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if a.step_sleep > 0:
            time.sleep(a.step_sleep)
        oak.job.report(step, total_steps=a.steps, batch_size=a.batch)
        stop = torch.tensor([1.0 if oak.job.should_stop() else 0.0], device=device)
        if world > 1:
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # every rank stops at the same step
        if step % a.ckpt_every == 0 or stop.item() > 0 or step == a.steps:
            save()
        if stop.item() > 0:
            print(f"rank {rank}: stopped at step {step} (checkpointed), loss {loss.item():.4f}", flush=True)
            break
    else:
        print(f"rank {rank}: done at step {step}, loss {loss.item():.4f}", flush=True)
    if world > 1:
        # no rank leaves while another still talks to it: a peer's connection closed under gloo's reader
        # thread made a finished rank abort at exit ("terminate called without an active exception")
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
