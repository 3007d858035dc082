# Two NCCL ranks on one GPU, each a process of its own (issue 30: "several ranks per GPU").
# NCCL has refused two ranks of a communicator on one device ("Duplicate GPU detected"), so a
# job that shares GPUs between ranks does not get that far natively either; what a rank sees
# (its all_reduce's sum, or the exception NCCL raised, reduced to its kind) is printed rank by
# rank, natively and through the shim alike. The communicator is made at init (device_id),
# and every wait is bounded: a rank that hangs fails the program rather than the tier.
import datetime
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

RANKS = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kind_of(e):
    text = str(e)
    if "Duplicate GPU" in text:
        return "refused: duplicate GPU"
    return "refused: %s" % type(e).__name__


def rank_main(rank, port, q):
    try:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=RANKS, device_id=torch.device("cuda", 0),
                                timeout=datetime.timedelta(seconds=60))
        x = torch.full((1 << 16,), rank + 1, dtype=torch.int32, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        line = "rank %d: all_reduce sum %d" % (rank, int(x.double().sum().item()))
    except Exception as e:  # NCCL's refusal is the expected answer natively
        line = "rank %d: %s" % (rank, kind_of(e))
    q.put((rank, line))  # before the teardown, which a refused communicator may not survive
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


if __name__ == "__main__":
    if torch.cuda.device_count() < 1:
        print("SKIP torch_nccl_shared: no GPU")
        sys.exit(77)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, port, q)) for r in range(RANKS)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in range(RANKS):
            rank, line = q.get(timeout=150)
            got[rank] = line
    except Exception:
        for p in procs:
            p.kill()
        print("FAIL torch_nccl_shared: a rank gave no answer within 150 s (%s)" % sorted(got))
        sys.exit(1)
    for p in procs:
        p.join(60)
        if p.is_alive():
            p.kill()
    print("%d ranks on GPU 0" % RANKS)
    for r in range(RANKS):
        print(got[r])
    print("PASS torch_nccl_shared")
