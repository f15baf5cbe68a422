# Source NAT as an os-ken (OpenFlow 1.3) application for offlow.
#
# Run it with osken-manager against a switch that has one inside port and
# one outside port:
#
#     SNAT_INSIDE_PORT=1 SNAT_OUTSIDE_PORT=2 SNAT_ADDRESS=192.0.2.1 \
#     SNAT_NEXT_HOP_MAC=<outside next hop's MAC> \
#         osken-manager --ofp-tcp-listen-port 6653 apps/osken/snat.py
#
# What it does, per switch that connects:
#
# - Deletes the flows an earlier run of this app left behind (its cookie
#   prefix), then installs the table-miss entry (priority 0, every packet to
#   the controller, unbuffered).
# - Answers ARP requests itself (packet-out): for the gateway address on the
#   inside port, for the NAT address on the outside port, both with the
#   gateway MAC. Hosts therefore need no static neighbours: the inside host
#   routes via the gateway address, the outside next hop reaches the NAT
#   address on its link.
# - On the first TCP or UDP packet of a connection from the inside (a
#   packet-in: no flow matched), takes a port from the pool and installs two
#   flows, both with the idle timeout and OFPFF_SEND_FLOW_REM:
#     forward  in_port=inside, the inside 5-tuple
#              -> eth_src=gateway MAC, eth_dst=next-hop MAC,
#                 ipv4_src=NAT address, tcp/udp_src=pool port,
#                 dec_nw_ttl, output:outside
#     reverse  in_port=outside, remote address:port -> NAT address:pool port
#              -> eth_src=gateway MAC, eth_dst=inside host's MAC,
#                 ipv4_dst=inside address, tcp/udp_dst=inside port,
#                 dec_nw_ttl, output:inside
#   and sends the first packet out through the forward translation (a
#   packet-out carrying the forward flow's actions, so it does not depend on
#   the flow being installed yet). The flow-mods and the packet-out leave
#   in one write (one TCP segment, one read for the switch), flow-mods
#   first, so a switch that applies messages in order has both flows in
#   place before the packet's answer comes back. The switch updates the
#   IPv4 and TCP/UDP checksums; the app never touches packet bytes.
# - On FLOW_REMOVED (idle timeout, or a deletion) marks that direction gone;
#   when both directions of a connection are gone its pool port goes back
#   to the pool. A packet-in for a connection that still has one direction
#   (say a UDP reply after the reverse flow idled out) reinstalls the
#   missing direction with the same pool port.
# - Pool exhausted: the packet is dropped and a warning logged (the next
#   packet of that connection tries again).
#
# What it does not do: ICMP (echo or errors: no ping through the NAT, no
# path-MTU messages translated back), IP fragments, inside-to-inside
# traffic, more than one inside or outside port, port-preserving or
# endpoint-independent mapping (a new pool port per 5-tuple), TCP state
# tracking (a flow lives as long as packets keep it alive), hairpinning.
# Every MAC it writes is static configuration or learnt from the packet-in
# (the inside host's source MAC); it never ARPs for the next hop.
#
# Configuration, from environment variables (read when the app starts):
#
#   SNAT_INSIDE_PORT     OpenFlow port number of the inside port  (default 1)
#   SNAT_OUTSIDE_PORT    OpenFlow port number of the outside port (default 2)
#   SNAT_INSIDE_NET      inside prefix; only sources in it are translated
#                        (default 10.0.0.0/24)
#   SNAT_GATEWAY_IP      the inside hosts' gateway address, answered on the
#                        inside port (default 10.0.0.254)
#   SNAT_ADDRESS         the NAT (outside) address, answered on the outside
#                        port and written as the translated source
#                        (default 192.0.2.1)
#   SNAT_MAC             the MAC the app answers ARP with on both sides and
#                        writes as eth_src (default 02:5a:00:00:00:01)
#   SNAT_NEXT_HOP_MAC    the outside next hop's MAC, written as eth_dst of
#                        translated packets (required: static)
#   SNAT_PORT_MIN        first pool port (default 20000)
#   SNAT_PORT_MAX        last pool port, inclusive (default 20999)
#   SNAT_IDLE_TIMEOUT    idle timeout of both flows, seconds (default 30)
#   SNAT_PRIORITY        priority of the per-connection flows (default 100)
#   SNAT_LOG_CONNECTIONS 1: log every mapping, install and free (the lines
#                        below marked "per connection"); default 0, since at
#                        hundreds of connections a second the log lines
#                        cost the controller's one thread a tenth of its time
#
# The pool is one range shared by TCP and UDP; ports are handed out
# least-recently-freed first, so a port freed by a timeout is not reused at
# once (the remote end may still hold the old connection in TIME_WAIT).
#
# Log lines the tests read (stable wording):
#   snat: map <proto> <in ip>:<in port> -> <nat ip>:<pool port> to <dst ip>:<dst port>
#                                                        (per connection)
#   snat: install forward|reverse <pool port> cookie=<cookie>  (per connection)
#   snat: free <pool port> (<n> of <total> free)         (per connection)
#   snat: pool exhausted, dropping <proto> <in ip>:<in port> to <dst ip>:<dst port>

import collections
import ipaddress
import os

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER
from os_ken.controller.handler import set_ev_cls
from os_ken.lib.packet import arp
from os_ken.lib.packet import ethernet
from os_ken.lib.packet import ether_types
from os_ken.lib.packet import in_proto
from os_ken.lib.packet import ipv4
from os_ken.lib.packet import packet
from os_ken.lib.packet import tcp
from os_ken.lib.packet import udp
from os_ken.ofproto import ofproto_v1_3

# Cookies of this app's flows: a fixed top half ("SNAT") and a counter in
# the bottom half, a fresh one per installed flow. A FLOW_REMOVED names the
# exact flow it is about, so a late message for a flow that was since
# replaced cannot free a port that is still in use.
COOKIE_PREFIX = 0x534E4154 << 32
COOKIE_MASK = 0xFFFFFFFF << 32

FORWARD = 0
REVERSE = 1


def env(name, default=None):
    """An environment variable, or default; required when default is None."""
    value = os.environ.get(name, default)
    if value is None:
        raise RuntimeError("snat: %s must be set" % name)
    return value


class Conn(object):
    """One translated connection: the inside 5-tuple and its pool port."""

    def __init__(self, proto, in_ip, in_port, dst_ip, dst_port, in_mac, pool_port):
        self.proto = proto  # in_proto.IPPROTO_TCP or IPPROTO_UDP
        self.in_ip = in_ip
        self.in_port = in_port
        self.dst_ip = dst_ip
        self.dst_port = dst_port
        self.in_mac = in_mac  # the inside host's MAC (reverse eth_dst)
        self.pool_port = pool_port
        # The cookie of the installed flow per direction, None when that
        # direction has no flow.
        self.cookie = [None, None]

    def name(self):
        return "%s %s:%d to %s:%d" % (
            proto_name(self.proto), self.in_ip, self.in_port, self.dst_ip, self.dst_port)


def proto_name(proto):
    return "tcp" if proto == in_proto.IPPROTO_TCP else "udp"


class Datapath(object):
    """Per-switch state: the connections, indexed both ways, and the pool."""

    def __init__(self, port_min, port_max):
        self.free = collections.deque(range(port_min, port_max + 1))
        self.total = len(self.free)
        # (proto, in_ip, in_port, dst_ip, dst_port) -> Conn
        self.by_inside = {}
        # (proto, dst_ip, dst_port, pool_port) -> Conn: what a reply
        # from outside carries (its source, and the NAT port it is for).
        self.by_outside = {}
        # cookie -> (Conn, direction)
        self.by_cookie = {}


class SourceNat(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super(SourceNat, self).__init__(*args, **kwargs)
        self.inside = int(env("SNAT_INSIDE_PORT", "1"))
        self.outside = int(env("SNAT_OUTSIDE_PORT", "2"))
        self.inside_net = ipaddress.ip_network(env("SNAT_INSIDE_NET", "10.0.0.0/24"))
        self.gateway_ip = env("SNAT_GATEWAY_IP", "10.0.0.254")
        self.nat_ip = env("SNAT_ADDRESS", "192.0.2.1")
        self.mac = env("SNAT_MAC", "02:5a:00:00:00:01").lower()
        self.next_hop_mac = env("SNAT_NEXT_HOP_MAC").lower()
        self.port_min = int(env("SNAT_PORT_MIN", "20000"))
        self.port_max = int(env("SNAT_PORT_MAX", "20999"))
        self.idle_timeout = int(env("SNAT_IDLE_TIMEOUT", "30"))
        self.priority = int(env("SNAT_PRIORITY", "100"))
        self.log_connections = env("SNAT_LOG_CONNECTIONS", "0") == "1"
        if not 0 < self.port_min <= self.port_max <= 65535:
            raise RuntimeError("snat: bad pool %d-%d" % (self.port_min, self.port_max))
        self.cookie_seq = 0
        self.dps = {}  # datapath id -> Datapath
        self.logger.info(
            "snat: inside port %d (%s, gateway %s), outside port %d (NAT address %s, "
            "next hop %s), pool %d-%d, idle timeout %d s",
            self.inside, self.inside_net, self.gateway_ip, self.outside, self.nat_ip,
            self.next_hop_mac, self.port_min, self.port_max, self.idle_timeout)

    # ------------------------------------------------------------------
    # Switch set-up.

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features_handler(self, ev):
        dp = ev.msg.datapath
        ofp = dp.ofproto
        parser = dp.ofproto_parser
        # A (re)connecting switch starts from a clean slate: whatever flows
        # a previous session installed are deleted (their FLOW_REMOVED, if
        # any, name cookies this session does not know and are ignored).
        self.dps[dp.id] = Datapath(self.port_min, self.port_max)
        dp.send_msg(parser.OFPFlowMod(
            dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
            cookie=COOKIE_PREFIX, cookie_mask=COOKIE_MASK,
            out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        # Table-miss: everything unknown comes to us, whole (no buffer).
        actions = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
        dp.send_msg(parser.OFPFlowMod(
            dp, priority=0, match=parser.OFPMatch(), cookie=COOKIE_PREFIX,
            instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]))

    # ------------------------------------------------------------------
    # Packet-in: ARP, or the first packet of a connection.

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in_handler(self, ev):
        msg = ev.msg
        dp = msg.datapath
        state = self.dps.get(dp.id)
        if state is None:
            return
        in_port = msg.match["in_port"]
        pkt = packet.Packet(msg.data)
        eth = pkt.get_protocol(ethernet.ethernet)
        if eth is None:
            return
        if eth.ethertype == ether_types.ETH_TYPE_ARP:
            self.handle_arp(dp, in_port, eth, pkt.get_protocol(arp.arp))
            return
        ip = pkt.get_protocol(ipv4.ipv4)
        if ip is None or ip.proto not in (in_proto.IPPROTO_TCP, in_proto.IPPROTO_UDP):
            return  # not translated (see the header): dropped
        l4 = pkt.get_protocol(tcp.tcp) or pkt.get_protocol(udp.udp)
        if l4 is None:
            return  # a fragment without the transport header
        if in_port == self.inside and eth.dst == self.mac \
                and ipaddress.ip_address(ip.src) in self.inside_net:
            self.from_inside(dp, state, msg.data, eth, ip, l4)
        elif in_port == self.outside and ip.dst == self.nat_ip:
            self.from_outside(dp, state, msg.data, ip, l4)

    def handle_arp(self, dp, in_port, eth, req):
        """Answer a request for the gateway (inside) or NAT (outside) address."""
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        if not ((in_port == self.inside and req.dst_ip == self.gateway_ip)
                or (in_port == self.outside and req.dst_ip == self.nat_ip)):
            return
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(
            ethertype=ether_types.ETH_TYPE_ARP, dst=eth.src, src=self.mac))
        reply.add_protocol(arp.arp(
            opcode=arp.ARP_REPLY, src_mac=self.mac, src_ip=req.dst_ip,
            dst_mac=req.src_mac, dst_ip=req.src_ip))
        reply.serialize()
        dp.send_msg(self.packet_out(dp, reply.data, [dp.ofproto_parser.OFPActionOutput(in_port)]))

    def from_inside(self, dp, state, data, eth, ip, l4):
        key = (ip.proto, ip.src, l4.src_port, ip.dst, l4.dst_port)
        conn = state.by_inside.get(key)
        if conn is None:
            if not state.free:
                self.logger.warning(
                    "snat: pool exhausted, dropping %s %s:%d to %s:%d",
                    proto_name(ip.proto), ip.src, l4.src_port, ip.dst, l4.dst_port)
                return
            conn = Conn(ip.proto, ip.src, l4.src_port, ip.dst, l4.dst_port, eth.src,
                        state.free.popleft())
            state.by_inside[key] = conn
            state.by_outside[(ip.proto, ip.dst, l4.dst_port, conn.pool_port)] = conn
            if self.log_connections:
                self.logger.info(
                    "snat: map %s %s:%d -> %s:%d to %s:%d", proto_name(ip.proto),
                    ip.src, l4.src_port, self.nat_ip, conn.pool_port, ip.dst, l4.dst_port)
        # Install whichever direction has no flow (both, for a new
        # connection). A direction that has one is left alone: this
        # packet overtook the flow's installation.
        msgs = [self.install(dp, state, conn, direction)
                for direction in (FORWARD, REVERSE) if conn.cookie[direction] is None]
        msgs.append(self.packet_out(dp, data, self.actions(dp, conn, FORWARD),
                                    in_port=self.inside))
        self.send_all(dp, msgs)

    def from_outside(self, dp, state, data, ip, l4):
        conn = state.by_outside.get((ip.proto, ip.src, l4.src_port, l4.dst_port))
        if conn is None:
            return  # nobody inside opened this: dropped
        msgs = [self.install(dp, state, conn, direction)
                for direction in (FORWARD, REVERSE) if conn.cookie[direction] is None]
        msgs.append(self.packet_out(dp, data, self.actions(dp, conn, REVERSE),
                                    in_port=self.outside))
        self.send_all(dp, msgs)

    # ------------------------------------------------------------------
    # Flows.

    def actions(self, dp, conn, direction):
        """The translation of one direction, as an action list."""
        parser = dp.ofproto_parser
        tcp_ = conn.proto == in_proto.IPPROTO_TCP
        if direction == FORWARD:
            port_field = "tcp_src" if tcp_ else "udp_src"
            return [
                parser.OFPActionSetField(eth_src=self.mac),
                parser.OFPActionSetField(eth_dst=self.next_hop_mac),
                parser.OFPActionSetField(ipv4_src=self.nat_ip),
                parser.OFPActionSetField(**{port_field: conn.pool_port}),
                parser.OFPActionDecNwTtl(),
                parser.OFPActionOutput(self.outside),
            ]
        port_field = "tcp_dst" if tcp_ else "udp_dst"
        return [
            parser.OFPActionSetField(eth_src=self.mac),
            parser.OFPActionSetField(eth_dst=conn.in_mac),
            parser.OFPActionSetField(ipv4_dst=conn.in_ip),
            parser.OFPActionSetField(**{port_field: conn.in_port}),
            parser.OFPActionDecNwTtl(),
            parser.OFPActionOutput(self.inside),
        ]

    def match(self, dp, conn, direction):
        parser = dp.ofproto_parser
        tcp_ = conn.proto == in_proto.IPPROTO_TCP
        src, dst = ("tcp_src", "tcp_dst") if tcp_ else ("udp_src", "udp_dst")
        if direction == FORWARD:
            fields = {"in_port": self.inside, "ipv4_src": conn.in_ip,
                      "ipv4_dst": conn.dst_ip, src: conn.in_port, dst: conn.dst_port}
        else:
            fields = {"in_port": self.outside, "ipv4_src": conn.dst_ip,
                      "ipv4_dst": self.nat_ip, src: conn.dst_port, dst: conn.pool_port}
        return parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ip_proto=conn.proto,
                               **fields)

    def send_all(self, dp, msgs):
        """Send msgs, in order, in one write: os-ken's send_msg queues each
        message for its own sendall (a TCP segment each, a wakeup of the
        send loop each); Datapath.send takes bytes, so serialize here."""
        for m in msgs:
            dp.set_xid(m)
            m.serialize()
        dp.send(b"".join(m.buf for m in msgs))

    def install(self, dp, state, conn, direction):
        """The flow-mod installing one direction (to send), its cookie
        recorded."""
        ofp = dp.ofproto
        parser = dp.ofproto_parser
        self.cookie_seq = (self.cookie_seq + 1) & 0xFFFFFFFF
        cookie = COOKIE_PREFIX | self.cookie_seq
        conn.cookie[direction] = cookie
        state.by_cookie[cookie] = (conn, direction)
        if self.log_connections:
            self.logger.info("snat: install %s %d cookie=%#x",
                             "forward" if direction == FORWARD else "reverse",
                             conn.pool_port, cookie)
        return parser.OFPFlowMod(
            dp, cookie=cookie, priority=self.priority, idle_timeout=self.idle_timeout,
            flags=ofp.OFPFF_SEND_FLOW_REM, match=self.match(dp, conn, direction),
            instructions=[parser.OFPInstructionActions(
                ofp.OFPIT_APPLY_ACTIONS, self.actions(dp, conn, direction))])

    def packet_out(self, dp, data, actions, in_port=None):
        """A packet-out (to send) of data through actions."""
        ofp = dp.ofproto
        return dp.ofproto_parser.OFPPacketOut(
            dp, buffer_id=ofp.OFP_NO_BUFFER,
            in_port=ofp.OFPP_CONTROLLER if in_port is None else in_port,
            actions=actions, data=data)

    # ------------------------------------------------------------------
    # Expiry.

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def flow_removed_handler(self, ev):
        msg = ev.msg
        state = self.dps.get(msg.datapath.id)
        if state is None:
            return
        found = state.by_cookie.pop(msg.cookie, None)
        if found is None:
            return  # not ours, or a flow of an earlier session
        conn, direction = found
        if conn.cookie[direction] == msg.cookie:
            conn.cookie[direction] = None
        if conn.cookie[FORWARD] is None and conn.cookie[REVERSE] is None:
            del state.by_inside[(conn.proto, conn.in_ip, conn.in_port, conn.dst_ip,
                                 conn.dst_port)]
            del state.by_outside[(conn.proto, conn.dst_ip, conn.dst_port, conn.pool_port)]
            state.free.append(conn.pool_port)
            if self.log_connections:
                self.logger.info("snat: free %d (%d of %d free)", conn.pool_port,
                                 len(state.free), state.total)
