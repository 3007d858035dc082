# Two processes, one GPU each, NCCL through torch.distributed (issue 30): all_reduce and
# broadcast on tensors of several sizes and types, every element checked against the values
# the ranks must hold, a 256 MiB all_reduce, then three DDP training steps. Rank 0 prints both
# ranks' lines, rank 0's first. The 256 MiB all_reduce's time is a note ("# " line: logged,
# not compared). Exit 77 with fewer than two GPUs.
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


def collectives(rank):
    lines, bad = [], 0
    for n, dtype in ((1, torch.float32), (4097, torch.float16), (1 << 20, torch.int32),
                     (1 << 22, torch.bfloat16)):
        base = torch.arange(n, device="cuda")
        x = ((base + rank) % 7).to(dtype)
        dist.all_reduce(x)
        want = (base % 7 + (base + 1) % 7).to(dtype)
        ar = int((x != want).sum().item())
        b = torch.full((n,), rank + 3, device="cuda").to(dtype)
        dist.broadcast(b, src=1)
        bc = int((b != 4).sum().item())
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
    wrong = int((big != 64).sum().item())  # 1 doubled six times
    bad += wrong
    lines.append("rank %d 256 MiB all_reduce x6: mismatches %d" % (rank, wrong))
    return lines, bad, ms


def ddp_steps(rank):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 8)).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator(device="cuda").manual_seed(100 + rank)
    for _ in range(3):
        loss = ddp(torch.randn(32, 64, device="cuda", generator=g)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    total = sum(p.double().sum().item() for p in model.parameters())
    return "rank %d DDP, 3 steps: parameter sum %.4f" % (rank, total)


def rank_main(rank, port, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    lines, bad, ms = collectives(rank)
    lines.append(ddp_steps(rank))
    dist.destroy_process_group()
    q.put((rank, lines, bad, ms))


if __name__ == "__main__":
    if torch.cuda.device_count() < 2:
        print("SKIP torch_nccl2: needs two GPUs, found %d" % torch.cuda.device_count())
        sys.exit(77)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    got = {}
    for _ in range(2):
        rank, lines, bad, ms = q.get(timeout=240)
        got[rank] = (lines, bad, ms)
    for p in procs:
        p.join(60)
    for r in range(2):
        print("\n".join(got[r][0]))
    print("# time all_reduce 256MiB ms %.3f" % got[0][2])
    if any(p.exitcode != 0 for p in procs) or got[0][1] or got[1][1]:
        sys.exit(1)
    print("PASS torch_nccl2")
