"""Digits classifier with DDP that resizes live: the world changes between two steps.

The same model and data as examples/digits-ddp, written for `edl.elastic`: the model,
optimizer and the loop's progress are one `State`, and `ElasticLoop.run` calls
`train_step` once per step with this worker's samples. When trainers join or leave,
the processes stay alive: the world re-forms at a step boundary, new workers get the
state from a surviving one, and the rest of the epoch is split over the new world.

    edl run examples/digits-ddp-live/job.yaml             # live, under edl
    torchrun --nproc-per-node=2 train.py                  # a fixed world, plain torchrun
    python train.py                                       # one process
"""

import argparse
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from edl.elastic import Batch, ElasticLoop, State


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--step-pause", type=float, default=0.0,
                        help="seconds to sleep after each step (tests, benches)")
    parser.add_argument("--pause-below-world", type=int, default=0, metavar="N",
                        help="sleep after a step only while the world is smaller than N")
    parser.add_argument("--audit", default=None, metavar="FILE",
                        help="append the samples each worker trains on, step by step, to FILE")
    return parser.parse_args()

def main():
    args = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # everything slow happens before joining: a new worker is warm when it enters
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    state = State(model, optimizer)
    loop = ElasticLoop(state, len(x_train), args.batch_size, args.epochs, audit=args.audit)
    last = {"loss": 0.0, "accuracy": 0.0}

    def train_step(batch: Batch) -> None:
        index = torch.tensor(batch.indices, dtype=torch.long)
        optimizer.zero_grad()
        # summed then scaled: the mean over the whole step, however it is split
        loss = F.cross_entropy(loop.ddp(x_train[index]), y_train[index], reduction="sum")
        (loss * batch.scale).backward()
        optimizer.step()
        last["loss"] = loss.item() / max(1, len(batch.indices))
        if args.step_pause and (not args.pause_below_world
                                or loop.world < args.pause_below_world):
            time.sleep(args.step_pause)

    def end_of_epoch(epoch: int) -> None:
        with torch.no_grad():
            last["accuracy"] = (model(x_test).argmax(1) == y_test).float().mean().item()
        if loop.rank == 0:
            # a metric line edl shows: epochs finished (from 1) of the total, loss, accuracy
            print(f"epoch={epoch + 1} epochs={args.epochs} loss={last['loss']:.4f} "
                  f"accuracy={last['accuracy']:.4f} "
                  f"workers={loop.world}", flush=True)

    if loop.run(train_step, end_of_epoch) and loop.rank == 0:
        print(f"test accuracy {last['accuracy']:.4f} with {loop.world} workers", flush=True)

if __name__ == "__main__":
    main()
