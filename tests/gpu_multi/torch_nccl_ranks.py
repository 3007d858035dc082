# One process per GPU (all of them, 8 at most), NCCL through torch.distributed (issue 30):
# all_reduce and broadcast on tensors of several sizes and types, every element checked
# against the values the ranks must hold, a 256 MiB all_reduce, then three DDP training steps.
# The parent prints every rank's lines, rank by rank. The 256 MiB all_reduce's time is a note
# ("# " line: logged, not compared). Exit 77 with fewer than two GPUs. With
# TORCH_NCCL_RANKS_BIND=1 each rank sees only its own GPU (CUDA_VISIBLE_DEVICES=rank, set
# before its first CUDA call, as Slurm's GPU binding does), its device 0.
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def collectives(rank, world):
    lines, bad = [], 0
    for n, dtype in ((1, torch.float32), (4097, torch.float16), (1 << 20, torch.int32),
                     (1 << 22, torch.bfloat16)):
        base = torch.arange(n, device="cuda")
        x = ((base + rank) % 7).to(dtype)
        dist.all_reduce(x)
        want = sum((base + r) % 7 for r in range(world)).to(dtype)
        ar = int((x != want).sum().item())
        b = torch.full((n,), rank + 3, device="cuda").to(dtype)
        dist.broadcast(b, src=1)
        bc = int((b != 4).sum().item())  # rank 1's value, 1 + 3
        bad += ar + bc
        lines.append("rank %d %d %s: all_reduce sum %d, mismatches %d; broadcast mismatches %d"
                     % (rank, n, str(dtype).split(".")[1], int(x.double().sum().item()), ar, bc))
    big = torch.ones(64 << 20, device="cuda")  # 256 MiB of float32
    dist.all_reduce(big)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        dist.all_reduce(big)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / 5 * 1e3
    wrong = int((big != world ** 6).sum().item())  # 1, six all_reduces
    bad += wrong
    lines.append("rank %d 256 MiB all_reduce x6: mismatches %d" % (rank, wrong))
    return lines, bad, ms


def ddp_steps(rank, dev):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 8)).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator(device="cuda").manual_seed(100 + rank)
    for _ in range(3):
        loss = ddp(torch.randn(32, 64, device="cuda", generator=g)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    # Rounded: NCCL may sum in another order natively (NVLS, which the shim does not offer).
    total = sum(p.double().sum().item() for p in model.parameters())
    return "rank %d DDP, 3 steps: parameter sum %.3f" % (rank, total)


def rank_main(rank, world, port, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dev = rank
    if os.environ.get("TORCH_NCCL_RANKS_BIND") == "1":
        os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
        dev = 0
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            device_id=torch.device("cuda", dev))
    lines, bad, ms = collectives(rank, world)
    lines.append(ddp_steps(rank, dev))
    dist.destroy_process_group()
    q.put((rank, lines, bad, ms))


def main(name):
    world = min(torch.cuda.device_count(), 8)
    if world < 2:
        print("SKIP %s: needs two GPUs, found %d" % (name, world))
        sys.exit(77)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, world, port, q)) for r in range(world)]
    for p in procs:
        p.start()
    got = {}
    for _ in range(world):
        rank, lines, bad, ms = q.get(timeout=240)
        got[rank] = (lines, bad, ms)
    for p in procs:
        p.join(60)
    print("%d ranks" % world)
    for r in range(world):
        print("\n".join(got[r][0]))
    print("# time all_reduce 256MiB ms %.3f" % got[0][2])
    if any(p.exitcode != 0 for p in procs) or any(got[r][1] for r in range(world)):
        sys.exit(1)
    print("PASS %s" % name)


if __name__ == "__main__":
    main("torch_nccl_ranks")
