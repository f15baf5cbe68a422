// SPDX-License-Identifier: Apache-2.0
/*
 * The receiver of `offlow bench offload`: attached (native XDP) to the
 * receiving veth. It counts per CPU the experiment's frames (IPv4 UDP to
 * dst_port) with their bytes, and every other frame apart, records each
 * experiment frame's UDP source port in a 65,536-bit set (so the bench can
 * check how many distinct flows arrived), and drops the experiment's
 * frames: the receiver's kernel does no further work per frame.
 *
 * The NAT rows set two more options:
 * - expect_saddr (network order, 0: off): experiment frames whose IPv4
 *   source is this address are counted as translated, and one frame in
 *   SAMPLE_EVERY is copied (its first SAMPLE_LEN - 1 bytes) into a per-CPU ring
 *   of SAMPLE_SLOTS slots, so that the bench can check whole headers and
 *   checksums of frames received during the measurement, in userspace.
 * - pass_other: other frames go up to the receiver's stack (the latency
 *   probes) instead of being dropped.
 *
 * The gateway rows set expect_vid (0: off) instead: one 802.1Q tag is
 * parsed before the IPv4 header, experiment frames tagged with this VLAN
 * ID are counted as translated (untagged or otherwise tagged frames are still
 * experiment frames, not translated ones), and frames are sampled as
 * above.
 *
 * bpf_xdp_load_bytes needs Linux 5.18.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define SAMPLE_LEN 512
#define SAMPLE_SLOTS 16
#define SAMPLE_EVERY 1024

const volatile __u16 dst_port = 9;
const volatile __u32 expect_saddr = 0;
const volatile __u8 pass_other = 0;
const volatile __u16 expect_vid = 0;

struct vlan_tag {
	__be16 tci;
	__be16 encap_proto;
};

struct counts {
	__u64 frames;
	__u64 bytes;
	__u64 other;
	__u64 translated;
	/* Counted apart rather than derived: userspace reads a CPU's counts
	 * while the program updates them, so frames - translated from one
	 * read can be off by one; a window's untranslated count cannot. */
	__u64 untranslated;
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

struct sample {
	__u32 len; /* bytes copied; 0: slot never written */
	__u32 frame_len;
	__u8 data[SAMPLE_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SAMPLE_SLOTS);
	__type(key, __u32);
	__type(value, struct sample);
} samples SEC(".maps");

static __always_inline void take_sample(struct xdp_md *ctx, __u64 n, __u32 frame_len)
{
	__u32 slot = (__u32)(n / SAMPLE_EVERY) % SAMPLE_SLOTS;
	struct sample *s = bpf_map_lookup_elem(&samples, &slot);
	__u64 len = frame_len;

	if (!s)
		return;
	if (len > SAMPLE_LEN - 1)
		len = SAMPLE_LEN - 1;
	/* Redundant for C, not for the verifier: clang would pass the helper
	 * a copy of the length made before the clamp. The empty asm hides the
	 * clamp from clang, so the mask stays and bounds the register the
	 * helper gets (SAMPLE_LEN is a power of two). */
	asm volatile("" : "+r"(len));
	len &= SAMPLE_LEN - 1;
	if (len == 0)
		return;
	if (bpf_xdp_load_bytes(ctx, 0, s->data, len) == 0) {
		s->len = len;
		s->frame_len = frame_len;
	}
}

SEC("xdp")
int sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__be16 proto = 0;
	void *l3 = eth + 1;
	int tagged = 0;
	__u32 key = 0;
	struct counts *c = bpf_map_lookup_elem(&rx_counts, &key);

	if (!c)
		return XDP_DROP;
	if (l3 <= end)
		proto = eth->h_proto;
	if (expect_vid && proto == bpf_htons(ETH_P_8021Q)) {
		struct vlan_tag *tag = l3;

		if ((void *)(tag + 1) > end)
			proto = 0;
		else {
			tagged = (bpf_ntohs(tag->tci) & 0x0fff) == expect_vid;
			proto = tag->encap_proto;
			l3 = tag + 1;
		}
	}
	struct iphdr *ip = l3;
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end || proto != bpf_htons(ETH_P_IP) ||
	    ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
	    udp->dest != bpf_htons(dst_port)) {
		c->other += 1;
		return pass_other ? XDP_PASS : XDP_DROP;
	}
	__u64 n = c->frames;
	__u32 frame_len = (__u32)(end - data);
	c->frames += 1;
	c->bytes += frame_len;
	if (expect_saddr || expect_vid) {
		if (expect_saddr ? ip->saddr == expect_saddr : tagged)
			c->translated += 1;
		else
			c->untranslated += 1;
		if (n % SAMPLE_EVERY == 0)
			take_sample(ctx, n, frame_len);
	}

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
