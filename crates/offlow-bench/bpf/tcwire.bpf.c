// SPDX-License-Identifier: Apache-2.0
/*
 * The TC counterpart of the XDP ceiling, for `offlow bench setup`'s
 * `tc-wire` row: attached at a port's TC ingress (clsact), it redirects
 * every packet to the egress of interface `to_ifindex` and does nothing
 * else. A redirect from TC keeps the socket buffer the sender built: no
 * conversion to an XDP frame and back, no NAPI on either veth, the path
 * the Linux bridge takes. What a switch offloading to TC programs instead
 * of XDP could reach between the same hosts.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

const volatile __u32 to_ifindex = 0;

SEC("tc")
int tc_wire(struct __sk_buff *skb)
{
	return bpf_redirect(to_ifindex, 0);
}

char LICENSE[] SEC("license") = "GPL";
