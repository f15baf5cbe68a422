// SPDX-License-Identifier: Apache-2.0
/*
 * A pass-through for a host's veth in `offlow bench latency`: every frame
 * goes on to the stack (XDP_PASS). Its only purpose is to be a native XDP
 * program on the veth: a veth schedules its peer's NAPI after an XDP_TX
 * only when the peer has an XDP program (Linux 6.18 veth_xdp_flush checks
 * the receiving queue's xdp_prog), so without one, frames the offload
 * tier sends back out of the ingress port (XDP_TX) wait in the host's
 * ring until the ring fills, and are then dropped.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
