# JAX: a small MLP trained with jit-compiled gradient steps (float32), and a vmapped batch.
import jax
import jax.numpy as jnp

key = jax.random.PRNGKey(0)
k1, k2, k3 = jax.random.split(key, 3)
params = {"w1": jax.random.normal(k1, (16, 32)) * 0.1, "w2": jax.random.normal(k2, (32, 1)) * 0.1}
x = jax.random.normal(k3, (256, 16))
y = jnp.sin(x.sum(axis=1, keepdims=True))

def loss(p, x, y):
    return jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"] - y) ** 2)

@jax.jit
def update(p, x, y):
    g = jax.grad(loss)(p, x, y)
    return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)

for _ in range(50):
    params = update(params, x, y)
print("loss", round(float(loss(params, x, y)), 4))
print("vmap", round(float(jax.vmap(lambda r: jnp.dot(r, r))(x).sum()), 2))
print("PASS jax_train")
