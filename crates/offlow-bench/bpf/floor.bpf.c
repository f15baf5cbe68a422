// SPDX-License-Identifier: Apache-2.0
/*
 * The lookup floor of `offlow bench offload`: the least an exact-match XDP
 * offload does for a forwarded frame. Attached (native XDP) to the
 * switch's port 1, it parses Ethernet, IPv4 and UDP with bounds checks,
 * builds the same 36-byte key as offlow's offload program (same layout,
 * same host-order numbers), looks it up once in a BPF hash map and
 * redirects a hit to slot 0 of a DEVMAP (the switch's port 2); a miss goes
 * to the stack. No per-port lookup, no program record, no counters, no
 * rewrite: what is left when an exact-match offload gives up everything
 * but its one lookup. The bench fills the map with the experiment's flows.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct flow_key {
	__u32 in_port;
	__u32 ipv4_src;
	__u32 ipv4_dst;
	__u8 eth_dst[6];
	__u8 eth_src[6];
	__u16 vlan_vid;
	__u8 vlan_present;
	__u8 vlan_pcp;
	__u16 tp_src;
	__u16 tp_dst;
	__u8 ip_proto;
	__u8 ip_dscp;
	__u8 ip_ecn;
	__u8 pad;
};
_Static_assert(sizeof(struct flow_key) == 36, "flow_key layout");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct flow_key);
	__type(value, __u32);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} tx_port SEC(".maps");

static __always_inline __u16 rd16(const __u8 *p)
{
	return ((__u16)p[0] << 8) | p[1];
}

SEC("xdp")
int floor_lookup(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *h = data;

	/* Ethernet + option-less IPv4 + UDP. */
	if (data + 14 + 20 + 8 > data_end)
		return XDP_PASS;
	if (rd16(h + 12) != 0x0800)
		return XDP_PASS;
	__u8 *ip = h + 14;

	if (ip[0] != 0x45 || (rd16(ip + 6) & 0x3fff) || ip[9] != 17)
		return XDP_PASS;
	__u8 *l4 = ip + 20;
	struct flow_key k;

	__builtin_memset(&k, 0, sizeof(k));
	k.in_port = 1;
	k.ipv4_src = ((__u32)rd16(ip + 12) << 16) | rd16(ip + 14);
	k.ipv4_dst = ((__u32)rd16(ip + 16) << 16) | rd16(ip + 18);
	__builtin_memcpy(k.eth_dst, h, 6);
	__builtin_memcpy(k.eth_src, h + 6, 6);
	k.tp_src = rd16(l4);
	k.tp_dst = rd16(l4 + 2);
	k.ip_proto = 17;
	k.ip_dscp = ip[1] >> 2;
	k.ip_ecn = ip[1] & 3;
	if (!bpf_map_lookup_elem(&flows, &k))
		return XDP_PASS;
	return bpf_redirect_map(&tx_port, 0, 0);
}

char LICENSE[] SEC("license") = "GPL";
