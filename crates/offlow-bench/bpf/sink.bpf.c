// SPDX-License-Identifier: Apache-2.0
/*
 * The receiver of `offlow bench offload`: attached (native XDP) to the
 * receiving veth. It counts per CPU the experiment's frames (IPv4 UDP to
 * dst_port) with their bytes, and every other frame apart, records each
 * experiment frame's UDP source port in a 65,536-bit set (so the bench can
 * check how many distinct flows arrived), and drops everything: the
 * receiver's kernel does no further work per frame.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

const volatile __u16 dst_port = 9;

struct counts {
	__u64 frames;
	__u64 bytes;
	__u64 other;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counts);
} rx_counts SEC(".maps");

struct port_set {
	__u64 bits[1024];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct port_set);
} src_ports SEC(".maps");

SEC("xdp")
int sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	__u32 key = 0;
	struct counts *c = bpf_map_lookup_elem(&rx_counts, &key);

	if (!c)
		return XDP_DROP;
	if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
	    udp->dest != bpf_htons(dst_port)) {
		c->other += 1;
		return XDP_DROP;
	}
	c->frames += 1;
	c->bytes += (__u64)(end - data);

	struct port_set *set = bpf_map_lookup_elem(&src_ports, &key);
	if (set) {
		__u16 sp = bpf_ntohs(udp->source);
		__u64 bit = 1ULL << (sp & 63);
		__u64 *word = &set->bits[(sp >> 6) & 1023];
		/* Set once per port: the atomic only on a port's first frame. */
		if (!(*word & bit))
			__sync_fetch_and_or(word, bit);
	}
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
