"""A user training script under OAK's job contract (docs/jobs.md), in plain Python.

It "trains" by sleeping: one optimiser step of a global batch of BATCH samples takes
``STEP_S * (SERIAL + (1 - SERIAL) / world_size)`` seconds (by default 80 % of the work is split across
ranks: ``--serial 0.2``), so the scheduler has a real speed-up to learn. Rank 0 reports every step with
``oak.job.report``, checkpoints every CKPT_EVERY steps — with ``--ckpt-every 0`` whenever the scheduler's
advised interval has passed (``oak.job.should_checkpoint``), reporting what each checkpoint took — and when
asked to stop, into ``OAK_CHECKPOINT_DIR``, and appends each step it completes to ``steps.log`` there, so
that a test can check that no step beyond the last checkpoint was lost.

    python examples/jobs/count.py --steps 40 --step-s 0.05 --ckpt-every 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import oak.job


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--step-s", type=float, default=0.1)
    ap.add_argument("--ckpt-every", type=int, default=10, help="0: as the scheduler advises")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--serial", type=float, default=0.2, help="fraction of a step's time not split across ranks")
    ap.add_argument("--fail-at", type=int, default=-1, help="exit 1 once at this step (a crash to recover from)")
    a = ap.parse_args()
    ckpt_dir = oak.job.checkpoint_dir()
    ckpt = ckpt_dir / "ckpt.json"
    step = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
    rank, world = oak.job.rank(), oak.job.world_size()
    print(f"rank {rank}/{world}: resuming at step {step}", flush=True)
    oak.job.should_stop()  # installs the SIGTERM handler now: a stop from here on is checkpointed

    def save(s: int) -> None:
        if rank == 0:
            tmp = ckpt.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"step": s, "incarnation": os.environ.get("OAK_INCARNATION", "")}))
            # atomic (a kill leaves the old checkpoint or the new one), and only while this incarnation is the
            # job's current one: a rank of an older one, woken up after a partition, writes nothing
            if not oak.job.commit(tmp, ckpt):
                print(f"rank {rank}: fenced at step {s}: a newer incarnation runs this job", flush=True)
                raise SystemExit(3)

    while step < a.steps:
        time.sleep(a.step_s * (a.serial + (1.0 - a.serial) / world))
        step += 1
        if rank == 0:
            with open(ckpt_dir / "steps.log", "a") as fh:
                fh.write(f"{step}\n")
        if step == a.fail_at and not (ckpt_dir / "failed-once").exists():
            (ckpt_dir / "failed-once").touch()
            print("simulated crash", flush=True)
            return 1
        # --ckpt-every 0: when the scheduler's advised interval has passed (oak.job.should_checkpoint)
        # (and after its first step: what a checkpoint costs is then known to the scheduler's advice)
        due = step % a.ckpt_every == 0 if a.ckpt_every > 0 else (step == 1 or oak.job.should_checkpoint())
        took = None
        if due:
            t0 = time.monotonic()
            save(step)
            took = time.monotonic() - t0
        oak.job.report(step, total_steps=a.steps, batch_size=a.batch, checkpoint_s=took)
        if oak.job.should_stop():
            save(step)
            print(f"rank {rank}: stopped at step {step} (checkpointed)", flush=True)
            return 0
    save(step)
    print(f"rank {rank}: done at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
