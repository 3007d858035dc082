/* zone.c: this server's share of the address space, so that the addresses the servers of
 * one pipe directory choose never coincide. */
#ifndef MPSSHIM_SERVER_ZONE_H
#define MPSSHIM_SERVER_ZONE_H

#include <cuda.h>
#include <stdint.h>

/* GPUs' servers of one pipe directory that get a zone of their own (the rest share zone 0,
 * said in their logs). */
#define SRV_ZONES 16

/* This server's zone: 0 for a pipe directory's own server, 1..SRV_ZONES for a GPU's server
 * (MPSSHIM_SERVER_PER_GPU's folders gpu-VALUE), claimed on first use for the process's life. */
int srv_zone_no(void);
/* Where the server's address window goes (window.c): `usual` in zone 0. */
uint64_t srv_zone_window_hint(uint64_t usual);
/* Reserves `bytes` of device address space aligned to `align`, inside the zone where the
 * driver lets it be (cuMemAddressReserve with a hint; in zone 0 with none, the driver's own
 * choice). The driver's error, or CUDA_SUCCESS with *va. */
CUresult srv_zone_reserve(CUdeviceptr *va, uint64_t bytes, uint64_t align);
/* Gives back what srv_zone_reserve (or the driver) reserved: the same va and bytes. */
CUresult srv_zone_free(CUdeviceptr va, uint64_t bytes);
/* Reserves, here, the region of another GPU's server's zone that [va, va + bytes) lies in (a
 * mapping of that server's, about to be mapped here at its own address), or counts it once
 * more: CUDA_SUCCESS, or the error (CUDA_ERROR_INVALID_VALUE: no other zone's;
 * CUDA_ERROR_ALREADY_MAPPED: something of this server's is there). */
CUresult srv_zone_reserve_foreign(uint64_t va, uint64_t bytes);
/* Counts one mapping less in that region; the last one gives it back. */
void srv_zone_release_foreign(uint64_t va, uint64_t bytes);

#endif
