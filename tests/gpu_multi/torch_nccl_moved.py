# torch_nccl_ranks.py with every rank seeing both GPUs, each served by its own GPU's server
# through the shim: MPSSHIM_SERVER_PER_GPU=1 with MPSSHIM_SERVER_PER_GPU_MOVE=1, so that a
# rank moves to its GPU's server at its first context (interpose/conn.c). Its peer queries
# then answer what the pipe directory's server said (interpose/moved.c), so NCCL takes P2P
# between the ranks' GPUs (told "no access", it took the shared-memory transport, 11x slower
# on two H200s), and the physical memory it passes crosses between the GPUs' servers
# (server/memory/ipcpeer.c). Natively the settings mean nothing: the same run as
# torch_nccl_ranks.py.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_nccl_ranks  # noqa: E402

if __name__ == "__main__":
    os.environ["MPSSHIM_SERVER_PER_GPU"] = "1"  # the ranks (spawned) inherit them
    os.environ["MPSSHIM_SERVER_PER_GPU_MOVE"] = "1"
    torch_nccl_ranks.main("torch_nccl_moved")
