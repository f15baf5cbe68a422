// SPDX-License-Identifier: Apache-2.0
/*
 * The ceiling of `offlow bench offload`: attached (native XDP) to the
 * switch's port 1, it redirects every frame to the interface in slot 0 of
 * a DEVMAP (the switch's port 2) and does nothing else: no parsing, no
 * lookup, no counting. What a switch that forwards in XDP cannot beat on
 * the same veths.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} tx_port SEC(".maps");

SEC("xdp")
int ceiling(struct xdp_md *ctx)
{
	return bpf_redirect_map(&tx_port, 0, 0);
}

char LICENSE[] SEC("license") = "GPL";
