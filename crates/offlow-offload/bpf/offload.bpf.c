// SPDX-License-Identifier: Apache-2.0
/*
 * offload.bpf.c: the kernel half of offlow's offload tier.
 *
 * Two programs over the same maps, one loaded per switch: the XDP program
 * described here, and its counterpart at TC ingress (the "TC" section at
 * the end of the file says what differs there).
 *
 * What: one XDP program, attached to every port of the switch, that serves
 * microflows of the offloadable class (crate docs, key.rs) in the kernel,
 * by exact entries and by masked ones (megaflows, mask.rs). It parses a
 * frame exactly as OffloadKey::parse does, looks the key up in `flows`
 * (exact first, then under each mask in use: "Masked entries" below), and
 * on a hit applies the entry's program (stages
 * in program.rs order: VLAN, Ethernet addresses, ToS, TTL, IPv4 addresses,
 * L4 ports, with RFC 1624 incremental checksum updates following
 * offlow_datapath::execute rule for rule) and returns its verdict. Every
 * other frame goes up, unmodified: to the port's AF_XDP socket through
 * `xsks`, or to the kernel stack (AF_PACKET ports) with XDP_PASS.
 *
 * Invariants:
 * - A frame the program cannot parse, or that is outside the class, goes
 *   up untouched; it is never dropped. The only in-kernel drops are the
 *   entry's Drop verdict and a redirect to a port the switch has not
 *   mapped, each with its own counter in `stats`.
 * - A frame is either served completely or sent up untouched: every check
 *   that can fail (TTL expiry, headroom for a tag) runs before the first
 *   byte is written.
 * - Entries are indirect: `flows` maps a key to a slot of `progs`, and the
 *   slot's record carries the key it serves. A hash element can be reused
 *   by the kernel as soon as it is deleted or replaced, so a frame in
 *   flight could read another entry's slot number from it; the key check
 *   turns that into a miss. Userspace never rewrites a slot until a grace
 *   period after the last reference to it was removed (src/xdp/mod.rs), so
 *   a slot's record is stable for any frame that can read it.
 *
 * Masked entries: `masks` holds up to MAX_MASKS masks (a flow_key of bits
 * that must match; in_port, ip_proto and the VLAN fields always all ones).
 * On an exact miss the program ANDs the key with each mask in use, in slot
 * order, and looks the result up in the same `flows` map, with the key's
 * `pad` byte set to the slot's id (0: exact, i + 1: mask slot i), so an
 * exact key and a masked one never collide and a masked entry's record
 * carries the slot it was installed under (the stale check compares the
 * key looked up, id included). One map rather than a second hash for
 * masked keys: one room, one value layout and one stale check for both,
 * and the id byte was padding anyway. The first key found decides: a
 * masked hit serves the frame (the switch installs only masked entries
 * that decide alike, so which one does not matter), a stale one sends it
 * up, as an exact one does. Slots are written by userspace while no entry
 * carries their id, and a grace period passes before the first one is
 * published; a slot is cleared when its last entry is unlinked and reused
 * only after that removal's grace period (src/xdp/mod.rs `hold_mask`,
 * src/xdp/masks.rs). So a frame that reads a mask element while it is
 * being rewritten (an ARRAY element is copied in place: the read can be
 * torn) builds a key with an id no entry has yet, or any more, and
 * misses; and no such frame is still running when an entry with that id
 * appears. The lookup is one global function (find_entry), verified once:
 * verified_insns ~87k for the program, ~82k before masks (6.18).
 *
 * Partial checksums: a Linux sender with transmit checksum offload (a veth
 * peer, by default) leaves a TCP/UDP checksum CHECKSUM_PARTIAL: the field
 * holds only the folded pseudo-header sum, for the NIC to finish. The
 * userspace path learns that from the kernel (TP_STATUS_CSUM_NOTREADY)
 * and finishes it on receipt (offlow_io::csum::finish_partial); this
 * program sees only the bytes, and a frame it redirects or sends back
 * loses the skb state, so a frame served as received would reach its
 * receiver with a checksum the receiver drops. The program therefore
 * recognises a partial checksum by its value (the field equals the folded
 * pseudo-header sum: partial_csum() argues why a full checksum equal to
 * it by chance is harmless) and finishes it in the kernel: the sum over
 * the whole segment as it stands, field included, complemented (the
 * field already holds the pseudo-header's share), with bpf_csum_diff over
 * chunks of 512 and 64 bytes and the last < 64 bytes read here (l4_sum);
 * the entry's incremental updates then apply to the finished checksum,
 * exactly as the executor updates the checksum the AF_PACKET path
 * finished. Chosen over handing such frames to userspace because that
 * would not be enough: an AF_XDP port's socket cannot tell a partial
 * checksum either, and a frame steered to a worker's CPU reaches it
 * without the flag. The value is worked out before any write and written
 * by the stage that owns the L4 header, so the served-or-untouched
 * invariant holds; the cost falls only on partial frames (the check on
 * others is a few adds on the key's fields). Measured with
 * examples/prog_cost.rs (BPF_PROG_TEST_RUN, 2M runs, 2026-11-26, 6.18):
 * a hit with a full checksum 37-38 ns as before (+0-1 ns), a partial one
 * +14 ns for a 20-byte segment and +68 ns for 1480 bytes; `offlow bench
 * offload` (valid UDP checksums) unchanged within noise. The verifier's
 * work grows from ~14k to ~38k instructions (verified_insns; limit 1M;
 * blur() keeps l4_sum's paths from multiplying). A partial segment longer
 * than l4_sum reaches (CSUM_MAX_SEG, more than one page holds) goes up
 * untouched, counted as `up_csum_long`; every finished one bumps
 * `csum_finished`.
 *
 * Per-frame cost: the only hash lookup on the forwarding path is `flows`
 * (an exact match has no cheaper form), once for an exact hit and once
 * more per mask in use until one hits (a frame that misses everything
 * pays one per mask in use; a slot not in use costs an array read).
 * Measured with examples/prog_cost.rs (three rounds, 2026-11-27 06:48
 * UTC, 6.18, with the tunnel and TC code in; a VM whose hosts ran about
 * half as fast as the first measurement's): the test-run harness's own
 * floor (a frame on no port) 24-28 ns; each masked lookup adds ~28 ns;
 * an exact hit 97-102 ns with 0 or 1 mask in use, 101-133 with eight; a
 * masked hit 130-137 ns in the first slot, 344-363 ns in the eighth; a
 * miss 79-104 ns with no mask, 103-119 with one, 298-328 with eight
 * (tuple-space search: fewer, coarser masks are cheaper). The first
 * measurement (2026-11-26, before tunnels, a faster VM): exact hit 46-48,
 * masked 65 and 185, miss 35, 51, 167-170 ns; the ratios between paths
 * held. The port maps are arrays
 * (`rx_ports` by ifindex, `tx_ports` by a dense port index), and the
 * per-CPU arrays (`progs`, `counters`, `stats`) are inlined by the verifier.
 *
 * Tunnels (src/tunnel.rs, offlow_wire::tunnel): a port that carries
 * tunnels (`underlay` in its port_info) first asks whether a frame is
 * addressed to one of them, exactly as tunnel::classify does (untagged
 * IPv4 from an endpoint's remote to its local address, GRE or UDP to its
 * port: `tun_rx` with TM_ADDR). Such a frame is never an ordinary frame of
 * the port: it is decapsulated here or goes up untouched, where software
 * classifies it (and counts and drops what is malformed). Served are only
 * the plain sound shapes: an outer IPv4 header without options, with a
 * valid checksum, not a fragment, and no Ethernet padding behind it; GRE
 * with no flag but C and K, carrying Ethernet (TEB), its checksum (if any)
 * verified over the whole GRE packet with l4_sum() once an entry hits (a
 * miss goes up unsummed); VXLAN with UDP checksum 0 (the UDP checksum
 * covers the outer pseudo-header too: left to software) and the I flag. The key picks the tunnel as classify does (`tun_rx` holds
 * each endpoint's exact keys, the first endpoint of the configuration
 * winning, then `key=flow`); the inner frame's key (in_port the tunnel,
 * tunnel_id the key) is looked up, and only on a hit are the outer headers
 * stripped; a miss goes up still encapsulated. An entry whose output is a
 * tunnel pushes the outer headers Endpoint::encapsulate writes, from the
 * tunnel's template in `tun_tx` and the entry's key (the VXLAN source
 * port from the frame's addresses, as the software tier picks it; a GRE
 * checksum summed with l4_sum() over the packet built), and redirects to
 * the underlay. The IPv4 identification is a per-CPU counter
 * (`tun_ident`; atomic datagrams, DF set: RFC 6864 lets it be anything).
 * A decapsulated frame whose inner TCP/UDP checksum looks partial goes up
 * (`up_tunnel_partial`): nothing on a wire leaves it partial, and software
 * judges the odd one.
 *
 * Kernel: bounded loops (5.3), bpf_redirect_map with a
 * fallback action in the flags (5.6 for XSKMAP/DEVMAP lookups in the
 * helper), a global function taking the XDP context (5.6 or so: l4_sum),
 * one taking a pointer to a key on the caller's stack (5.12 or so:
 * find_entry), bpf_csum_diff in XDP (4.x); tested on 6.18.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_HLEN 14
#define TAG_LEN 4
#define IPV4_HLEN 20
/* Bytes of L4 every class frame has (the fast parser's fixed prefix). */
#define L4_MIN 8
#define TCP_HLEN 20
#define UDP_HLEN 8

#define ETH_P_IPV4 0x0800
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88a8
#define IPPROTO_ICMP_ 1
#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17
#define IPPROTO_GRE_ 47
#define IPPROTO_SCTP_ 132
#define VXLAN_PORT 4789
/* RFC 791 §3.1: MF flag and fragment offset. */
#define IP_MF_OFFSET 0x3fff
#define VLAN_DEI 0x1000

#define MAX_PORTS 256
/* Ingress interfaces with a smaller ifindex are found in the `rx_ports`
 * array; the rest (rare: busy hosts, many namespaces) in `rx_ports_far`. */
#define RX_DIRECT 4096
/* AF_XDP sockets of one port occupy `xsks[xsk_base .. xsk_base + 64]`. */
#define QUEUES_PER_PORT 64
#define MAX_XSKS (64 * QUEUES_PER_PORT)
#define MAX_WORKERS 64

/* Outcomes, one per-CPU counter each; src/xdp/stats.rs names them in this
 * order. */
enum stat {
	ST_HIT_DROP,          /* entry verdict Drop: dropped in the kernel */
	ST_HIT_PORT,          /* redirected out of another port */
	ST_HIT_IN_PORT,       /* sent back out of the ingress port (XDP_TX) */
	ST_HIT_CPU,           /* redirected to a worker's CPU */
	ST_MISS_NOT_PORT,     /* ingress interface is not a switch port */
	ST_MISS_NOT_CLASS,    /* outside the offloadable class */
	ST_MISS_NO_ENTRY,     /* in the class, no entry */
	ST_MISS_STALE,        /* a recycled hash element: slot of another key */
	ST_UP_TTL,            /* dec TTL would reach 0: up, untouched */
	ST_UP_NO_HEADROOM,    /* no room to insert a tag: up, untouched */
	ST_UP_NO_CPU,         /* no CPU for the steering mask: up */
	ST_UP_CPU_REDIRECT,   /* the cpumap refused the redirect: up */
	ST_DROP_NO_PORT,      /* output port not in tx_ports: dropped */
	ST_DROP_INTERNAL,     /* frame shrank under a rewrite (cannot happen) */
	ST_UP_XSK,            /* went up to the port's AF_XDP socket */
	ST_UP_PASS,           /* went up to the kernel stack */
	ST_UP_XSK_ABSENT,     /* AF_XDP port, no socket on that queue: stack */
	ST_CSUM_FINISHED,     /* a served frame's partial checksum finished
			       * (besides its hit_* outcome) */
	ST_UP_CSUM_LONG,      /* partial checksum, segment too long to finish
			       * here: up, untouched */
	ST_UP_TUNNEL,         /* addressed to a tunnel, not a shape served
			       * here or a key no tunnel takes: up, untouched */
	ST_UP_TUNNEL_PARTIAL, /* decapsulated frame's checksum looks partial:
			       * up, untouched */
	ST_TUNNEL_DECAP,      /* a served frame was decapsulated (besides its
			       * hit_* outcome) */
	ST_TUNNEL_ENCAP,      /* a served frame was encapsulated (besides its
			       * hit_* outcome) */
	ST_HIT_MASKED,        /* a served frame was served by a masked entry
			       * (besides its hit_* outcome) */
	NSTATS,
};

/* The exact-match key, a mirror of OffloadKey (src/xdp/layout.rs). Numbers
 * are host order; every byte is written before a lookup (padding is a named
 * field set to 0) so equal keys hash equally. */
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
	/* 0 for an exact key; i + 1 for a key masked by `masks` slot i
	 * (file header, "Masked entries"). */
	__u8 pad;
	/* The key a decapsulated frame arrived with (0 on other ports), as two
	 * words so that the struct keeps 4-byte alignment and no padding. */
	__u32 tunnel_id_lo;
	__u32 tunnel_id_hi;
};
_Static_assert(sizeof(struct flow_key) == 44, "flow_key layout");

/* Mask slots (`masks`); Capabilities::masks of the XDP backend. */
#define MAX_MASKS 8

/* A mask slot: the bits a key must match (1: must match; in_port,
 * ip_proto and the VLAN fields all ones, pad 0), and whether entries may
 * use it (0: the lookup skips the slot). */
struct flow_mask {
	struct flow_key bits;
	__u32 in_use;
};
_Static_assert(sizeof(struct flow_mask) == 48, "flow_mask layout");

/* Which optional stage fields are present (OffloadProgram's Options). */
#define F_ETH_SRC (1u << 0)
#define F_ETH_DST (1u << 1)
#define F_DSCP (1u << 2)
#define F_ECN (1u << 3)
#define F_IPV4_SRC (1u << 4)
#define F_IPV4_DST (1u << 5)
#define F_TP_SRC (1u << 6)
#define F_TP_DST (1u << 7)
#define F_VLAN_TPID (1u << 8)
#define F_VLAN_VID (1u << 9)
#define F_VLAN_PCP (1u << 10)
#define F_VLAN_CLEAR_DEI (1u << 11)

enum vlan_op { VLAN_KEEP, VLAN_STRIP, VLAN_WRITE };
enum ttl_op { TTL_KEEP, TTL_SET, TTL_DEC };
enum verdict { V_DROP, V_PORT, V_IN_PORT, V_CPU };

/* One entry's program (OffloadProgram) and the key it serves. */
struct flow_prog {
	struct flow_key key;
	__u32 counter;
	__u32 flags;
	__u32 verdict;
	/* The OpenFlow output port (for the outcome record) and its index in
	 * `tx_ports` (the redirect). */
	__u32 out_port;
	__u32 tx_index;
	__u64 cpu_mask;
	__u8 eth_src[6];
	__u8 eth_dst[6];
	__u32 ipv4_src;
	__u32 ipv4_dst;
	__u16 tp_src;
	__u16 tp_dst;
	__u16 vlan_tpid;
	__u16 vlan_vid;
	__u8 vlan_op;
	__u8 vlan_pcp;
	__u8 ttl_op;
	__u8 ttl;
	__u8 dscp;
	__u8 ecn;
	/* Output to a tunnel: the template's index + 1 in `tun_tx` (0: no
	 * encapsulation; `tx_index` is then the underlay's), and the GRE key /
	 * VNI sent. */
	__u16 pad2;
	__u32 tun_slot;
	__u32 tun_key;
	__u32 pad1;
};
_Static_assert(sizeof(struct flow_prog) == 120, "flow_prog layout");

struct entry_counters {
	__u64 packets;
	__u64 bytes;
};

/* A switch port, by ingress ifindex. */
struct port_info {
	__u32 ofport;
	/* 1: misses go to the AF_XDP socket of the receive queue. */
	__u32 xsk;
	__u32 xsk_base;
	/* 1: a switch port (an `rx_ports` array element always exists). */
	__u32 present;
	/* 1: tunnels ride on this port: look for their frames. */
	__u32 underlay;
};

/* What a `tun_rx` key matches (src/xdp/mod.rs fills the map). */
enum tun_match {
	TM_ADDR,   /* the addresses and protocol of some tunnel */
	TM_NO_KEY, /* a GRE frame without a key field */
	TM_KEY,    /* this key (GRE key, VXLAN VNI) */
	TM_FLOW,   /* a key=flow tunnel: any key */
};

/* Received tunnel frames, by underlay and outer addresses. Numbers are
 * host order; every byte is written before a lookup. */
struct tun_rx_key {
	__u32 underlay;  /* OpenFlow port */
	__u32 local_ip;  /* outer destination */
	__u32 remote_ip; /* outer source */
	__u32 key;       /* TM_KEY's key; 0 otherwise */
	__u16 udp_port;  /* VXLAN: the UDP destination port; GRE: 0 */
	__u8 proto;      /* IPPROTO_GRE_ or IPPROTO_UDP_ */
	__u8 sel;        /* enum tun_match: what the key selects */
};
_Static_assert(sizeof(struct tun_rx_key) == 20, "tun_rx_key layout");

#define TK_GRE 0
#define TK_VXLAN 1

/* A tunnel's outer headers, less what each frame fills in. */
struct tun_tx {
	__u8 eth_dst[6]; /* the next hop toward remote_ip */
	__u8 eth_src[6];
	__u32 local_ip;  /* host order */
	__u32 remote_ip;
	__u16 udp_dst;   /* VXLAN */
	__u8 kind;       /* TK_GRE, TK_VXLAN */
	__u8 gre_key;    /* GRE: 1 if frames carry the K flag and key */
	__u8 tos;
	__u8 ttl;
	__u8 gre_csum;   /* GRE: 1 if frames carry the C flag and checksum */
	__u8 pad;
};
_Static_assert(sizeof(struct tun_tx) == 28, "tun_tx layout");

#define MAX_TUNNELS 256
#define VXLAN_HLEN 8
#define GRE_HLEN 4
#define GRE_P_TEB 0x6558
#define GRE_FLAG_K 0x2000
#define GRE_FLAG_C 0x8000
#define VXLAN_FLAG_I 0x08
#define IP_DF 0x4000
/* The outer headers a served tunnel frame has: Ethernet, IPv4 (no
 * options), then GRE with or without a checksum and a key (4 bytes each),
 * or UDP and VXLAN (the longest). */
#define TUN_GRE_LEN (ETH_HLEN + IPV4_HLEN + GRE_HLEN)
#define TUN_VXLAN_LEN (ETH_HLEN + IPV4_HLEN + UDP_HLEN + VXLAN_HLEN)
/* The outer L4 header's offset (GRE's checksum covers from here on). */
#define TUN_L4 (ETH_HLEN + IPV4_HLEN)

/* What the last frame on this CPU did (tests only: `debug_record`). */
struct debug_rec {
	__u32 seen;
	__u32 stat;
	/* The OpenFlow port of a redirect, the CPU of a steer, the XSKMAP key
	 * of a miss to a socket. */
	__u32 target;
	/* For a frame outside the class: the line of parse() that declined. */
	__u32 why;
};

/* Set at load time by tests: record each frame's outcome in `debug`.
 * Read-only data, so the verifier removes the recording when it is 0. */
const volatile __u32 debug_record = 0;

/* Sizes marked "set at open" are overridden by src/xdp/mod.rs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); /* set at open: room */
	__type(key, struct flow_key);
	__type(value, __u32);
} flows SEC(".maps");

/* The masks of masked entries, by slot (file header). An ARRAY: read by
 * every exact miss, inlined by the verifier to a bounds check and an add. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_MASKS);
	__type(key, __u32);
	__type(value, struct flow_mask);
} masks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2048); /* set at open: 2 * room */
	__type(key, __u32);
	__type(value, struct flow_prog);
} progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1024); /* set at open: room */
	__type(key, __u32);
	__type(value, struct entry_counters);
} counters SEC(".maps");

/* Ports by ingress ifindex, for every frame: an ARRAY (the verifier
 * inlines its lookup to a bounds check and an add) for ifindex <
 * RX_DIRECT, 64 KiB; a HASH for the rest. An array element that is not a
 * port has `present` 0. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RX_DIRECT);
	__type(key, __u32);
	__type(value, struct port_info);
} rx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port_info);
} rx_ports_far SEC(".maps");

/* Output interfaces by the dense port index src/xdp/mod.rs assigns (the
 * port's position in the configuration; a program record carries it as
 * `tx_index`): a DEVMAP, which bpf_redirect_map indexes directly, where a
 * DEVMAP_HASH keyed by OpenFlow port would hash every frame. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_XSKS);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, 1); /* set at open: possible CPUs */
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} cpus SEC(".maps");

/* Worker index -> CPU + 1 (0: no CPU). Written only after `cpus` holds
 * that CPU, so a non-zero value means the cpumap entry exists. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_WORKERS);
	__type(key, __u32);
	__type(value, __u32);
} worker_cpu SEC(".maps");

/* Tunnels by received outer headers -> the tunnel's OpenFlow port. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4 * MAX_TUNNELS);
	__type(key, struct tun_rx_key);
	__type(value, __u32);
} tun_rx SEC(".maps");

/* Outer header templates, by tunnel index (a program's tun_slot - 1). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TUNNELS);
	__type(key, __u32);
	__type(value, struct tun_tx);
} tun_tx SEC(".maps");

/* The next outer IPv4 identification, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} tun_ident SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NSTATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct debug_rec);
} debug SEC(".maps");

/* A grace period when membarrier(MEMBARRIER_CMD_GLOBAL) is unavailable
 * (nohz_full): updating a map-in-map element from the syscall makes the
 * kernel wait for running programs (maybe_wait_bpf_programs). */
struct gp_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} gp_inner SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct gp_inner);
} gp_outer SEC(".maps");

static __always_inline void count(__u32 st, __u32 target)
{
	__u64 *c = bpf_map_lookup_elem(&stats, &st);

	if (c)
		*c += 1;
	if (debug_record) {
		__u32 zero = 0;
		struct debug_rec *d = bpf_map_lookup_elem(&debug, &zero);

		if (d) {
			d->seen = 1;
			if (st == ST_MISS_NOT_CLASS || st == ST_UP_TUNNEL) {
				d->why = target;
			} else {
				d->stat = st;
				d->target = target;
			}
		}
	}
}

/* Bump a counter that is not the frame's outcome (the debug record keeps
 * the outcome). */
static __always_inline void bump(__u32 st)
{
	__u64 *c = bpf_map_lookup_elem(&stats, &st);

	if (c)
		*c += 1;
}

/* The miss verdict of the port: its AF_XDP socket for this receive queue,
 * or the kernel stack. */
static __always_inline int up(struct xdp_md *ctx, const struct port_info *pi)
{
	if (pi && pi->xsk) {
		__u32 q = ctx->rx_queue_index;

		if (q < QUEUES_PER_PORT) {
			__u32 k = pi->xsk_base + q;
			/* XDP_PASS when the slot holds no socket (5.6). */
			int rc = bpf_redirect_map(&xsks, k, XDP_PASS);

			if (rc == XDP_REDIRECT) {
				count(ST_UP_XSK, k);
				return rc;
			}
		}
		count(ST_UP_XSK_ABSENT, 0);
		return XDP_PASS;
	}
	count(ST_UP_PASS, 0);
	return XDP_PASS;
}

static __always_inline __u16 rd16(const void *p)
{
	const __u8 *b = p;

	return ((__u16)b[0] << 8) | b[1];
}

static __always_inline void wr16(void *p, __u16 v)
{
	__u8 *b = p;

	b[0] = v >> 8;
	b[1] = v & 0xff;
}

/* Folded one's-complement sum: two folds reduce any 32-bit value. */
static __always_inline __u16 fold(__u32 acc)
{
	acc = (acc & 0xffff) + (acc >> 16);
	acc = (acc & 0xffff) + (acc >> 16);
	return acc;
}

/* RFC 1624 eqn. 3, HC' = ~(~HC + ~m + m'): offlow_wire::checksum::update16. */
static __always_inline __u16 update16(__u16 hc, __u16 old, __u16 new)
{
	__u32 acc = (__u16)~hc + (__u16)~old + (__u32) new;

	return ~fold(acc);
}

/* The folded sum of an address's two words (checksum::sum_array). */
static __always_inline __u16 sum32(__u32 a)
{
	return fold((a >> 16) + (a & 0xffff));
}

/* Write a transport checksum computed by update (execute.rs csum_write):
 * UDP's stored 0 means "none" and stays 0 (RFC 768), a computed 0 is sent
 * as 0xffff. */
static __always_inline void csum_write(__u8 *at, int udp, __u16 c)
{
	if (udp) {
		if (rd16(at) == 0)
			return;
		if (c == 0)
			c = 0xffff;
	}
	wr16(at, c);
}

struct parsed {
	struct flow_key key;
	__u32 l3; /* 14 or 18, from the frame's start */
	__u32 len;
	__u32 seg; /* L4 bytes by the IPv4 total length */
};

/* Parse exactly the offloadable class (key.rs; extract_fast.rs is the
 * reference) in the frame that starts `base` bytes into the packet (0, or
 * the inner frame of a tunnel frame: at most TUN_VXLAN_LEN; the frame runs
 * to the packet's end). `data`..`data_end` are the bytes the program can
 * read directly, `pkt_len` the packet's whole length from `data`: the
 * same for an XDP frame (one buffer), more for a socket buffer whose
 * payload is in pages (the TC hook; the headers parsed here are always in
 * its linear part, or the frame goes up). Returns 0, or for a frame
 * outside the class the source line of the check that declined it (the
 * debug record's target). */
static __always_inline int parse(void *data, void *data_end, __u32 pkt_len, struct parsed *p,
				 __u32 base)
{
	__u32 l3;

	if (base > TUN_VXLAN_LEN || pkt_len < base)
		return __LINE__;
	__u8 *h = data + base;

	/* The shortest class frame: untagged IPv4 + 8 bytes of L4. */
	if ((void *)(h + ETH_HLEN + IPV4_HLEN + L4_MIN) > data_end)
		return __LINE__;
	__u16 etype = rd16(h + 12);

	if (etype == ETH_P_IPV4) {
		l3 = ETH_HLEN;
	} else if (etype == ETH_P_8021Q || etype == ETH_P_8021AD) {
		if ((void *)(h + ETH_HLEN + TAG_LEN + IPV4_HLEN + L4_MIN) > data_end)
			return __LINE__;
		/* A second tag (QinQ) or anything but IPv4 behind the tag is
		 * outside the class. */
		if (rd16(h + 16) != ETH_P_IPV4)
			return __LINE__;
		l3 = ETH_HLEN + TAG_LEN;
		__u16 tci = rd16(h + 14);

		p->key.vlan_present = 1;
		p->key.vlan_vid = tci & 0x0fff;
		p->key.vlan_pcp = tci >> 13;
	} else {
		return __LINE__;
	}
	__u8 *ip = h + l3;

	if ((void *)(ip + IPV4_HLEN + L4_MIN) > data_end)
		return __LINE__;
	/* Version 4, IHL 5: no options. */
	if (ip[0] != 0x45)
		return __LINE__;
	/* RFC 791 §3.1: MF or a non-zero offset makes a fragment. */
	if (rd16(ip + 6) & IP_MF_OFFSET)
		return __LINE__;
	__u32 len = pkt_len - base;
	__u32 total = rd16(ip + 2);

	/* Inside the frame and at least the header (the general parser's
	 * payload_truncated and bad_ipv4_total_len). */
	if (total > len - l3 || total < IPV4_HLEN)
		return __LINE__;
	__u32 seg = total - IPV4_HLEN;
	__u8 *l4 = ip + IPV4_HLEN;
	__u8 proto = ip[9];

	switch (proto) {
	case IPPROTO_TCP_:
		if (seg < TCP_HLEN)
			return __LINE__;
		/* Implied by total <= len - l3; the verifier wants it said. */
		if ((void *)(l4 + TCP_HLEN) > data_end)
			return __LINE__;
		if ((l4[12] >> 4) < 5)
			return __LINE__;
		p->key.tp_src = rd16(l4);
		p->key.tp_dst = rd16(l4 + 2);
		break;
	case IPPROTO_UDP_:
		if (seg < UDP_HLEN || rd16(l4 + 2) == VXLAN_PORT)
			return __LINE__;
		p->key.tp_src = rd16(l4);
		p->key.tp_dst = rd16(l4 + 2);
		break;
	case IPPROTO_ICMP_:
		if (seg < L4_MIN)
			return __LINE__;
		p->key.tp_src = l4[0];
		p->key.tp_dst = l4[1];
		break;
	case IPPROTO_SCTP_:
	case IPPROTO_GRE_:
		return __LINE__;
	default:
		break;
	}
	p->key.ip_proto = proto;
	p->key.ip_dscp = ip[1] >> 2;
	p->key.ip_ecn = ip[1] & 3;
	p->key.ipv4_src = ((__u32)rd16(ip + 12) << 16) | rd16(ip + 14);
	p->key.ipv4_dst = ((__u32)rd16(ip + 16) << 16) | rd16(ip + 18);
	__builtin_memcpy(p->key.eth_dst, h, 6);
	__builtin_memcpy(p->key.eth_src, h + 6, 6);
	p->l3 = l3;
	p->len = len;
	p->seg = seg;
	return 0;
}

/* Partial transport checksums (the header says why they are finished
 * here). bpf_csum_diff sums at most 512 bytes a call (its scratch buffer up
 * to 6.11); whole chunks of 512, then of 64, go through it, the last < 64
 * bytes are read here. CSUM_MAX_SEG is what the loops reach: 8 * 512 +
 * 7 * 64 + 15 * 4 + 3 bytes, more than a frame in one page (what native
 * XDP hands a program without frags) can hold. */
#define CSUM_CHUNK 512
#define CSUM_CHUNKS 8
#define CSUM_SMALL 64
#define CSUM_MAX_SEG (CSUM_CHUNKS * CSUM_CHUNK + CSUM_CHUNK - 1)
/* partial_csum()'s answers besides a checksum (0..0xffff). */
#define CSUM_NOT_PARTIAL (-1)
#define CSUM_TOO_LONG (-2)

/* `off` (<= seg), as the verifier will see it: a value in 0..8191 rather
 * than the constant it tracked along one path. Each loop of l4_sum exits
 * at one of up to 16 constant offsets; blurred, those exits are one state
 * for what follows instead of multiplying its paths (the whole program's
 * verified_insns: ~139k without this, ~38k with it). seg - (seg - off) is
 * off, and off <= seg <= CSUM_MAX_SEG < 8192, so the mask is a no-op; the
 * empty asm keeps clang from simplifying it all back to off. */
static __always_inline __u32 blur(__u32 seg, __u32 off)
{
	__u32 rem = seg - off;

	asm volatile("" : "+r"(rem));
	return (seg - rem) & 0x1fff;
}

/* The folded one's-complement sum, as big-endian words, of the `seg` bytes
 * at `l4off` (an L4 segment: 34 or 38); -1 if that is more than
 * CSUM_MAX_SEG bytes or (cannot happen after parse()) not inside the
 * frame. A global function, so the verifier checks it once on its own
 * rather than once per path of the caller; its paths multiply (one per
 * number of chunks of each size), the caller's do not. */
__attribute__((noinline)) int l4_sum(struct xdp_md *ctx, __u32 l4off, __u32 seg)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	/* bpf_csum_diff's running sum: 16-bit words as the host loads them. */
	__u32 mem = 0;
	/* Words read here, big-endian. */
	__u32 be = 0;
	__u32 off = 0;

	if (l4off > ETH_HLEN + TAG_LEN + IPV4_HLEN || seg > CSUM_MAX_SEG)
		return -1;
	/* The verifier checks a global function's arguments as unknown, and
	 * clang may test one copy of an argument and use another: a mask on
	 * the copy used bounds it for the verifier (a no-op after the test
	 * above; the empty asm keeps clang from dropping it as one). */
	asm volatile("" : "+r"(l4off));
	asm volatile("" : "+r"(seg));
	l4off &= 63;
	seg &= 0x1fff;
	__u8 *l4 = data + l4off;

	for (int i = 0; i < CSUM_CHUNKS; i++) {
		if (seg - off < CSUM_CHUNK)
			break;
		__u8 *c = l4 + off;

		if ((void *)(c + CSUM_CHUNK) > data_end)
			return -1;
		mem = bpf_csum_diff(0, 0, (__be32 *)c, CSUM_CHUNK, mem);
		off += CSUM_CHUNK;
	}
	/* seg - off < 512 here (seg <= CSUM_MAX_SEG). */
	off = blur(seg, off);
	for (int i = 0; i < CSUM_CHUNK / CSUM_SMALL - 1; i++) {
		if (seg - off < CSUM_SMALL)
			break;
		__u8 *c = l4 + off;

		if ((void *)(c + CSUM_SMALL) > data_end)
			return -1;
		mem = bpf_csum_diff(0, 0, (__be32 *)c, CSUM_SMALL, mem);
		off += CSUM_SMALL;
	}
	/* seg - off < 64: words of 4, then 0-3 bytes. 15 * 2 + 2 words of at
	 * most 0xffff cannot overflow `be`. */
	off = blur(seg, off);
	for (int i = 0; i < CSUM_SMALL / 4 - 1; i++) {
		if (seg - off < 4)
			break;
		__u8 *c = l4 + off;

		if ((void *)(c + 4) > data_end)
			return -1;
		be += rd16(c) + rd16(c + 2);
		off += 4;
	}
	off = blur(seg, off);
	__u32 rem = seg - off;
	__u8 *c = l4 + off;

	if (rem >= 2) {
		if ((void *)(c + 2) > data_end)
			return -1;
		be += rd16(c);
		c += 2;
		rem -= 2;
	}
	if (rem) {
		if ((void *)(c + 1) > data_end)
			return -1;
		/* RFC 1071: an odd last byte is padded with a zero byte. */
		be += (__u32)c[0] << 8;
	}
	/* A one's-complement sum of byte-swapped words is the byte-swapped
	 * sum (RFC 1071 §2(B)): bpf_ntohs turns the host-order sum into the
	 * big-endian one, whichever the host is. Whether the helper folds
	 * (6.12 on) or not, fold() finishes it. */
	return fold(be + bpf_ntohs(fold(mem)));
}

/* Whether the TCP/UDP checksum field of the frame `p` describes (parsed at
 * `base`) holds its folded pseudo-header sum: a partial checksum (see
 * partial_csum()). Reads only. */
static __always_inline int looks_partial(struct xdp_md *ctx, const struct parsed *p, __u32 base)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3;
	__u8 proto = p->key.ip_proto;
	int udp = proto == IPPROTO_UDP_;

	if (proto != IPPROTO_TCP_ && !udp)
		return 0;
	if ((l3 != ETH_HLEN && l3 != ETH_HLEN + TAG_LEN) || base > TUN_VXLAN_LEN)
		return 0;
	__u8 *ip = data + base + l3;

	__u8 *l4 = ip + IPV4_HLEN;
	__u16 field;

	/* parse() checked the whole TCP or UDP header is there. */
	if (udp) {
		if ((void *)(l4 + UDP_HLEN) > data_end)
			return 0;
		field = rd16(l4 + 6);
		if (field == 0)
			return 0;
	} else {
		if ((void *)(l4 + TCP_HLEN) > data_end)
			return 0;
		field = rd16(l4 + 16);
	}
	__u32 src = p->key.ipv4_src, dst = p->key.ipv4_dst;
	__u32 pseudo = (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + proto + p->seg;

	return field == fold(pseudo);
}

/* Whether the TCP/UDP checksum of the frame `p` describes is partial and,
 * if it is, the finished value to write (0..0xffff); CSUM_NOT_PARTIAL, or
 * CSUM_TOO_LONG for a partial checksum whose segment l4_sum() does not
 * reach. Reads only.
 *
 * Partial means: the field equals the folded pseudo-header sum (source,
 * destination, protocol, L4 length by the IPv4 header), which is what a
 * Linux sender with CHECKSUM_PARTIAL leaves there (tcp_v4_send_check,
 * udp4_hwcsum: `check = ~csum_tcpudp_magic(saddr, daddr, len, proto, 0)`).
 * A complete checksum can equal it by chance (1 in 65536 frames), and is
 * then "finished" too, harmlessly: finishing writes ~fold(S + field),
 * where S is the sum over the segment with the field zeroed, and the
 * correct checksum is ~fold(S + pseudo) = ~fold(S + field) when field ==
 * fold(pseudo). So a frame whose field equals the pseudo-header sum leaves
 * with the correct checksum whether it was partial or complete (and a
 * complete one keeps its value). The one frame this misjudges is a
 * *corrupted* complete one whose stale checksum happens to equal its
 * pseudo-header sum: it would leave with a checksum that covers the
 * corruption. On a veth nothing corrupts a frame in flight; on a NIC the
 * Ethernet FCS catches it first; what passes both is then 1 in 65536 of
 * that.
 *
 * UDP's 0 means "no checksum" (RFC 768) and is never partial (a folded
 * pseudo-header sum is never 0: the protocol term is non-zero). The
 * result is what offlow_io::csum::finish_partial writes on the AF_PACKET
 * path: both are ~fold() of the same sum, and fold() of a non-zero sum is
 * 1..0xffff either way, so the two agree to the bit; UDP sends a computed
 * 0 as 0xffff. */
static __always_inline int partial_csum(struct xdp_md *ctx, const struct parsed *p)
{
	if (!looks_partial(ctx, p, 0))
		return CSUM_NOT_PARTIAL;
	__u32 l3 = p->l3;
	int udp = p->key.ip_proto == IPPROTO_UDP_;
	int s = l4_sum(ctx, l3 + IPV4_HLEN, p->seg);

	if (s < 0)
		return CSUM_TOO_LONG;
	/* The field holds the pseudo-header sum, so the sum over the segment
	 * as it stands is the whole checksum sum. */
	__u16 c = ~(__u16)s;

	if (udp && c == 0)
		c = 0xffff;
	return c;
}

/* Count `packets` frames of `len` bytes in all (as received) the entry
 * serves; a masked entry's key carries its slot id, so its frames are
 * counted as such too. */
static __always_inline void served_n(const struct flow_prog *pr, __u32 packets, __u32 len)
{
	struct entry_counters *c = bpf_map_lookup_elem(&counters, &pr->counter);

	if (c) {
		c->packets += packets;
		c->bytes += len;
	}
	if (pr->key.pad)
		bump(ST_HIT_MASKED);
}

/* Count one frame of `len` bytes the entry serves. */
static __always_inline void served(const struct flow_prog *pr, __u32 len)
{
	served_n(pr, 1, len);
}

static __always_inline int key_eq(const struct flow_key *a, const struct flow_key *b)
{
	const __u32 *x = (const __u32 *)a;
	const __u32 *y = (const __u32 *)b;
	__u32 diff = 0;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(struct flow_key) / 4); i++)
		diff |= x[i] ^ y[i];
	return diff == 0;
}

/* find_entry()'s answers besides a slot (a slot is below 2 * room <=
 * 2^32 - 2: src/xdp/mod.rs caps the room). */
#define NO_SLOT 0xffffffffu
#define STALE_SLOT 0xfffffffeu

/* The `progs` slot of `k` exactly as it stands (its pad the mask slot id):
 * NO_SLOT if `flows` has no such key, STALE_SLOT if it has but the slot it
 * named holds another key's record (a recycled element: file header). */
static __always_inline __u32 lookup(const struct flow_key *k)
{
	__u32 *slot = bpf_map_lookup_elem(&flows, k);

	if (!slot)
		return NO_SLOT;
	/* One load: the element may be recycled under us (file header). */
	__u32 s = *(volatile __u32 *)slot;
	struct flow_prog *pr = bpf_map_lookup_elem(&progs, &s);

	if (!pr || !key_eq(&pr->key, k))
		return STALE_SLOT;
	return s;
}

/* The `progs` slot of the entry that serves the frame's key `k` (pad 0):
 * the exact key first, then `k` under each mask in use, in slot order,
 * with the slot's id (file header); the first key `flows` has decides,
 * stale or not. The record was checked against the key looked up here,
 * and a slot is not rewritten while a frame can hold its number, so the
 * caller's own read of it finds the same record.
 *
 * A global function, so the verifier checks it once on its own: inlined,
 * with the looked-up key a second copy on the caller's stack, the rest of
 * the program was verified from more distinct states (~130k verified_insns
 * for the whole program instead of ~87k; ~82k before masks). */
__attribute__((noinline)) __u32 find_entry(const struct flow_key *k)
{
	if (!k)
		return NO_SLOT;
	__u32 s = lookup(k);

	if (s != NO_SLOT)
		return s;
	struct flow_key mk;

	/* Unrolled: MAX_MASKS rounds of a few dozen instructions. */
#pragma unroll
	for (__u32 i = 0; i < MAX_MASKS; i++) {
		__u32 at = i;
		struct flow_mask *m = bpf_map_lookup_elem(&masks, &at);

		if (!m || !m->in_use)
			continue;
		const __u32 *x = (const __u32 *)k;
		const __u32 *y = (const __u32 *)&m->bits;
		__u32 *z = (__u32 *)&mk;

#pragma unroll
		for (int w = 0; w < (int)(sizeof(struct flow_key) / 4); w++)
			z[w] = x[w] & y[w];
		mk.pad = i + 1;
		s = lookup(&mk);
		if (s != NO_SLOT)
			return s;
	}
	return NO_SLOT;
}

/* The VLAN stage. Returns the new L3 offset; -1 when the frame must go up
 * untouched (nothing has been written); -2 when the frame changed under
 * the stage (cannot happen: adjust_head keeps the bytes it did not cut). */
static __always_inline int vlan_stage(struct xdp_md *ctx, const struct flow_prog *pr,
				      int tagged)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 macs[12];

	if (pr->vlan_op == VLAN_STRIP) {
		if (!tagged)
			return ETH_HLEN;
		if (data + ETH_HLEN + TAG_LEN > data_end)
			return -1;
		__builtin_memcpy(macs, data, 12);
		/* Only fails for a frame shorter than a header: nothing written. */
		if (bpf_xdp_adjust_head(ctx, TAG_LEN))
			return -1;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + 12 > data_end)
			return -2;
		__builtin_memcpy(data, macs, 12);
		return ETH_HLEN;
	}
	if (pr->vlan_op != VLAN_WRITE)
		return tagged ? ETH_HLEN + TAG_LEN : ETH_HLEN;
	if (tagged) {
		/* Rewrite the frame's own tag in place (set-field keeps the
		 * DEI bit; a pushed copy clears it). */
		if (data + ETH_HLEN + TAG_LEN > data_end)
			return -1;
		__u8 *t = data + 12;
		__u16 tci = rd16(t + 2);

		if (pr->flags & F_VLAN_CLEAR_DEI)
			tci &= ~VLAN_DEI;
		if (pr->flags & F_VLAN_VID)
			tci = (tci & 0xf000) | (pr->vlan_vid & 0x0fff);
		if (pr->flags & F_VLAN_PCP)
			tci = (tci & 0x1fff) | ((__u16)(pr->vlan_pcp & 7) << 13);
		if (pr->flags & F_VLAN_TPID)
			wr16(t, pr->vlan_tpid);
		wr16(t + 2, tci);
		return ETH_HLEN + TAG_LEN;
	}
	/* Insert a tag behind the MAC addresses: TPID, VID, PCP as given
	 * (0x8100, 0, 0 if absent), DEI 0 (a push on an untagged frame
	 * writes TCI 0 before the set-fields). */
	/* Fails without headroom (XDP guarantees 256 bytes): nothing written. */
	if (bpf_xdp_adjust_head(ctx, -TAG_LEN))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + ETH_HLEN + TAG_LEN > data_end)
		return -2;
	__u8 *f = data;

	__builtin_memcpy(macs, f + TAG_LEN, 12);
	__builtin_memcpy(f, macs, 12);
	__u16 tci = 0;

	if (pr->flags & F_VLAN_VID)
		tci |= pr->vlan_vid & 0x0fff;
	if (pr->flags & F_VLAN_PCP)
		tci |= (__u16)(pr->vlan_pcp & 7) << 13;
	wr16(f + 12, (pr->flags & F_VLAN_TPID) ? pr->vlan_tpid : ETH_P_8021Q);
	wr16(f + 14, tci);
	return ETH_HLEN + TAG_LEN;
}

/* Rewrite one 16-bit word of the IPv4 header, updating its checksum
 * (execute.rs ipv4_word). */
static __always_inline void ipv4_word(__u8 *ip, __u32 at, __u16 new)
{
	__u16 old = rd16(ip + at);

	wr16(ip + 10, update16(rd16(ip + 10), old, new));
	wr16(ip + at, new);
}

/* Set an IPv4 address at `ip + at`, folding the change into the header
 * checksum and the TCP/UDP pseudo-header (execute.rs set_field). */
static __always_inline void set_addr(__u8 *ip, __u32 at, __u32 new, __u8 *l4csum, int udp)
{
	__u32 old = ((__u32)rd16(ip + at) << 16) | rd16(ip + at + 2);
	__u16 o = sum32(old), n = sum32(new);

	wr16(ip + 10, update16(rd16(ip + 10), o, n));
	if (l4csum)
		csum_write(l4csum, udp, update16(rd16(l4csum), o, n));
	wr16(ip + at, new >> 16);
	wr16(ip + at + 2, new & 0xffff);
}

/* Set a TCP/UDP port, updating the transport checksum (execute.rs l4_word). */
static __always_inline void set_port(__u8 *at, __u16 new, __u8 *l4csum, int udp)
{
	__u16 old = rd16(at);

	csum_write(l4csum, udp, update16(rd16(l4csum), old, new));
	wr16(at, new);
}

/* The L3/L4 stages, on the frame with its IPv4 header at `l3`; `finished`
 * is partial_csum()'s answer, written before the incremental updates (as
 * the AF_PACKET path finishes a checksum on receipt, before the actions)
 * when it is a checksum. Returns 0,
 * or -1 if the frame is shorter than the parse said (cannot happen: the
 * VLAN stage moves the headers by exactly one tag). */
static __always_inline int l3_stages(struct xdp_md *ctx, const struct flow_prog *pr, int l3,
				     int finished)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (l3 != ETH_HLEN && l3 != ETH_HLEN + TAG_LEN)
		return -1;
	__u8 *f = data;

	if (data + 12 > data_end)
		return -1;
	if (pr->flags & F_ETH_SRC)
		__builtin_memcpy(f + 6, pr->eth_src, 6);
	if (pr->flags & F_ETH_DST)
		__builtin_memcpy(f, pr->eth_dst, 6);

	__u8 *ip = f + l3;

	/* The class guarantees 20 + 8 bytes behind `l3`. */
	if ((void *)(ip + IPV4_HLEN + L4_MIN) > data_end)
		return -1;
	if (pr->flags & (F_DSCP | F_ECN)) {
		__u8 tos = ip[1];

		if (pr->flags & F_DSCP)
			tos = (tos & 0x03) | (pr->dscp << 2);
		if (pr->flags & F_ECN)
			tos = (tos & 0xfc) | (pr->ecn & 3);
		ipv4_word(ip, 0, (rd16(ip) & 0xff00) | tos);
	}
	if (pr->ttl_op == TTL_SET)
		ipv4_word(ip, 8, (rd16(ip + 8) & 0x00ff) | ((__u16)pr->ttl << 8));
	else if (pr->ttl_op == TTL_DEC)
		/* TTL >= 2 was checked before any write. */
		ipv4_word(ip, 8, rd16(ip + 8) - 0x0100);

	__u8 *l4 = ip + IPV4_HLEN;
	__u8 *l4csum = 0;
	int udp = 0;

	if (pr->key.ip_proto == IPPROTO_TCP_) {
		if ((void *)(l4 + TCP_HLEN) > data_end)
			return -1;
		l4csum = l4 + 16;
	} else if (pr->key.ip_proto == IPPROTO_UDP_) {
		if ((void *)(l4 + UDP_HLEN) > data_end)
			return -1;
		l4csum = l4 + 6;
		udp = 1;
	}
	if (finished >= 0 && l4csum)
		wr16(l4csum, finished);
	if (pr->flags & F_IPV4_SRC)
		set_addr(ip, 12, pr->ipv4_src, l4csum, udp);
	if (pr->flags & F_IPV4_DST)
		set_addr(ip, 16, pr->ipv4_dst, l4csum, udp);
	if (l4csum) {
		if (pr->flags & F_TP_SRC)
			set_port(l4, pr->tp_src, l4csum, udp);
		if (pr->flags & F_TP_DST)
			set_port(l4 + 2, pr->tp_dst, l4csum, udp);
	}
	return 0;
}

/* Pick a worker of `mask` for this flow (a flow stays on one worker),
 * and its CPU + 1; 0 when none is configured. */
static __always_inline __u32 pick_cpu(const struct flow_key *k, __u64 mask)
{
	__u32 h = k->ipv4_src ^ k->ipv4_dst ^ ((__u32)k->tp_src << 16 | k->tp_dst) ^ k->ip_proto;

	h ^= h >> 16;
	h ^= h >> 8;
	__u32 start = h & 63;

	for (__u32 i = 0; i < 64; i++) {
		__u32 w = (start + i) & 63;

		if ((mask >> w) & 1) {
			__u32 *cpu = bpf_map_lookup_elem(&worker_cpu, &w);

			return cpu ? *cpu : 0;
		}
	}
	return 0;
}

/* The port received on, or NULL. */
static __always_inline struct port_info *rx_port(__u32 ifindex)
{
	struct port_info *pi;

	if (ifindex < RX_DIRECT) {
		pi = bpf_map_lookup_elem(&rx_ports, &ifindex);
		return pi && pi->present ? pi : 0;
	}
	return bpf_map_lookup_elem(&rx_ports_far, &ifindex);
}

/* A received frame's tunnel (tunnel_rx()). */
struct tun_frame {
	__u64 id;     /* its key: the inner frame's tunnel_id */
	__u32 ofport; /* the tunnel's OpenFlow port */
	__u32 inner;  /* where the inner frame starts */
	__u32 seg;    /* GRE with a checksum: the bytes it covers; else 0 */
};

#define TUN_NONE 0  /* not addressed to a tunnel: an ordinary frame */
#define TUN_DECAP 1 /* a tunnel's frame, of a shape served here */
#define TUN_UP 2    /* a tunnel's frame that goes up untouched */

static __always_inline __u32 rd32(const __u8 *b)
{
	return ((__u32)rd16(b) << 16) | rd16(b + 2);
}

static __always_inline void wr32(__u8 *b, __u32 v)
{
	wr16(b, v >> 16);
	wr16(b + 2, v & 0xffff);
}

/* Is the frame received on underlay `pi` addressed to one of its tunnels
 * (tunnel::classify's test), and if so, is it one this program
 * decapsulates (the file header lists the shapes)? TUN_DECAP fills `t`;
 * TUN_UP sets `why` to the line of the check that sent it up. Reads only. */
static __always_inline int tunnel_rx(struct xdp_md *ctx, const struct port_info *pi,
				     struct tun_frame *t, __u32 *why)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *h = data;
	struct tun_rx_key k;

	/* Untagged IPv4; an option-less header whose first 8 bytes of payload
	 * are there. Any other frame classify might call a tunnel's (IPv4
	 * options; a runt) is outside the class too, so parse() sends it up
	 * as well: it is never served as an ordinary frame. */
	if (data + ETH_HLEN + IPV4_HLEN + L4_MIN > data_end)
		return TUN_NONE;
	if (rd16(h + 12) != ETH_P_IPV4)
		return TUN_NONE;
	__u8 *ip = h + ETH_HLEN;
	__u8 *l4 = ip + IPV4_HLEN;

	if (ip[0] != 0x45)
		return TUN_NONE;
	__builtin_memset(&k, 0, sizeof(k));
	k.underlay = pi->ofport;
	k.remote_ip = rd32(ip + 12);
	k.local_ip = rd32(ip + 16);
	k.proto = ip[9];
	if (k.proto == IPPROTO_UDP_)
		k.udp_port = rd16(l4 + 2);
	else if (k.proto != IPPROTO_GRE_)
		return TUN_NONE;
	k.sel = TM_ADDR;
	if (!bpf_map_lookup_elem(&tun_rx, &k))
		return TUN_NONE;

	/* A tunnel's frame: from here on it is decapsulated or goes up. The
	 * outer IPv4 header is checked as classify checks it (a host's
	 * checks), then the shapes served here are narrower. */
	__u32 len = data_end - data;
	__u32 total = rd16(ip + 2);

	/* The whole frame, no Ethernet padding behind the packet (the inner
	 * frame then runs to the end, as parse() wants it). */
	if (total != len - ETH_HLEN) {
		*why = __LINE__;
		return TUN_UP;
	}
	if (rd16(ip + 6) & IP_MF_OFFSET) {
		*why = __LINE__;
		return TUN_UP;
	}
	__u32 acc = 0;

#pragma unroll
	for (int i = 0; i < IPV4_HLEN / 2; i++)
		acc += rd16(ip + 2 * i);
	/* A header whose checksum verifies sums to 0xffff (RFC 1071). */
	if (fold(acc) != 0xffff) {
		*why = __LINE__;
		return TUN_UP;
	}
	__u32 key = 0;
	int has_key = 1;

	t->seg = 0;
	if (k.proto == IPPROTO_GRE_) {
		__u16 flags = rd16(l4);
		int csum = (flags & GRE_FLAG_C) != 0;
		__u8 *opt = l4 + GRE_HLEN + (csum ? 4 : 0);

		/* RFC 2784/2890: no routing, sequence number or recursion,
		 * version 0; a checksum and a key, either, or neither. */
		flags &= ~GRE_FLAG_C;
		if (flags == GRE_FLAG_K) {
			if ((void *)(opt + 4) > data_end) {
				*why = __LINE__;
				return TUN_UP;
			}
			key = rd32(opt);
			t->inner = TUN_GRE_LEN + (csum ? 8 : 4);
		} else if (flags == 0) {
			has_key = 0;
			t->inner = TUN_GRE_LEN + (csum ? 4 : 0);
		} else {
			*why = __LINE__;
			return TUN_UP;
		}
		if (rd16(l4 + 2) != GRE_P_TEB) {
			*why = __LINE__;
			return TUN_UP;
		}
		/* Verified on a hit (offlow_offload below), before any write. */
		if (csum)
			t->seg = total - IPV4_HLEN;
	} else {
		if ((void *)(l4 + UDP_HLEN + VXLAN_HLEN) > data_end) {
			*why = __LINE__;
			return TUN_UP;
		}
		/* The UDP length is the IPv4 payload's; a checksum would have
		 * to be verified over the whole datagram: software does. */
		if (rd16(l4 + 4) != total - IPV4_HLEN || rd16(l4 + 6) != 0) {
			*why = __LINE__;
			return TUN_UP;
		}
		__u8 *vx = l4 + UDP_HLEN;

		if (!(vx[0] & VXLAN_FLAG_I)) {
			*why = __LINE__;
			return TUN_UP;
		}
		key = rd32(vx + 4) >> 8;
		t->inner = TUN_VXLAN_LEN;
	}
	/* The tunnel that takes this key: an exact key first (a GRE frame
	 * without one is TM_NO_KEY), then key=flow. */
	k.sel = has_key ? TM_KEY : TM_NO_KEY;
	k.key = key;
	__u32 *port = bpf_map_lookup_elem(&tun_rx, &k);

	if (!port) {
		k.sel = TM_FLOW;
		k.key = 0;
		port = bpf_map_lookup_elem(&tun_rx, &k);
	}
	if (!port) {
		/* classify's UnknownKey: software drops it. */
		*why = __LINE__;
		return TUN_UP;
	}
	t->ofport = *port;
	t->id = key;
	return TUN_DECAP;
}

/* The VXLAN source port's entropy of the frame at `f` as it leaves, the
 * software tier's (offload tunnel.rs `entropy`, the port sink's
 * offlow_wire::tunnel::entropy): FNV-1a over the Ethernet addresses and, for untagged
 * IPv4, bytes 26..38 (addresses, first four bytes of L4), folded to 16
 * bits. Every frame served here has 42 bytes or more. */
static __always_inline __u16 inner_entropy(__u8 *f, void *data_end)
{
	__u32 h = 0x811c9dc5;

	if ((void *)(f + 38) > data_end)
		return 0;
#pragma unroll
	for (int i = 0; i < 12; i++)
		h = (h ^ f[i]) * 0x01000193;
	if (f[12] == 0x08 && f[13] == 0x00) {
#pragma unroll
		for (int i = 26; i < 38; i++)
			h = (h ^ f[i]) * 0x01000193;
	}
	return h ^ (h >> 16);
}

/* Push the outer headers of tunnel `tt` in front of the frame, as
 * Endpoint::encapsulate writes them, with the entry's key.
 * Returns 0, or -1 if the headroom is gone (cannot happen: the caller
 * probed it before the first write). */
static __always_inline int encap(struct xdp_md *ctx, const struct tun_tx *tt,
				 const struct flow_prog *pr)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 inner_len = data_end - data;
	int vx = tt->kind == TK_VXLAN;
	__u16 entropy = vx ? inner_entropy(data, data_end) : 0;
	int oh = vx ? TUN_VXLAN_LEN : TUN_GRE_LEN + (tt->gre_csum ? 4 : 0) + (tt->gre_key ? 4 : 0);

	if (bpf_xdp_adjust_head(ctx, -oh))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	/* The inner frame has at least 42 bytes behind the longest header. */
	if (data + TUN_VXLAN_LEN > data_end)
		return -1;
	__u8 *f = data;
	__u8 *ip = f + ETH_HLEN;
	__u8 *l4 = ip + IPV4_HLEN;
	__u16 ip_len = oh - ETH_HLEN + inner_len;
	__u32 zero = 0;
	__u32 *next = bpf_map_lookup_elem(&tun_ident, &zero);
	__u16 ident = 0;

	if (next) {
		ident = *next;
		*next += 1;
	}
	__builtin_memcpy(f, tt->eth_dst, 6);
	__builtin_memcpy(f + 6, tt->eth_src, 6);
	wr16(f + 12, ETH_P_IPV4);
	wr16(ip, 0x4500 | tt->tos);
	wr16(ip + 2, ip_len);
	wr16(ip + 4, ident);
	wr16(ip + 6, IP_DF);
	wr16(ip + 8, ((__u16)tt->ttl << 8) | (vx ? IPPROTO_UDP_ : IPPROTO_GRE_));
	wr16(ip + 10, 0);
	wr32(ip + 12, tt->local_ip);
	wr32(ip + 16, tt->remote_ip);
	__u32 acc = 0;

#pragma unroll
	for (int i = 0; i < IPV4_HLEN / 2; i++)
		acc += rd16(ip + 2 * i);
	wr16(ip + 10, ~fold(acc));
	if (vx) {
		/* RFC 7348 §5: a source port from the flow, in 49152-65535;
		 * checksum 0 (IPv4 allows it). */
		wr16(l4, 0xc000 | (entropy & 0x3fff));
		wr16(l4 + 2, tt->udp_dst);
		wr16(l4 + 4, ip_len - IPV4_HLEN);
		wr16(l4 + 6, 0);
		wr32(l4 + UDP_HLEN, (__u32)VXLAN_FLAG_I << 24);
		wr32(l4 + UDP_HLEN + 4, pr->tun_key << 8);
	} else {
		__u8 *opt = l4 + GRE_HLEN;

		wr16(l4, (tt->gre_key ? GRE_FLAG_K : 0) | (tt->gre_csum ? GRE_FLAG_C : 0));
		wr16(l4 + 2, GRE_P_TEB);
		if (tt->gre_csum) {
			/* Checksum and reserved, zero while summing. */
			wr32(opt, 0);
			opt += 4;
		}
		if (tt->gre_key)
			wr32(opt, pr->tun_key);
		if (tt->gre_csum) {
			/* RFC 2784 §2.5, over the GRE header and its payload; the
			 * caller checked the length is one l4_sum() reaches. */
			int s = l4_sum(ctx, TUN_L4, ip_len - IPV4_HLEN);

			data = (void *)(long)ctx->data;
			data_end = (void *)(long)ctx->data_end;
			if (s < 0 || data + TUN_L4 + GRE_HLEN + 2 > data_end)
				return -1;
			wr16(data + TUN_L4 + GRE_HLEN, ~(__u16)s);
		}
	}
	return 0;
}

SEC("xdp")
int offlow_offload(struct xdp_md *ctx)
{
	struct port_info *pi = rx_port(ctx->ingress_ifindex);

	if (!pi) {
		count(ST_MISS_NOT_PORT, 0);
		return XDP_PASS;
	}
	/* A tunnel's frame is looked up as its inner frame, received on the
	 * tunnel port with its key; `base` is where that frame starts. */
	struct tun_frame t;
	__u32 base = 0;
	__u32 in_port = pi->ofport;
	__u64 tunnel_id = 0;

	if (pi->underlay) {
		__u32 why = 0;
		int tr = tunnel_rx(ctx, pi, &t, &why);

		if (tr == TUN_UP) {
			count(ST_UP_TUNNEL, why);
			return up(ctx, pi);
		}
		if (tr == TUN_DECAP) {
			base = t.inner;
			in_port = t.ofport;
			tunnel_id = t.id;
		}
	}
	struct parsed p;

	/* parse() writes l3 and len whenever it returns 0, but only some
	 * key fields (VLAN and L4 ones depend on the frame): zero the key. */
	__builtin_memset(&p.key, 0, sizeof(p.key));
	int why = parse((void *)(long)ctx->data, (void *)(long)ctx->data_end,
			ctx->data_end - ctx->data, &p, base);

	if (why) {
		count(ST_MISS_NOT_CLASS, why);
		return up(ctx, pi);
	}
	p.key.in_port = in_port;
	p.key.tunnel_id_lo = tunnel_id;
	p.key.tunnel_id_hi = tunnel_id >> 32;
	/* The exact entry first, then the masked ones (file header). */
	__u32 s = find_entry(&p.key);

	if (s == NO_SLOT) {
		count(ST_MISS_NO_ENTRY, 0);
		return up(ctx, pi);
	}
	struct flow_prog *pr = s == STALE_SLOT ? 0 : bpf_map_lookup_elem(&progs, &s);

	if (!pr) {
		count(ST_MISS_STALE, 0);
		return up(ctx, pi);
	}

	/* Checks that can send the frame up come before any write. */
	if (base && (pr->verdict == V_CPU || pr->verdict == V_IN_PORT)) {
		/* Refused at admission (caps.rs): never installed. */
		count(ST_UP_TUNNEL, __LINE__);
		return up(ctx, pi);
	}
	/* RFC 2784 §2.5: the checksum covers the GRE header and payload; a
	 * packet whose sum is not all ones is software's to count and drop. */
	if (base && t.seg && l4_sum(ctx, TUN_L4, t.seg) != 0xffff) {
		count(ST_UP_TUNNEL, __LINE__);
		return up(ctx, pi);
	}
	if (pr->verdict != V_CPU && pr->ttl_op == TTL_DEC) {
		void *data = (void *)(long)ctx->data;
		void *data_end = (void *)(long)ctx->data_end;

		if (base > TUN_VXLAN_LEN || p.l3 > ETH_HLEN + TAG_LEN)
			return up(ctx, pi);
		__u8 *ip = data + base + p.l3;

		if ((void *)(ip + IPV4_HLEN) > data_end)
			return up(ctx, pi);
		/* The executor stops at a TTL of 0 or 1 (TtlExpired). */
		if (ip[8] <= 1) {
			count(ST_UP_TTL, 0);
			return up(ctx, pi);
		}
	}

	/* A partial checksum is finished on the way out. Its value is worked
	 * out now, before any write, so a frame that goes up (here or at the
	 * VLAN stage) goes up untouched; a dropped frame needs none. A
	 * decapsulated frame's is not finished: it goes up. */
	int finished = CSUM_NOT_PARTIAL;

	if (pr->verdict != V_DROP) {
		if (base) {
			if (looks_partial(ctx, &p, base)) {
				count(ST_UP_TUNNEL_PARTIAL, 0);
				return up(ctx, pi);
			}
		} else {
			finished = partial_csum(ctx, &p);
			if (finished == CSUM_TOO_LONG) {
				count(ST_UP_CSUM_LONG, 0);
				return up(ctx, pi);
			}
		}
	}

	/* An output to a tunnel: its template, and room in front of the
	 * frame for the outer headers and a tag, made and given back before
	 * any write (so a frame without it goes up untouched). */
	struct tun_tx *tt = 0;

	if (pr->verdict == V_PORT && pr->tun_slot) {
		__u32 ti = pr->tun_slot - 1;

		tt = bpf_map_lookup_elem(&tun_tx, &ti);
		if (!tt) {
			count(ST_DROP_INTERNAL, 0);
			return XDP_DROP;
		}
		/* A GRE checksum is summed over the packet built: it must be
		 * one l4_sum() reaches (any frame in a page is). */
		if (tt->gre_csum && p.len + TAG_LEN + TUN_VXLAN_LEN - TUN_L4 > CSUM_MAX_SEG) {
			count(ST_UP_CSUM_LONG, 0);
			return up(ctx, pi);
		}
		if (bpf_xdp_adjust_head(ctx, -(TUN_VXLAN_LEN + TAG_LEN))) {
			count(ST_UP_NO_HEADROOM, 0);
			return up(ctx, pi);
		}
		/* Gives back what was just taken: cannot fail. */
		if (bpf_xdp_adjust_head(ctx, TUN_VXLAN_LEN + TAG_LEN)) {
			count(ST_DROP_INTERNAL, 0);
			return XDP_DROP;
		}
	}

	if (pr->verdict == V_CPU) {
		/* Unmodified, to a worker that runs the whole action list. */
		__u32 cpu1 = pick_cpu(&p.key, pr->cpu_mask);

		if (!cpu1) {
			count(ST_UP_NO_CPU, 0);
			return up(ctx, pi);
		}
		int rc = bpf_redirect_map(&cpus, cpu1 - 1, 0);

		if (rc != XDP_REDIRECT) {
			count(ST_UP_CPU_REDIRECT, cpu1 - 1);
			return up(ctx, pi);
		}
		/* The worker gets the frame as an skb without the sender's
		 * CHECKSUM_PARTIAL: finish it here (redirect_map only chose
		 * the target; the frame is still ours to write). */
		if (finished >= 0) {
			void *data = (void *)(long)ctx->data;
			void *data_end = (void *)(long)ctx->data_end;
			__u32 at = p.l3 + IPV4_HLEN + (p.key.ip_proto == IPPROTO_UDP_ ? 6 : 16);

			if (at > ETH_HLEN + TAG_LEN + IPV4_HLEN + 16 || data + at + 2 > data_end) {
				count(ST_DROP_INTERNAL, 0);
				return XDP_DROP;
			}
			wr16(data + at, finished);
			bump(ST_CSUM_FINISHED);
		}
		served(pr, p.len);
		count(ST_HIT_CPU, cpu1 - 1);
		return XDP_REDIRECT;
	}
	if (pr->verdict == V_DROP) {
		served(pr, p.len);
		count(ST_HIT_DROP, 0);
		return XDP_DROP;
	}

	/* Decapsulate: the inner frame is the frame from here on. */
	if (base) {
		if (bpf_xdp_adjust_head(ctx, (int)base)) {
			count(ST_UP_TUNNEL, __LINE__);
			return up(ctx, pi);
		}
		served(pr, p.len);
		bump(ST_TUNNEL_DECAP);
	}
	int l3 = vlan_stage(ctx, pr, p.key.vlan_present);

	if (l3 == -1 && !base) {
		/* Nothing written: the frame goes up as received. */
		count(ST_UP_NO_HEADROOM, 0);
		return up(ctx, pi);
	}
	/* From here the frame is the entry's: count it as served. */
	if (!base)
		served(pr, p.len);
	if (l3 < 0 || l3_stages(ctx, pr, l3, finished)) {
		count(ST_DROP_INTERNAL, 0);
		return XDP_DROP;
	}
	if (finished >= 0)
		bump(ST_CSUM_FINISHED);
	if (tt) {
		if (encap(ctx, tt, pr)) {
			count(ST_DROP_INTERNAL, 0);
			return XDP_DROP;
		}
		bump(ST_TUNNEL_ENCAP);
	}

	if (pr->verdict == V_IN_PORT) {
		count(ST_HIT_IN_PORT, pi->ofport);
		return XDP_TX;
	}
	int rc = bpf_redirect_map(&tx_ports, pr->tx_index, 0);

	if (rc != XDP_REDIRECT) {
		count(ST_DROP_NO_PORT, pr->out_port);
		return XDP_DROP;
	}
	count(ST_HIT_PORT, pr->out_port);
	return XDP_REDIRECT;
}

/* ------------------------------------------------------------------ TC --
 *
 * The same tier at a port's TC ingress (tcx), for kernels and interfaces
 * where a socket buffer exists before any program runs: on a veth the XDP
 * hook costs a conversion of every skb to an XDP frame and back (and a
 * copy where the sender's skb is cloned, as TCP's are), where a TC
 * redirect hands the skb on as built, the Linux bridge's path (`offlow
 * bench setup`'s xdp-wire and tc-wire rows measure both bounds). Same
 * maps, same keys and records, same lookup (find_entry); userspace loads
 * one program or the other (src/xdp/mod.rs, Hook).
 *
 * What it serves, and how it differs from the XDP program:
 * - The frame's outer VLAN tag is socket-buffer metadata by the time TC
 *   runs (the core stack untags every frame before ingress); the key takes
 *   it from there, and a tag still in the bytes (a second one) is outside
 *   the class. VLAN stages use bpf_skb_vlan_pop/push on that metadata.
 * - Rewrites go through bpf_skb_store_bytes and the checksum helpers
 *   (bpf_l3/l4_csum_replace), never direct writes: a program that writes
 *   packet data directly gets a prologue that unclones every cloned skb
 *   (a copy of its head) before it runs, served or not; the helpers copy
 *   only when a frame is written. The helpers also keep the skb's
 *   checksum state right (CHECKSUM_PARTIAL: only the pseudo-header part
 *   is updated, the rest is finished downstream; CHECKSUM_COMPLETE:
 *   skb->csum follows the pseudo-header changes), so there is nothing
 *   like the XDP program's finishing of partial checksums.
 * - Output: bpf_redirect to the egress of the interface `tx_ports` names
 *   (the DEVMAP is read, not used to redirect); back out of the ingress
 *   port likewise; drop: TC_ACT_SHOT.
 * - Not served here (refused at admission by the backend's capabilities;
 *   the program sends such a record's frames up): steering to a CPU (no
 *   cpumap for skbs) and tunnels (a port carrying tunnels sends every
 *   frame up, where software classifies it).
 * - Counters: a GRO-merged skb counts as the segments it carries
 *   (gso_segs) and its bytes plus the tag's when the tag is metadata, so
 *   an entry counts what the wire carried, as the XDP program does.
 *
 * Up: the port's AF_PACKET socket is a tap, and taps see a frame before
 * TC ingress runs; so the socket filters on a mark (offlow_io's
 * AfPacketConfig::only_mark) and takes only frames this program marked:
 * a frame that goes up is marked `up_mark` and redirected into its own
 * port's ingress, where it passes the taps again (now taken) and this
 * program once more (mark seen: cleared, and on to the stack, as
 * XDP_PASS would). A served frame is never seen by the socket; a frame
 * that goes up is seen once. The extra pass costs the miss path one trip
 * through the backlog; a frame received from another namespace or a
 * device never carries the mark (crossing a namespace clears it).
 */
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define TC_ACT_REDIRECT 7

/* Set at load by src/xdp/mod.rs (offlow_io's TC_UP_MARK). */
const volatile __u32 up_mark = 0;

/* Send a frame up (the section header above): counted as `up_pass`. */
static __always_inline int tc_up(struct __sk_buff *skb)
{
	count(ST_UP_PASS, 0);
	skb->mark = up_mark;
	return bpf_redirect(skb->ifindex, BPF_F_INGRESS);
}

/* The VLAN stage on the tag in the skb's metadata (`tagged`: there is
 * one). Returns 0, or -1 when a helper failed (the frame may have lost its
 * tag: it is dropped, counted as drop_internal; not seen: a push of
 * 802.1Q/802.1ad onto an skb without a tag cannot fail). */
static __always_inline int tc_vlan_stage(struct __sk_buff *skb, const struct flow_prog *pr,
					 int tagged)
{
	if (pr->vlan_op == VLAN_STRIP)
		return tagged && bpf_skb_vlan_pop(skb) ? -1 : 0;
	if (pr->vlan_op != VLAN_WRITE)
		return 0;
	__u16 tci = 0;
	__be16 proto = bpf_htons(ETH_P_8021Q);

	if (tagged) {
		/* Rewrite the tag: set-field keeps the DEI bit (vlan_stage). */
		tci = skb->vlan_tci;
		proto = skb->vlan_proto;
		if (pr->flags & F_VLAN_CLEAR_DEI)
			tci &= ~VLAN_DEI;
		if (bpf_skb_vlan_pop(skb))
			return -1;
	}
	if (pr->flags & F_VLAN_VID)
		tci = (tci & 0xf000) | (pr->vlan_vid & 0x0fff);
	if (pr->flags & F_VLAN_PCP)
		tci = (tci & 0x1fff) | ((__u16)(pr->vlan_pcp & 7) << 13);
	if (pr->flags & F_VLAN_TPID)
		proto = bpf_htons(pr->vlan_tpid);
	return bpf_skb_vlan_push(skb, proto, tci) ? -1 : 0;
}

/* Store a big-endian 16-bit word at `off`. */
static __always_inline int tc_store16(struct __sk_buff *skb, __u32 off, __u16 v)
{
	__be16 b = bpf_htons(v);

	return bpf_skb_store_bytes(skb, off, &b, 2, 0);
}

/* Set the IPv4 address at `at` from `old` to `new` (host order), folding
 * the change into the header checksum and, where `csum_at` names a
 * TCP/UDP checksum, into its pseudo-header part (set_addr). */
static __always_inline int tc_set_addr(struct __sk_buff *skb, __u32 at, __u32 old, __u32 new,
				       __u32 csum_at, __u64 mangled)
{
	__be32 o = bpf_htonl(old), n = bpf_htonl(new);
	int rc = 0;

	if (csum_at)
		rc |= bpf_l4_csum_replace(skb, csum_at, o, n, BPF_F_PSEUDO_HDR | mangled | 4);
	rc |= bpf_l3_csum_replace(skb, ETH_HLEN + 10, o, n, 4);
	rc |= bpf_skb_store_bytes(skb, at, &n, 4, 0);
	return rc;
}

/* The L2-L4 stages of the entry (l3_stages' rewrites, in its order), on
 * an untagged-in-the-bytes frame: IPv4 header at ETH_HLEN, `ttl` the
 * received TTL. The old values come from the key the frame matched (its
 * own fields: an entry's key is the frame's under its mask, but the
 * rewrite must start from the frame's bytes, so `k` is the frame's key).
 * Returns 0, or non-zero when a helper failed (cannot happen: every
 * offset is inside the headers the parse checked). */
static __always_inline int tc_l3_stages(struct __sk_buff *skb, const struct flow_prog *pr,
					const struct flow_key *k, __u8 ttl)
{
	const __u32 ip = ETH_HLEN;
	const __u32 l4 = ETH_HLEN + IPV4_HLEN;
	int rc = 0;

	if (pr->flags & F_ETH_SRC)
		rc |= bpf_skb_store_bytes(skb, 6, pr->eth_src, 6, 0);
	if (pr->flags & F_ETH_DST)
		rc |= bpf_skb_store_bytes(skb, 0, pr->eth_dst, 6, 0);
	if (pr->flags & (F_DSCP | F_ECN)) {
		__u8 tos = (k->ip_dscp << 2) | k->ip_ecn;
		__u16 old = 0x4500 | tos;

		if (pr->flags & F_DSCP)
			tos = (tos & 0x03) | (pr->dscp << 2);
		if (pr->flags & F_ECN)
			tos = (tos & 0xfc) | (pr->ecn & 3);
		rc |= bpf_l3_csum_replace(skb, ip + 10, bpf_htons(old), bpf_htons(0x4500 | tos), 2);
		rc |= tc_store16(skb, ip, 0x4500 | tos);
	}
	if (pr->ttl_op != TTL_KEEP) {
		/* TTL >= 2 for a decrement was checked before any write. */
		__u8 nt = pr->ttl_op == TTL_SET ? pr->ttl : ttl - 1;
		__u16 old = ((__u16)ttl << 8) | k->ip_proto;
		__u16 new = ((__u16)nt << 8) | k->ip_proto;

		rc |= bpf_l3_csum_replace(skb, ip + 10, bpf_htons(old), bpf_htons(new), 2);
		rc |= tc_store16(skb, ip + 8, new);
	}
	__u32 csum_at = 0;
	__u64 mangled = 0;

	if (k->ip_proto == IPPROTO_TCP_) {
		csum_at = l4 + 16;
	} else if (k->ip_proto == IPPROTO_UDP_) {
		csum_at = l4 + 6;
		/* RFC 768: a stored 0 means none and stays 0; a computed 0 is
		 * sent as 0xffff (execute.rs csum_write). */
		mangled = BPF_F_MARK_MANGLED_0;
	}
	if (pr->flags & F_IPV4_SRC)
		rc |= tc_set_addr(skb, ip + 12, k->ipv4_src, pr->ipv4_src, csum_at, mangled);
	if (pr->flags & F_IPV4_DST)
		rc |= tc_set_addr(skb, ip + 16, k->ipv4_dst, pr->ipv4_dst, csum_at, mangled);
	if (csum_at && (pr->flags & F_TP_SRC)) {
		rc |= bpf_l4_csum_replace(skb, csum_at, bpf_htons(k->tp_src), bpf_htons(pr->tp_src),
					  mangled | 2);
		rc |= tc_store16(skb, l4, pr->tp_src);
	}
	if (csum_at && (pr->flags & F_TP_DST)) {
		rc |= bpf_l4_csum_replace(skb, csum_at, bpf_htons(k->tp_dst), bpf_htons(pr->tp_dst),
					  mangled | 2);
		rc |= tc_store16(skb, l4 + 2, pr->tp_dst);
	}
	return rc;
}

SEC("tcx/ingress")
int offlow_offload_tc(struct __sk_buff *skb)
{
	if (up_mark && skb->mark == up_mark) {
		/* A frame sent up, on its second pass: the port's socket has
		 * it; on to the stack unmarked. */
		skb->mark = 0;
		return TC_ACT_OK;
	}
	struct port_info *pi = rx_port(skb->ifindex);

	if (!pi) {
		count(ST_MISS_NOT_PORT, 0);
		return TC_ACT_OK;
	}
	if (pi->underlay) {
		count(ST_UP_TUNNEL, __LINE__);
		return tc_up(skb);
	}
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct parsed p;

	__builtin_memset(&p.key, 0, sizeof(p.key));
	int why = parse(data, data_end, skb->len, &p, 0);

	/* A tag in the bytes is a second one (the first is metadata). */
	if (!why && p.key.vlan_present)
		why = __LINE__;
	if (why) {
		count(ST_MISS_NOT_CLASS, why);
		return tc_up(skb);
	}
	int tagged = skb->vlan_present;

	if (tagged) {
		__u16 tci = skb->vlan_tci;

		p.key.vlan_present = 1;
		p.key.vlan_vid = tci & 0x0fff;
		p.key.vlan_pcp = tci >> 13;
	}
	p.key.in_port = pi->ofport;
	/* The received TTL, read before anything can move the bytes. */
	__u8 *iph = data + ETH_HLEN;

	if ((void *)(iph + IPV4_HLEN) > data_end)
		return tc_up(skb);
	__u8 ttl = iph[8];
	__u32 s = find_entry(&p.key);

	if (s == NO_SLOT) {
		count(ST_MISS_NO_ENTRY, 0);
		return tc_up(skb);
	}
	struct flow_prog *pr = s == STALE_SLOT ? 0 : bpf_map_lookup_elem(&progs, &s);

	if (!pr) {
		count(ST_MISS_STALE, 0);
		return tc_up(skb);
	}
	if (pr->verdict == V_CPU || pr->tun_slot) {
		/* Refused at admission (the TC backend's capabilities). */
		count(ST_UP_NO_CPU, __LINE__);
		return tc_up(skb);
	}
	/* The executor stops at a TTL of 0 or 1 (TtlExpired), whatever the
	 * verdict. */
	if (pr->ttl_op == TTL_DEC && ttl <= 1) {
		count(ST_UP_TTL, 0);
		return tc_up(skb);
	}
	__u32 segs = skb->gso_segs ? skb->gso_segs : 1;
	__u32 bytes = skb->len + (tagged ? TAG_LEN : 0);

	if (pr->verdict == V_DROP) {
		served_n(pr, segs, bytes);
		count(ST_HIT_DROP, 0);
		return TC_ACT_SHOT;
	}
	__u32 ifindex = skb->ifindex;

	if (pr->verdict == V_PORT) {
		__u32 *to = bpf_map_lookup_elem(&tx_ports, &pr->tx_index);

		if (!to || !*to) {
			count(ST_DROP_NO_PORT, pr->out_port);
			return TC_ACT_SHOT;
		}
		ifindex = *to;
	}
	/* From here the frame is the entry's. */
	served_n(pr, segs, bytes);
	if (tc_vlan_stage(skb, pr, tagged) || tc_l3_stages(skb, pr, &p.key, ttl)) {
		count(ST_DROP_INTERNAL, 0);
		return TC_ACT_SHOT;
	}
	if (pr->verdict == V_IN_PORT)
		count(ST_HIT_IN_PORT, pi->ofport);
	else
		count(ST_HIT_PORT, pr->out_port);
	return bpf_redirect(ifindex, 0);
}

char LICENSE[] SEC("license") = "Apache-2.0";
