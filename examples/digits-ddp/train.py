"""Digits classifier with PyTorch DistributedDataParallel: a plain torchrun script.

Nothing here knows about edl. It reads the standard variables torchrun sets
(RANK, WORLD_SIZE, MASTER_ADDR, ... through `init_process_group`), shards the
data with `DistributedSampler`, saves a checkpoint after every epoch and loads
it at start. That last part is what makes it elastic: when the world changes,
every worker is restarted and carries on from the last finished epoch.

    torchrun --nproc-per-node=2 train.py                 # plain PyTorch
    edl run examples/digits-ddp/job.yaml                 # elastic, under edl
"""

import argparse
import gc
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--checkpoint", default="checkpoint.pt")
    return parser.parse_args()


def load_data():
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    return TensorDataset(x_train, y_train), (x_test, y_test)


def save_checkpoint(path, model, optimizer, epoch):
    """Written to a temporary file and renamed, so a kill never leaves half a checkpoint."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def evaluate(ddp, model, x_test, y_test):
    ddp.eval()
    with torch.no_grad():
        return (model(x_test).argmax(1) == y_test).float().mean().item()


def main():
    args = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    train_set, (x_test, y_test) = load_data()
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    start = 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        if rank == 0:
            print(f"resumed from epoch {state['epoch']} with {world_size} workers", flush=True)
    ddp = DDP(model)
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)
        ddp.train()
        for images, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp(images), labels)
            loss.backward()
            optimizer.step()
        accuracy = evaluate(ddp, model, x_test, y_test)
        if rank == 0:
            save_checkpoint(args.checkpoint, model, optimizer, epoch)
            # a metric line edl shows: epochs finished (from 1) of the total, loss, accuracy
            print(f"epoch={epoch + 1} epochs={args.epochs} loss={loss.item():.4f} "
                  f"accuracy={accuracy:.4f}", flush=True)
        dist.barrier()  # nobody starts the next epoch before its checkpoint exists

    if rank == 0:  # evaluated here too: a restart after the last checkpoint runs no epoch
        print(f"test accuracy {evaluate(ddp, model, x_test, y_test):.4f} "
              f"with {world_size} workers", flush=True)
    # DDP holds the process group: free it before the group (and the interpreter) goes,
    # or gloo's threads are torn down at interpreter exit, which can abort the process
    del ddp
    gc.collect()  # DDP sits in a reference cycle of its own: del alone frees nothing
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
