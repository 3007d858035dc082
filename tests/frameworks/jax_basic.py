# JAX: jit, grad and vmap of a small function, and a few steps of gradient descent.
import jax
import jax.numpy as jnp

x = jnp.arange(8.0)
f = jax.jit(lambda v: jnp.sum(jnp.sin(v) ** 2))
print("jit", round(float(f(x)), 4))
print("grad", [round(float(g), 3) for g in jax.grad(f)(x)[:3]])
print("vmap", [round(float(v), 3) for v in jax.vmap(lambda v: v * v + 1)(x)[:3]])
w = jnp.zeros(8)
for _ in range(20):
    w = w - 0.1 * jax.grad(lambda w: jnp.sum((w - x) ** 2))(w)
print("descent", round(float(jnp.sum(w)), 3))
print("devices", jax.devices()[0].platform)
print("PASS jax_basic")
