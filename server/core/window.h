/* window.c: the server's address window, where it maps what it places itself. */
#ifndef MPSSHIM_SERVER_WINDOW_H
#define MPSSHIM_SERVER_WINDOW_H

#include <stdint.h>

/* Pieces are whole multiples of this (2 MiB: huge-page friendly for pinned memory). */
#define SRV_WINDOW_ALIGN (2ull << 20)
/* 1 TiB of address space, no memory until mapped (the client limit counts on it: capacity.c). */
#define SRV_WINDOW_SIZE (1ull << 40)

/* Reserves the window; -1 when the address space cannot be had. */
int srv_window_init(void);
/* The start of `size` bytes (rounded up to SRV_WINDOW_ALIGN) of the window, still PROT_NONE,
 * not overlapping `avoid` (an address a client could not map; 0 for none); 0 when full. */
uint64_t srv_window_take(uint64_t size, uint64_t avoid);
/* Gives back what srv_window_take returned (the same size): reserved again, whatever was
 * mapped there unmapped. */
void srv_window_give(uint64_t start, uint64_t size);
/* Maps `size` bytes read-write in the window: fd's pages (shared) or anonymous private
 * memory (fd < 0); NULL on failure. Unmapped with srv_window_give. */
void *srv_window_map(uint64_t size, int fd);

/* A sealed memfd of `size` bytes (a multiple of SRV_WINDOW_ALIGN) mapped in the window, not
 * at `avoid`, and registered with the driver: the fd, with *addr; -1 (nothing held) when any
 * step fails. Given back by unregistering and srv_window_give. */
int srv_window_share(uint64_t size, uint64_t avoid, uint64_t *addr);

#endif
