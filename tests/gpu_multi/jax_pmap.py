# JAX over every GPU of one process: a pmap'ed psum (XLA's collectives: its own one-shot
# all-reduce kernel for these small sums, GPU 0's and GPU 1's halves meeting through peer
# memory, and NCCL's all-gather), arrays sharded over the GPUs and gathered back, a jit step
# whose inputs lie on different GPUs, and a transfer between GPUs. Each GPU's work comes from
# a thread of its own: a call of one that waited for the other GPU's host functions hung here
# (interpose/hostfn.c). Skips (77) with fewer than two GPUs. XLA's
# deterministic reductions: its default ones add in the order the GPU's atomics come, which
# differs between two native runs (60426.5 and 60426.58 for the sharded sum, 2xH200).
import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true").strip()

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

n = jax.device_count()
if n < 2:
    print(f"needs two GPUs, found {n}")
    sys.exit(77)
print("devices", n, jax.devices()[0].platform)
x = jnp.arange(n * 4096, dtype=jnp.float32).reshape(n, 4096)
summed = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(x)
print("psum", [round(float(summed[i].sum()), 1) for i in range(n)])
mean = jax.pmap(lambda v: jax.lax.pmean(v * 2.0, "i"), axis_name="i")(x)
print("pmean", round(float(mean[0][:8].sum()), 1))
mesh = Mesh(np.array(jax.devices()), ("d",))
big = jax.device_put(jnp.arange(n * 1 << 16, dtype=jnp.float32), NamedSharding(mesh, PartitionSpec("d")))
step = jax.jit(lambda v: jnp.sum(jnp.sin(v) * v))
print("sharded", round(float(step(big)), 2), len(big.sharding.device_set))
a = jax.device_put(jnp.linspace(0.0, 1.0, 1 << 20), jax.devices()[0])
b = jax.device_put(a, jax.devices()[1])
print("moved", b.devices() == {jax.devices()[1]}, round(float(jnp.sum(b * b)), 3))
print("PASS jax_pmap")
