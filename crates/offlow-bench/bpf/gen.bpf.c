// SPDX-License-Identifier: Apache-2.0
/*
 * The traffic generator of `offlow bench offload`: run by BPF_PROG_RUN with
 * BPF_F_TEST_XDP_LIVE_FRAMES on the generator's veth, once per frame. It
 * gives each frame a UDP source port `base_port + (n % flows)`, n counting
 * this CPU's frames, fixes the UDP checksum incrementally from the frame's
 * current contents (the live-frames page pool does not restore the bytes a
 * program changed, so the old value is read, never assumed), and returns
 * XDP_TX: in live mode that redirects the frame out of the same veth
 * towards its peer. The IPv4 header is not touched, so its checksum stays
 * valid. frames_sent counts the frames handed to XDP_TX per CPU.
 *
 * With restore set, the program first writes the frame's Ethernet, IPv4
 * and UDP headers back from hdr (the first HDR_LEN bytes of the frame the
 * bench started from). A receiver that rewrites frames in place (a NAT:
 * addresses, ports, MACs, TTL) writes into the pool's pages, and the pool
 * hands those pages back to the next batch as they are: without the
 * restore, every batch after a page's first would carry the translated
 * headers, which no NAT rule matches.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define HDR_LEN (sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct udphdr))

const volatile __u32 flows = 1;
const volatile __u16 base_port = 10000;
const volatile __u8 restore = 0;
/* With stride > 1 (the generator's thread count, threads pinned to CPUs
 * 0..stride-1), CPU c sends only ports base_port + k with k % stride == c
 * % stride: disjoint flow sets per CPU, as RSS would keep a flow on one
 * queue (exactly disjoint when flows is a multiple of stride). */
const volatile __u32 stride = 1;
const volatile __u8 hdr[HDR_LEN];

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} frames_sent SEC(".maps");

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), one's complement, 16 bits. */
static __always_inline __u16 csum_replace16(__u16 hc, __u16 old, __u16 new)
{
	__u32 s = (__u16)~hc;
	s += (__u16)~old;
	s += new;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

SEC("xdp")
int gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&frames_sent, &key);

	if (!n || (void *)(udp + 1) > end)
		return XDP_ABORTED;
	if (restore) {
		__u8 *p = data;
#pragma unroll
		for (int i = 0; i < (int)HDR_LEN; i++)
			p[i] = hdr[i];
	}
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 ||
	    ip->protocol != IPPROTO_UDP)
		return XDP_ABORTED;

	__u16 old = bpf_ntohs(udp->source);
	__u32 k = *n;
	if (stride > 1)
		k = k * stride + bpf_get_smp_processor_id() % stride;
	__u16 new = base_port + (__u16)(k % flows);
	*n += 1;
	if (old != new) {
		udp->source = bpf_htons(new);
		if (udp->check) {
			__u16 c = csum_replace16(bpf_ntohs(udp->check), old, new);
			/* 0 means "no checksum" in UDP over IPv4. */
			udp->check = bpf_htons(c ? c : 0xffff);
		}
	}
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
