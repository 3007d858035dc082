# CuPy's memory pool and streams: allocations returned to and reused from the pool, work on
# two non-blocking streams joined by an event, the pool freed.
import cupy as cp

pool = cp.get_default_memory_pool()
s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
with s1:
    a = cp.arange(1 << 20, dtype=cp.float32)
    a *= 3
e = s1.record()
s2.wait_event(e)
with s2:
    b = a + 1
s2.synchronize()
print("streams sum", float(b.sum()))
del a, b
print("pool holds memory", pool.total_bytes() > 0)
c = cp.ones(1 << 18, dtype=cp.float64)
print("reused sum", float(c.sum()))
del c
pool.free_all_blocks()
print("pool empty", pool.used_bytes() == 0)
print("PASS cupy_pool_streams")
