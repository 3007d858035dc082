# torch_nccl_ranks.py with each rank bound to its own GPU by CUDA_VISIBLE_DEVICES, set in the
# rank before its first CUDA call, as Slurm's GPU binding and MPI launch wrappers do: every
# rank sees one device, its device 0, and NCCL still joins the ranks' GPUs (natively through
# IPC over NVLink or PCIe). Through one server the same; through a server per GPU
# (MPSSHIM_SERVER_PER_GPU=1) too: the physical memory NCCL passes as POSIX descriptors crosses
# between the GPUs' servers (server/memory/ipcpeer.c).
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_nccl_ranks  # noqa: E402

if __name__ == "__main__":
    os.environ["TORCH_NCCL_RANKS_BIND"] = "1"  # the ranks (spawned) inherit it
    torch_nccl_ranks.main("torch_nccl_bound")
