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
# - IPv4 fragments: a first fragment (offset 0) carries the transport
#   header and is a connection's packet like any other. A later fragment
#   carries no ports, so no flow matches it and it comes to the app: from
#   the inside it goes out through the translation every connection shares
#   (MACs, the NAT address, dec_nw_ttl), which is all a later fragment
#   needs (its datagram's port and transport checksum are in the first
#   fragment, which the connection's flow translated); from the outside it
#   is dropped and counted, since which inside host it is for is written
#   only in its first fragment, and the app does not reassemble.
#
# What it does not do: ICMP (echo or errors: no ping through the NAT, no
# path-MTU messages translated back), reassembly (a datagram fragmented on
# the outside does not get in), inside-to-inside
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
# Cost: a connection's packet-in is parsed with struct (os-ken's packet
# parser only sees other frames: ARP, VLAN tags, IP options, ...), and its
# flow-mods and packet-out are encoded by the app itself, not built as
# os-ken message objects (see "Wire encoding" below); what is left per
# connection is mostly os-ken's own parsing and dispatch of the packet-in
# and the two FLOW_REMOVEDs. Of a FLOW_REMOVED the app reads only the
# cookie; os-ken's parse of its match (28 of its 32 µs) is deferred until
# something reads it (see LazyMatchFlowRemoved). The objects os-ken made
# at start-up are frozen out of the garbage collector's full collections
# (see SourceNat).
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
#   snat: dropped <n> later fragments from outside (the latest from <ip> to <ip>)
#                                      (the first, then every 1000th)

import collections
import gc
import ipaddress
import os
import socket
import struct

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
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser

# Cookies of this app's flows: a fixed top half ("SNAT") and a counter in
# the bottom half, a fresh one per installed flow. A FLOW_REMOVED names the
# exact flow it is about, so a late message for a flow that was since
# replaced cannot free a port that is still in use.
COOKIE_PREFIX = 0x534E4154 << 32
COOKIE_MASK = 0xFFFFFFFF << 32

FORWARD = 0
REVERSE = 1

TCP = in_proto.IPPROTO_TCP
UDP = in_proto.IPPROTO_UDP


def env(name, default=None):
    """An environment variable, or default; required when default is None."""
    value = os.environ.get(name, default)
    if value is None:
        raise RuntimeError("snat: %s must be set" % name)
    return value


def mac_bytes(text):
    return bytes.fromhex(text.replace(":", ""))


def ip_bytes(text):
    return ipaddress.IPv4Address(text).packed


def proto_name(proto):
    return "tcp" if proto == TCP else "udp"


# ----------------------------------------------------------------------
# Wire encoding of the per-connection messages.
#
# Building each connection's flow-mods and packet-out as os-ken objects
# (OFPMatch, OFPActionSetField, ...) and serializing them took about 70% of
# the controller's one thread: every field goes through os-ken's generic
# conversion from user values (netaddr included), twice. Their layout is
# fixed, so the app encodes them itself; only the connection's own values
# are packed per connection, the rest is built once. apps/osken/snat_test.py
# checks these bytes against os-ken's own encoding of the same messages.
# Section numbers are OpenFlow 1.3.5's.

# OXM fields (7.2.3.7), class OFPXMC_OPENFLOW_BASIC.
OXM_IN_PORT = 0
OXM_ETH_DST = 3
OXM_ETH_SRC = 4
OXM_ETH_TYPE = 5
OXM_IP_PROTO = 10
OXM_IPV4_SRC = 11
OXM_IPV4_DST = 12
# (source, destination) port fields per transport protocol.
OXM_PORTS = {TCP: (13, 14), UDP: (15, 16)}

U8 = struct.Struct("!B").pack
U16 = struct.Struct("!H").pack
U32 = struct.Struct("!I").pack
# ofp_header (7.1): version, type, length, xid.
HEADER = struct.Struct("!BBHI")
# OXM TLV header (7.2.3.2): class, field << 1 (no mask), value length.
OXM_HEADER = struct.Struct("!HBB").pack
# ofp_match (7.2.2), ofp_action_header (7.2.5), ofp_instruction_actions
# (7.2.4): type, length (and 4 bytes of padding for the instruction).
TYPE_LEN = struct.Struct("!HH").pack
INSTRUCTION = struct.Struct("!HH4x").pack
# ofp_flow_mod after its header (7.3.4.1): cookie, cookie_mask, table_id,
# command, idle_timeout, hard_timeout, priority, buffer_id, out_port,
# out_group, flags, 2 bytes of padding.
FLOW_MOD = struct.Struct("!QQBBHHHIIIH2x").pack
FLOW_MOD_LEN = HEADER.size + 40
# ofp_packet_out after its header (7.3.7): buffer_id, in_port, actions_len,
# 6 bytes of padding.
PACKET_OUT = struct.Struct("!IIH6x").pack
PACKET_OUT_LEN = HEADER.size + 16
# ofp_action_dec_nw_ttl (7.2.5): type and length, 4 bytes of padding.
DEC_NW_TTL = struct.pack("!HH4x", ofp.OFPAT_DEC_NW_TTL, 8)


def pad8(length):
    """Zero bytes padding length up to a multiple of 8."""
    return b"\0" * (-length % 8)


def oxm(field, value):
    """One OXM TLV without a mask; value is the field's bytes."""
    return OXM_HEADER(ofp.OFPXMC_OPENFLOW_BASIC, field << 1, len(value)) + value


def ofp_match(tlvs):
    """An OXM ofp_match holding tlvs: its length leaves out the padding."""
    length = 4 + len(tlvs)
    return TYPE_LEN(ofp.OFPMT_OXM, length) + tlvs + pad8(length)


def set_field(field, value):
    """OFPAT_SET_FIELD, padded to a multiple of 8 (the padding counts in
    its length)."""
    tlv = oxm(field, value)
    padding = pad8(4 + len(tlv))
    return TYPE_LEN(ofp.OFPAT_SET_FIELD, 4 + len(tlv) + len(padding)) + tlv + padding


def output(port):
    """OFPAT_OUTPUT to port, max_len OFPCML_MAX (os-ken's default; a
    max_len only counts for output to the controller)."""
    return struct.pack("!HHIH6x", ofp.OFPAT_OUTPUT, 16, port, ofp.OFPCML_MAX)


def next_xid(dp):
    """The next xid of dp: os-ken's Datapath.set_xid without a message
    object to set it on, so that the app's messages and os-ken's own (echo
    requests, ...) share one sequence."""
    dp.xid = (dp.xid + 1) & ofp.MAX_XID
    return dp.xid


# ----------------------------------------------------------------------
# Packet-in parsing.

# What a first packet looks like: Ethernet II (destination, source, type),
# IPv4 without options (version and header length, total length, protocol,
# source, destination) and the transport header's two ports.
FAST_FRAME = struct.Struct("!6s6sHBxH2xHxB2x4s4sHH")
# The IPv4 fragment offset's bits (the flags are the top three).
FRAG_OFFSET_MASK = 0x1FFF
ETH_LEN = 14
IPV4_LEN = 20
# The shortest transport header os-ken's parser takes (what the app did
# before it parsed frames itself): TCP's fixed header, UDP's header.
L4_MIN_LEN = {TCP: 20, UDP: 8}
# Where TCP's data offset is (its top four bits), in an untagged frame
# without IP options.
TCP_DATA_OFFSET_AT = ETH_LEN + IPV4_LEN + 12


def parse_fast(data):
    """(proto, eth_src, eth_dst, ip_src, ip_dst, src_port, dst_port), all
    addresses as bytes, for an untagged IPv4 TCP/UDP frame without IP
    options whose transport header is whole; None for any other frame.

    A few struct fields instead of os-ken's packet.Packet (a class instance
    per header, addresses converted to text, payloads parsed by port) for
    the frame every connection sends. The result is what parse_general
    gives for the same frame (snat_test.py checks it on mutated frames);
    neither takes a later fragment (no transport header). Transport
    headers that are not plainly whole (shorter than os-ken's minimum, both
    ports 0, a TCP data offset below 5) go to parse_general, where
    os-ken's parser decides as before (it drops some of them)."""
    if len(data) < FAST_FRAME.size:
        return None
    (eth_dst, eth_src, eth_type, version_ihl, total_len, frag, proto, ip_src, ip_dst,
     src_port, dst_port) = FAST_FRAME.unpack_from(data)
    if eth_type != ether_types.ETH_TYPE_IP or version_ihl != 0x45 or proto not in L4_MIN_LEN:
        return None
    if frag & FRAG_OFFSET_MASK:
        return None  # a later fragment: what follows is payload, not ports
    # The transport header ends where the IPv4 total length says, or where
    # the frame does if that is sooner.
    if min(total_len, len(data) - ETH_LEN) - IPV4_LEN < L4_MIN_LEN[proto]:
        return None
    if not (src_port or dst_port) or (proto == TCP and data[TCP_DATA_OFFSET_AT] < 0x50):
        return None
    return proto, eth_src, eth_dst, ip_src, ip_dst, src_port, dst_port


def parse_general(pkt):
    """parse_fast's tuple from os-ken's parse of any other frame (VLAN
    tags, IP options, ...), or None when it is not IPv4 TCP/UDP with its
    transport header. The transport header is the one right after the IPv4
    header (not one inside a tunnel the packet carries)."""
    protocols = pkt.protocols
    for i, ip in enumerate(protocols):
        if isinstance(ip, ipv4.ipv4):
            break
    else:
        return None
    if ip.proto not in L4_MIN_LEN or i + 1 == len(protocols) or ip.offset:
        return None  # (os-ken parses a later fragment's payload as ports)
    l4 = protocols[i + 1]
    if not isinstance(l4, tcp.tcp if ip.proto == TCP else udp.udp):
        return None  # a fragment without the transport header
    eth = protocols[0]
    return (ip.proto, mac_bytes(eth.src), mac_bytes(eth.dst), ip_bytes(ip.src),
            ip_bytes(ip.dst), l4.src_port, l4.dst_port)


# ----------------------------------------------------------------------
# FLOW_REMOVED with its match parsed on first read.

class LazyMatchFlowRemoved(ofproto_v1_3_parser.OFPFlowRemoved):
    """os-ken's OFPFlowRemoved whose match is parsed (by os-ken's own
    OFPMatch.parser, from the message's bytes) when first read instead of
    when the message arrives: the app reads only the cookie, and the match
    was most of os-ken's work per FLOW_REMOVED (at thousands of
    connections a second, two FLOW_REMOVEDs each, a tenth of the
    controller's one thread). Whoever reads msg.match (another app in the
    same os-ken, a log line) gets the same OFPMatch as before.

    Installed for the whole os-ken process by this module: os-ken looks a
    message type's parser up in ofproto_v1_3_parser._MSG_PARSERS, and finds
    the event class by the message class's name, which is therefore kept."""

    _UNPARSED = object()

    @classmethod
    def parser(cls, datapath, version, msg_type, msg_len, xid, buf):
        # MsgBase.parser: the header fields and the buffer.
        msg = super(ofproto_v1_3_parser.OFPFlowRemoved, cls).parser(
            datapath, version, msg_type, msg_len, xid, buf)
        (msg.cookie, msg.priority, msg.reason, msg.table_id, msg.duration_sec,
         msg.duration_nsec, msg.idle_timeout, msg.hard_timeout, msg.packet_count,
         msg.byte_count) = struct.unpack_from(
            ofp.OFP_FLOW_REMOVED_PACK_STR0, msg.buf, ofp.OFP_HEADER_SIZE)
        return msg

    @property
    def match(self):
        match = self.__dict__.get("_match", self._UNPARSED)
        if match is self._UNPARSED:
            match = None
            if self.buf is not None:
                match = ofproto_v1_3_parser.OFPMatch.parser(
                    self.buf, ofp.OFP_FLOW_REMOVED_SIZE - ofp.OFP_MATCH_SIZE)
            self._match = match
        return match

    @match.setter
    def match(self, value):
        # OFPFlowRemoved.__init__ sets None: "not parsed yet".
        self._match = self._UNPARSED if value is None else value


LazyMatchFlowRemoved.__name__ = ofproto_v1_3_parser.OFPFlowRemoved.__name__
ofproto_v1_3_parser._MSG_PARSERS[ofp.OFPT_FLOW_REMOVED] = LazyMatchFlowRemoved.parser


# ----------------------------------------------------------------------
# State.

class Conn(object):
    """One translated connection: the inside 5-tuple and its pool port.
    Addresses are bytes, as they go on the wire."""

    __slots__ = ("proto", "in_ip", "in_port", "dst_ip", "dst_port", "in_mac",
                 "pool_port", "cookie")

    def __init__(self, proto, in_ip, in_port, dst_ip, dst_port, in_mac, pool_port):
        self.proto = proto  # TCP or UDP
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
            proto_name(self.proto), socket.inet_ntoa(self.in_ip), self.in_port,
            socket.inet_ntoa(self.dst_ip), self.dst_port)


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
        # Later fragments sent out from the inside, dropped from outside.
        self.fragments_out = 0
        self.fragments_dropped = 0


class SourceNat(app_manager.OSKenApp):
    OFP_VERSIONS = [ofp.OFP_VERSION]

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
        # The configuration as bytes, compared with and written into frames.
        self.mac_b = mac_bytes(self.mac)
        self.nat_ip_b = ip_bytes(self.nat_ip)
        self.inside_prefix = int(self.inside_net.network_address)
        self.inside_mask = int(self.inside_net.netmask)
        # The parts of each connection's messages that are the same for
        # every connection, per protocol and direction: the match's leading
        # fields, and the actions before and after the connection's own.
        self.match_head = {}
        for proto in (TCP, UDP):
            for direction, port in ((FORWARD, self.inside), (REVERSE, self.outside)):
                self.match_head[proto, direction] = (
                    oxm(OXM_IN_PORT, U32(port))
                    + oxm(OXM_ETH_TYPE, U16(ether_types.ETH_TYPE_IP))
                    + oxm(OXM_IP_PROTO, U8(proto)))
        eth_src = set_field(OXM_ETH_SRC, self.mac_b)
        self.actions_head = {
            FORWARD: eth_src + set_field(OXM_ETH_DST, mac_bytes(self.next_hop_mac))
            + set_field(OXM_IPV4_SRC, self.nat_ip_b),
            REVERSE: eth_src,
        }
        self.actions_tail = {
            FORWARD: DEC_NW_TTL + output(self.outside),
            REVERSE: DEC_NW_TTL + output(self.inside),
        }
        # Each connection leaves a few objects alive for its idle timeout,
        # enough to start a full (generation 2) collection about once a
        # second at a few thousand connections a second; each walked every
        # object os-ken and its imports made at start-up (some 110,000):
        # 35-70 ms, the controller's longest pauses. Frozen, those are
        # skipped (6-19 ms). They are still freed by reference counting;
        # only a reference cycle among them would never be collected.
        gc.freeze()

    # ------------------------------------------------------------------
    # Switch set-up.

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features_handler(self, ev):
        dp = ev.msg.datapath
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
        data = msg.data
        headers = parse_fast(data)
        if headers is None:
            # Not the usual first packet: os-ken parses it (ARP, VLAN
            # tags, IP options, too short, ...).
            pkt = packet.Packet(data)
            eth = pkt.get_protocol(ethernet.ethernet)
            if eth is None:
                return
            if eth.ethertype == ether_types.ETH_TYPE_ARP:
                self.handle_arp(dp, in_port, eth, pkt.get_protocol(arp.arp))
                return
            ip = pkt.get_protocol(ipv4.ipv4)
            if ip is not None and ip.offset:
                self.later_fragment(dp, state, in_port, eth, ip, data)
                return
            headers = parse_general(pkt)
            if headers is None:
                return  # not translated (see the header): dropped
        proto, eth_src, eth_dst, ip_src, ip_dst, src_port, dst_port = headers
        if self.from_inside_host(in_port, eth_dst, ip_src):
            self.from_inside(dp, state, data, proto, eth_src, ip_src, ip_dst, src_port,
                             dst_port)
        elif in_port == self.outside and ip_dst == self.nat_ip_b:
            self.from_outside(dp, state, data, proto, ip_src, src_port, dst_port)

    def from_inside_host(self, in_port, eth_dst, ip_src):
        """Does a packet (addresses as bytes) come from an inside host through
        the gateway: on the inside port, to the gateway MAC, from the inside
        prefix? Only such packets are translated."""
        return (in_port == self.inside and eth_dst == self.mac_b
                and int.from_bytes(ip_src, "big") & self.inside_mask == self.inside_prefix)

    def later_fragment(self, dp, state, in_port, eth, ip, data):
        """A fragment after the first of a TCP/UDP datagram (see the header):
        out through the shared translation from the inside, dropped and
        counted from the outside."""
        if ip.proto not in L4_MIN_LEN:
            return
        if self.from_inside_host(in_port, mac_bytes(eth.dst), ip_bytes(ip.src)):
            state.fragments_out += 1
            dp.send(self.packet_out(
                dp, data, self.actions_head[FORWARD] + self.actions_tail[FORWARD],
                self.inside))
        elif in_port == self.outside and ip_bytes(ip.dst) == self.nat_ip_b:
            state.fragments_dropped += 1
            if state.fragments_dropped % 1000 == 1:
                self.logger.warning(
                    "snat: dropped %d later fragments from outside (the latest from %s to %s): "
                    "the app does not reassemble", state.fragments_dropped, ip.src, ip.dst)

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
        dp.send(self.packet_out(dp, reply.data, output(in_port), ofp.OFPP_CONTROLLER))

    def from_inside(self, dp, state, data, proto, eth_src, ip_src, ip_dst, src_port,
                    dst_port):
        key = (proto, ip_src, src_port, ip_dst, dst_port)
        conn = state.by_inside.get(key)
        if conn is None:
            if not state.free:
                self.logger.warning(
                    "snat: pool exhausted, dropping %s %s:%d to %s:%d", proto_name(proto),
                    socket.inet_ntoa(ip_src), src_port, socket.inet_ntoa(ip_dst), dst_port)
                return
            conn = Conn(proto, ip_src, src_port, ip_dst, dst_port, eth_src,
                        state.free.popleft())
            state.by_inside[key] = conn
            state.by_outside[(proto, ip_dst, dst_port, conn.pool_port)] = conn
            if self.log_connections:
                self.logger.info(
                    "snat: map %s %s:%d -> %s:%d to %s:%d", proto_name(proto),
                    socket.inet_ntoa(ip_src), src_port, self.nat_ip, conn.pool_port,
                    socket.inet_ntoa(ip_dst), dst_port)
        self.send_translated(dp, state, conn, data, FORWARD)

    def from_outside(self, dp, state, data, proto, ip_src, src_port, dst_port):
        conn = state.by_outside.get((proto, ip_src, src_port, dst_port))
        if conn is None:
            return  # nobody inside opened this: dropped
        self.send_translated(dp, state, conn, data, REVERSE)

    def send_translated(self, dp, state, conn, data, direction):
        """Install whichever direction of conn has no flow (both, for a new
        connection; a direction that has one is left alone: this packet
        overtook the flow's installation), and send data out through
        direction's translation.

        One write: os-ken's send_msg queues each message for its own
        sendall (a TCP segment each, a wakeup of the send loop each)."""
        actions = [None, None]
        msgs = []
        for d in (FORWARD, REVERSE):
            if conn.cookie[d] is None:
                actions[d] = self.actions(conn, d)
                msgs.append(self.install(dp, state, conn, d, actions[d]))
        if actions[direction] is None:
            actions[direction] = self.actions(conn, direction)
        msgs.append(self.packet_out(
            dp, data, actions[direction],
            self.inside if direction == FORWARD else self.outside))
        dp.send(b"".join(msgs))

    # ------------------------------------------------------------------
    # Flows.

    def actions(self, conn, direction):
        """The translation of one direction, as an encoded action list:
            forward  eth_src, eth_dst=next hop, ipv4_src=NAT address,
                     tcp/udp_src=pool port, dec_nw_ttl, output:outside
            reverse  eth_src, eth_dst=inside MAC, ipv4_dst=inside address,
                     tcp/udp_dst=inside port, dec_nw_ttl, output:inside"""
        src, dst = OXM_PORTS[conn.proto]
        if direction == FORWARD:
            own = set_field(src, U16(conn.pool_port))
        else:
            own = (set_field(OXM_ETH_DST, conn.in_mac) + set_field(OXM_IPV4_DST, conn.in_ip)
                   + set_field(dst, U16(conn.in_port)))
        return self.actions_head[direction] + own + self.actions_tail[direction]

    def match(self, conn, direction):
        """The encoded match of one direction: in_port, eth_type=IPv4,
        ip_proto, then
            forward  the inside 5-tuple's addresses and ports
            reverse  remote address:port -> NAT address:pool port"""
        src, dst = OXM_PORTS[conn.proto]
        if direction == FORWARD:
            own = (oxm(OXM_IPV4_SRC, conn.in_ip) + oxm(OXM_IPV4_DST, conn.dst_ip)
                   + oxm(src, U16(conn.in_port)) + oxm(dst, U16(conn.dst_port)))
        else:
            own = (oxm(OXM_IPV4_SRC, conn.dst_ip) + oxm(OXM_IPV4_DST, self.nat_ip_b)
                   + oxm(src, U16(conn.dst_port)) + oxm(dst, U16(conn.pool_port)))
        return ofp_match(self.match_head[conn.proto, direction] + own)

    def install(self, dp, state, conn, direction, actions):
        """The encoded flow-mod (OFPFC_ADD) installing one direction with
        actions, its cookie recorded."""
        self.cookie_seq = (self.cookie_seq + 1) & 0xFFFFFFFF
        cookie = COOKIE_PREFIX | self.cookie_seq
        conn.cookie[direction] = cookie
        state.by_cookie[cookie] = (conn, direction)
        if self.log_connections:
            self.logger.info("snat: install %s %d cookie=%#x",
                             "forward" if direction == FORWARD else "reverse",
                             conn.pool_port, cookie)
        match = self.match(conn, direction)
        length = FLOW_MOD_LEN + len(match) + 8 + len(actions)
        return b"".join((
            HEADER.pack(ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD, length, next_xid(dp)),
            FLOW_MOD(cookie, 0, 0, ofp.OFPFC_ADD, self.idle_timeout, 0, self.priority,
                     ofp.OFP_NO_BUFFER, 0, 0, ofp.OFPFF_SEND_FLOW_REM),
            match,
            INSTRUCTION(ofp.OFPIT_APPLY_ACTIONS, 8 + len(actions)),
            actions))

    def packet_out(self, dp, data, actions, in_port):
        """The encoded packet-out of data through actions (encoded)."""
        length = PACKET_OUT_LEN + len(actions) + len(data)
        return b"".join((
            HEADER.pack(ofp.OFP_VERSION, ofp.OFPT_PACKET_OUT, length, next_xid(dp)),
            PACKET_OUT(ofp.OFP_NO_BUFFER, in_port, len(actions)),
            actions,
            data))

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
