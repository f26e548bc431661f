"""A torchrun-style training script for command jobs (``coddl.elastic.gang``): it knows nothing of
coddl. It meets its peers through ``init_process_group("gloo")`` with torchrun's environment, trains
STEPS steps of a tiny model with an all-reduce per step, and keeps its own checkpoint (rank 0 writes
``ckpt.json`` in the working directory after every step), from which a restart resumes.

On SIGTERM every rank stops at the same step (the stop flag rides on the step's all-reduce) and
records it. Each rank appends what it saw at start to ``starts.jsonl``: its environment, its working
directory, the sum of all ranks (a check that the group really formed), its network namespace and the
network interfaces it sees.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import time

import torch
import torch.distributed as dist

torch.set_num_threads(1)
stop = False


def on_term(_sig, _frame):  # noqa: ANN001
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method="env://")
ranks = torch.tensor([float(rank)])
dist.all_reduce(ranks)
seen = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                       "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES",
                                       "TORCHELASTIC_RESTART_COUNT")}
step = json.load(open("ckpt.json"))["step"] if os.path.exists("ckpt.json") else 0
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # SO_NETNS_COOKIE: unlike the inode, never reused
    cookie = struct.unpack("Q", s.getsockopt(socket.SOL_SOCKET, 71, 8))[0]
with open("starts.jsonl", "a") as f:
    f.write(json.dumps({"env": seen, "cwd": os.getcwd(), "uid": os.getuid(), "sum": ranks.item(),
                        "from_step": step, "pid": os.getpid(), "netns": os.stat("/proc/self/ns/net").st_ino,
                        "netns_cookie": cookie,
                        "interfaces": [name for _, name in socket.if_nameindex()]}) + "\n")
steps = int(os.environ.get("STEPS", "20"))
model = torch.nn.Linear(4, 1)
while step < steps:
    flag = torch.tensor([1.0 if stop else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() > 0:
        break
    loss = model(torch.ones(8, 4)).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    step += 1
    if rank == 0:
        with open("ckpt.json.tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace("ckpt.json.tmp", "ckpt.json")
    time.sleep(float(os.environ.get("STEP_S", "0.05")))
if step < steps:
    with open(f"term-{rank}.txt", "a") as f:
        f.write(f"{world} {step}\n")
dist.destroy_process_group()
