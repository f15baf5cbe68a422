# Tests of snat.py that need no switch: its own encoding of the
# per-connection messages against os-ken's encoding of the same messages
# (built with os-ken's classes, as the app did before it encoded them
# itself), its frame parser against os-ken's packet parser, and the
# exchange of a connection's life against a datapath that records what the
# app sends. The end-to-end behaviour through a real switch is
# crates/offlow/tests/nat.rs's, which also runs this file.
#
# Run with the os-ken environment's python (scripts/controllers-venv.sh):
#
#     /var/cache/offlow/venv/osken/bin/python apps/osken/snat_test.py

import importlib.util
import os
import random
import struct
import sys
import unittest

from os_ken.controller import ofp_event
from os_ken.lib.packet import arp, ethernet, ipv4, packet, tcp, udp
from os_ken.ofproto import ofproto_parser
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

ENV = {
    "SNAT_INSIDE_PORT": "1", "SNAT_OUTSIDE_PORT": "2", "SNAT_INSIDE_NET": "10.0.0.0/24",
    "SNAT_GATEWAY_IP": "10.0.0.254", "SNAT_ADDRESS": "192.0.2.1",
    "SNAT_MAC": "02:5a:00:00:00:01", "SNAT_NEXT_HOP_MAC": "02:00:00:00:00:12",
    "SNAT_PORT_MIN": "20000", "SNAT_PORT_MAX": "20001", "SNAT_IDLE_TIMEOUT": "7",
    "SNAT_PRIORITY": "100",
}
os.environ.update(ENV)
HOST_MAC = "02:00:00:00:00:11"
REMOTE_MAC = "02:00:00:00:00:12"

# No __pycache__ left in the repository's apps/osken.
sys.dont_write_bytecode = True
_spec = importlib.util.spec_from_file_location(
    "snat", os.path.join(os.path.dirname(os.path.abspath(__file__)), "snat.py"))
snat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(snat)


class RecordingDatapath(object):
    """What the app uses of os-ken's Datapath; records each write."""
    id = 1
    ofproto = ofp
    ofproto_parser = parser

    def __init__(self):
        self.xid = 0
        self.writes = []

    def set_xid(self, msg):
        self.xid = (self.xid + 1) & ofp.MAX_XID
        msg.set_xid(self.xid)
        return self.xid

    def send_msg(self, msg):
        if msg.xid is None:
            self.set_xid(msg)
        msg.serialize()
        self.writes.append(bytes(msg.buf))

    def send(self, buf):
        self.writes.append(bytes(buf))


class Event(object):
    def __init__(self, msg):
        self.msg = msg


def frame(proto, src, dst, sport, dport, eth_src=HOST_MAC, eth_dst=ENV["SNAT_MAC"]):
    p = packet.Packet()
    p.add_protocol(ethernet.ethernet(dst=eth_dst, src=eth_src, ethertype=0x0800))
    p.add_protocol(ipv4.ipv4(src=src, dst=dst, proto=proto))
    if proto == 6:
        p.add_protocol(tcp.tcp(src_port=sport, dst_port=dport, bits=tcp.TCP_SYN))
    else:
        p.add_protocol(udp.udp(src_port=sport, dst_port=dport))
        p.add_protocol(b"hello")
    p.serialize()
    return bytes(p.data)


def fragment(data, offset_units, more=False):
    """data (an untagged IPv4 frame) made a fragment: its fragment offset
    (in 8-byte units) and more-fragments flag set, the IPv4 checksum
    redone."""
    f = bytearray(data)
    struct.pack_into("!H", f, 20, (0x2000 if more else 0) | offset_units)
    struct.pack_into("!H", f, 24, 0)
    total = sum(struct.unpack_from("!10H", f, 14))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    struct.pack_into("!H", f, 24, ~total & 0xFFFF)
    return bytes(f)


def received(dp, body, msg_type):
    """Parse a switch-to-controller message the way os-ken's receive loop
    does (os-ken cannot encode these, so the bodies are packed here)."""
    buf = bytearray(struct.pack("!BBHI", ofp.OFP_VERSION, msg_type, 8 + len(body), 0) + body)
    msg = ofproto_parser.msg(dp, *ofproto_parser.header(buf), buf)
    return ofp_event.ofp_msg_to_ev(msg)


def packet_in(dp, data, in_port):
    match = struct.pack("!HHII4x", ofp.OFPMT_OXM, 12, 0x80000004, in_port)
    return received(dp, struct.pack("!IHBBQ", ofp.OFP_NO_BUFFER, len(data), ofp.OFPR_NO_MATCH,
                                    0, 0) + match + b"\0\0" + data, ofp.OFPT_PACKET_IN)


def flow_removed(dp, cookie):
    return received(dp, struct.pack("!QHBBIIHHQQHH4x", cookie, 100, ofp.OFPRR_IDLE_TIMEOUT, 0,
                                    7, 0, 7, 0, 1, 64, ofp.OFPMT_OXM, 4),
                    ofp.OFPT_FLOW_REMOVED)


def messages(write):
    """The (type, bytes) of each message in one write."""
    out, off = [], 0
    while off < len(write):
        _, msg_type, length, _ = struct.unpack_from("!BBHI", write, off)
        out.append((msg_type, write[off:off + length]))
        off += length
    return out


def osken_bytes(msg, xid):
    msg.set_xid(xid)
    msg.serialize()
    return bytes(msg.buf)


def osken_translation(proto, direction, c):
    """os-ken's (match, actions) for one direction of connection c (a dict
    of text addresses and ports), as the header of snat.py states them."""
    tcp_ = proto == 6
    src, dst = ("tcp_src", "tcp_dst") if tcp_ else ("udp_src", "udp_dst")
    if direction == snat.FORWARD:
        match = parser.OFPMatch(eth_type=0x0800, ip_proto=proto, in_port=1,
                                ipv4_src=c["in_ip"], ipv4_dst=c["dst_ip"],
                                **{src: c["in_port"], dst: c["dst_port"]})
        actions = [parser.OFPActionSetField(eth_src=ENV["SNAT_MAC"]),
                   parser.OFPActionSetField(eth_dst=ENV["SNAT_NEXT_HOP_MAC"]),
                   parser.OFPActionSetField(ipv4_src=ENV["SNAT_ADDRESS"]),
                   parser.OFPActionSetField(**{src: c["pool_port"]}),
                   parser.OFPActionDecNwTtl(), parser.OFPActionOutput(2)]
    else:
        match = parser.OFPMatch(eth_type=0x0800, ip_proto=proto, in_port=2,
                                ipv4_src=c["dst_ip"], ipv4_dst=ENV["SNAT_ADDRESS"],
                                **{src: c["dst_port"], dst: c["pool_port"]})
        actions = [parser.OFPActionSetField(eth_src=ENV["SNAT_MAC"]),
                   parser.OFPActionSetField(eth_dst=c["in_mac"]),
                   parser.OFPActionSetField(ipv4_dst=c["in_ip"]),
                   parser.OFPActionSetField(**{dst: c["in_port"]}),
                   parser.OFPActionDecNwTtl(), parser.OFPActionOutput(1)]
    return match, actions


def osken_flow_mod(dp, proto, direction, c, cookie, xid):
    match, actions = osken_translation(proto, direction, c)
    return osken_bytes(parser.OFPFlowMod(
        dp, cookie=cookie, priority=100, idle_timeout=7, flags=ofp.OFPFF_SEND_FLOW_REM,
        match=match, instructions=[parser.OFPInstructionActions(
            ofp.OFPIT_APPLY_ACTIONS, actions)]), xid)


def osken_packet_out(dp, proto, direction, c, data, xid):
    _, actions = osken_translation(proto, direction, c)
    return osken_bytes(parser.OFPPacketOut(
        dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=1 if direction == snat.FORWARD else 2,
        actions=actions, data=data), xid)


class Fixture(unittest.TestCase):
    def setUp(self):
        self.app = snat.SourceNat()
        self.dp = RecordingDatapath()
        features = parser.OFPSwitchFeatures(self.dp)
        features.datapath = self.dp
        self.app.switch_features_handler(Event(features))
        self.dp.writes.clear()

    def packet_in(self, data, in_port):
        self.app.packet_in_handler(packet_in(self.dp, data, in_port))
        return self.dp.writes.pop() if self.dp.writes else None


class Encoding(Fixture):
    """Every message the app encodes itself is byte for byte os-ken's."""

    def check_connection(self, proto, in_port, dst_port, first_pool_port):
        c = dict(in_ip="10.0.0.1", dst_ip="192.0.2.2", in_port=in_port, dst_port=dst_port,
                 in_mac=HOST_MAC, pool_port=first_pool_port)
        data = frame(proto, c["in_ip"], c["dst_ip"], in_port, dst_port)
        xid = self.dp.xid
        write = self.packet_in(data, 1)
        msgs = messages(write)
        self.assertEqual([t for t, _ in msgs],
                         [ofp.OFPT_FLOW_MOD, ofp.OFPT_FLOW_MOD, ofp.OFPT_PACKET_OUT])
        cookies = [struct.unpack_from("!Q", m, 8)[0] for _, m in msgs[:2]]
        self.assertEqual(msgs[0][1], osken_flow_mod(self.dp, proto, snat.FORWARD, c,
                                                    cookies[0], xid + 1))
        self.assertEqual(msgs[1][1], osken_flow_mod(self.dp, proto, snat.REVERSE, c,
                                                    cookies[1], xid + 2))
        self.assertEqual(msgs[2][1], osken_packet_out(self.dp, proto, snat.FORWARD, c, data,
                                                      xid + 3))
        # The reply, once its flow is gone: the reverse flow again, then
        # the reply out through the reverse translation.
        self.app.flow_removed_handler(flow_removed(self.dp, cookies[1]))
        reply = frame(proto, c["dst_ip"], "192.0.2.1", dst_port, c["pool_port"],
                      eth_src=REMOTE_MAC)
        xid = self.dp.xid
        msgs = messages(self.packet_in(reply, 2))
        self.assertEqual([t for t, _ in msgs], [ofp.OFPT_FLOW_MOD, ofp.OFPT_PACKET_OUT])
        cookie = struct.unpack_from("!Q", msgs[0][1], 8)[0]
        self.assertEqual(msgs[0][1], osken_flow_mod(self.dp, proto, snat.REVERSE, c, cookie,
                                                    xid + 1))
        self.assertEqual(msgs[1][1], osken_packet_out(self.dp, proto, snat.REVERSE, c, reply,
                                                      xid + 2))

    def test_tcp(self):
        self.check_connection(6, 40000, 5001, 20000)

    def test_udp(self):
        self.check_connection(17, 53, 65535, 20000)

    def test_arp_reply(self):
        req = packet.Packet()
        req.add_protocol(ethernet.ethernet(dst="ff:ff:ff:ff:ff:ff", src=HOST_MAC,
                                           ethertype=0x0806))
        req.add_protocol(arp.arp(opcode=arp.ARP_REQUEST, src_mac=HOST_MAC, src_ip="10.0.0.1",
                                 dst_mac="00:00:00:00:00:00", dst_ip="10.0.0.254"))
        req.serialize()
        xid = self.dp.xid
        write = self.packet_in(bytes(req.data), 1)
        rep = packet.Packet()
        rep.add_protocol(ethernet.ethernet(dst=HOST_MAC, src=ENV["SNAT_MAC"],
                                           ethertype=0x0806))
        rep.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=ENV["SNAT_MAC"],
                                 src_ip="10.0.0.254", dst_mac=HOST_MAC, dst_ip="10.0.0.1"))
        rep.serialize()
        self.assertEqual(write, osken_bytes(parser.OFPPacketOut(
            self.dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
            actions=[parser.OFPActionOutput(1)], data=rep.data), xid + 1))


class Parsing(unittest.TestCase):
    """parse_fast gives what os-ken's parser gives, for every frame it
    takes; it takes the usual first packets."""

    def general(self, data):
        try:
            return snat.parse_general(packet.Packet(data))
        except Exception:  # noqa: os-ken's parser raises on some garbage
            return "raised"

    def test_usual_frames_take_the_fast_path(self):
        for proto in (6, 17):
            data = frame(proto, "10.0.0.1", "192.0.2.2", 40000, 5001)
            fast = snat.parse_fast(data)
            self.assertIsNotNone(fast)
            self.assertEqual(fast, self.general(data))

    def test_mutated_frames_agree(self):
        rng = random.Random(1)
        bases = [frame(6, "10.0.0.1", "192.0.2.2", 40000, 5001),
                 frame(17, "10.0.0.1", "192.0.2.2", 40000, 53)]
        taken = 0
        for _ in range(20000):
            data = bytearray(rng.choice(bases))
            for _ in range(rng.randrange(1, 3)):
                # Bytes of the headers the parsers read: types, version and
                # length, total length, fragment fields, protocol, ports.
                at = rng.choice((12, 13, 14, 16, 17, 20, 21, 23, 34, 35, 36, 37, 46))
                if at < len(data):
                    data[at] = rng.choice((0, 1, 0x45, 0x46, 0x81, 6, 17, 0x20, 0xff,
                                           rng.randrange(256)))
            if rng.random() < 0.3:
                del data[rng.randrange(len(data)):]
            data = bytes(data)
            fast = snat.parse_fast(data)
            if fast is not None:
                taken += 1
                self.assertEqual(fast, self.general(data), data.hex())
        self.assertGreater(taken, 1000)


class Fragments(Fixture):
    """A first fragment is a connection's packet; a later one (no ports)
    goes out through the shared translation from the inside and is dropped
    from the outside."""

    def test_a_first_fragment_opens_a_connection(self):
        data = fragment(frame(17, "10.0.0.1", "192.0.2.2", 40000, 53), 0, more=True)
        self.assertIsNotNone(snat.parse_fast(data))
        msgs = messages(self.packet_in(data, 1))
        self.assertEqual([t for t, _ in msgs],
                         [ofp.OFPT_FLOW_MOD, ofp.OFPT_FLOW_MOD, ofp.OFPT_PACKET_OUT])

    def test_a_later_fragment_from_inside_takes_the_address_translation_only(self):
        for proto in (6, 17):
            data = fragment(frame(proto, "10.0.0.1", "192.0.2.2", 40000, 53), 185)
            self.assertIsNone(snat.parse_fast(data))
            xid = self.dp.xid
            write = self.packet_in(data, 1)
            actions = [parser.OFPActionSetField(eth_src=ENV["SNAT_MAC"]),
                       parser.OFPActionSetField(eth_dst=ENV["SNAT_NEXT_HOP_MAC"]),
                       parser.OFPActionSetField(ipv4_src=ENV["SNAT_ADDRESS"]),
                       parser.OFPActionDecNwTtl(), parser.OFPActionOutput(2)]
            self.assertEqual(write, osken_bytes(parser.OFPPacketOut(
                self.dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=1, actions=actions,
                data=data), xid + 1))
        state = self.app.dps[1]
        # No pool port taken, no connection made.
        self.assertEqual(list(state.free), [20000, 20001])
        self.assertEqual(state.by_inside, {})
        self.assertEqual(state.fragments_out, 2)

    def test_a_later_fragment_from_outside_is_dropped_and_counted(self):
        # Even for a connection that exists: its ports are not in the
        # fragment.
        self.packet_in(frame(17, "10.0.0.1", "192.0.2.2", 40000, 53), 1)
        reply = fragment(frame(17, "192.0.2.2", "192.0.2.1", 53, 20000,
                               eth_src=REMOTE_MAC), 185)
        with self.assertLogs(self.app.logger, "WARNING") as logged:
            self.assertIsNone(self.packet_in(reply, 2))
        self.assertIn("dropped 1 later fragments from outside", logged.output[0])
        self.assertEqual(self.app.dps[1].fragments_dropped, 1)

    def test_later_fragments_of_other_traffic_are_not_translated(self):
        # From outside the inside prefix; ICMP.
        self.assertIsNone(self.packet_in(
            fragment(frame(17, "10.0.1.1", "192.0.2.2", 1, 80), 185), 1))
        icmp = bytearray(frame(17, "10.0.0.1", "192.0.2.2", 1, 80))
        icmp[23] = 1
        self.assertIsNone(self.packet_in(fragment(bytes(icmp), 185), 1))
        self.assertEqual(self.app.dps[1].fragments_out, 0)


class LazyFlowRemoved(unittest.TestCase):
    """The app's FLOW_REMOVED parser gives os-ken's message, match and all,
    as os-ken's own parser does."""

    def test_the_same_message_as_os_kens_parser(self):
        dp = RecordingDatapath()
        match = parser.OFPMatch(eth_type=0x0800, ip_proto=6, in_port=1, ipv4_src="10.0.0.1",
                                ipv4_dst="192.0.2.2", tcp_src=40000, tcp_dst=5001)
        mbuf = bytearray()
        match.serialize(mbuf, 0)
        body = struct.pack("!QHBBIIHHQQ", 0x534E415400000007, 100, ofp.OFPRR_IDLE_TIMEOUT, 3,
                           7, 250, 7, 0, 12, 3456) + bytes(mbuf)
        buf = bytearray(struct.pack("!BBHI", ofp.OFP_VERSION, ofp.OFPT_FLOW_REMOVED,
                                    8 + len(body), 9) + body)
        header = ofproto_parser.header(buf)
        # What os-ken parsed with before the app replaced the entry.
        theirs = parser.OFPFlowRemoved.parser(dp, *header, buf)
        ours = ofproto_parser.msg(dp, *header, buf)
        self.assertIsInstance(ours, snat.LazyMatchFlowRemoved)
        self.assertIsInstance(ours, parser.OFPFlowRemoved)
        self.assertIs(type(ofp_event.ofp_msg_to_ev(ours)), ofp_event.EventOFPFlowRemoved)
        self.assertNotIn("_match", {k for k, v in vars(ours).items()
                                    if v is not snat.LazyMatchFlowRemoved._UNPARSED})
        for field in ("cookie", "priority", "reason", "table_id", "duration_sec",
                      "duration_nsec", "idle_timeout", "hard_timeout", "packet_count",
                      "byte_count", "xid"):
            self.assertEqual(getattr(ours, field), getattr(theirs, field), field)
        self.assertEqual(ours.match.to_jsondict(), theirs.match.to_jsondict())
        self.assertEqual(ours.match["tcp_dst"], 5001)


class Lifecycle(Fixture):
    """Pool ports come back when both directions are gone, and only then."""

    def test_free_after_both_directions(self):
        data = frame(6, "10.0.0.1", "192.0.2.2", 40000, 5001)
        msgs = messages(self.packet_in(data, 1))
        cookies = [struct.unpack_from("!Q", m, 8)[0] for _, m in msgs[:2]]
        state = self.app.dps[1]
        self.assertEqual(list(state.free), [20001])
        self.app.flow_removed_handler(flow_removed(self.dp, cookies[0]))
        self.assertEqual(list(state.free), [20001])
        self.app.flow_removed_handler(flow_removed(self.dp, cookies[1]))
        self.assertEqual(list(state.free), [20001, 20000])
        # A stale cookie is ignored.
        self.app.flow_removed_handler(flow_removed(self.dp, cookies[1]))
        self.assertEqual(list(state.free), [20001, 20000])

    def test_exhausted_pool_drops(self):
        for port in (1, 2):
            self.assertIsNotNone(self.packet_in(frame(6, "10.0.0.1", "192.0.2.2", port, 80), 1))
        self.assertIsNone(self.packet_in(frame(6, "10.0.0.1", "192.0.2.2", 3, 80), 1))

    def test_not_translated(self):
        # From outside the inside prefix; not to the gateway's MAC; on the
        # outside port for another address; ICMP.
        self.assertIsNone(self.packet_in(frame(6, "10.0.1.1", "192.0.2.2", 1, 80), 1))
        self.assertIsNone(self.packet_in(frame(6, "10.0.0.1", "192.0.2.2", 1, 80,
                                               eth_dst=REMOTE_MAC), 1))
        self.assertIsNone(self.packet_in(frame(6, "192.0.2.2", "192.0.2.9", 80, 1), 2))
        icmp = bytearray(frame(6, "10.0.0.1", "192.0.2.2", 1, 80))
        icmp[23] = 1
        self.assertIsNone(self.packet_in(bytes(icmp), 1))


if __name__ == "__main__":
    unittest.main()
