//! The working key: the flow key as the actions applied so far change it,
//! so that a later table matches what the frame will look like (OpenFlow
//! 1.3.5 §5.9: Apply-Actions modify the packet before the next table).
//!
//! What: [`WorkingKey::apply`] folds one action into the key without the
//! frame, mirroring what `offlow-datapath`'s executor does to the frame
//! bytes: set-field writes the field, VLAN push/pop keep a small stack of
//! the tags pushed over, MPLS push/pop move the label fields and reveal the
//! payload below the bottom of the stack, PBB push/pop build or strip the
//! backbone header. What a pop reveals was stored in the key by the parser
//! (`offlow_flow::key::encap`: the second label, the PBB customer
//! EtherType and MAC addresses, the payload's L3/L4 fields).
//!
//! Invariant (property-tested in `offlow-datapath/tests/prop_encap.rs`):
//! while [`WorkingKey::exact`] holds, the key equals what the parser gives
//! for the frame the executor produces from the same actions. It stops
//! holding (and the key becomes a best effort) only where the key lacks
//! what the frame has:
//! - popping a label below the second one (the key stores two), or popping
//!   a non-bottom label to a non-MPLS EtherType, or the bottom label to an
//!   MPLS/PBB/VLAN EtherType (the payload is then re-read as that header);
//! - pushing MPLS onto a frame whose network header did not parse, or onto
//!   a PBB frame (the payload below the new label is chosen by its nibble);
//! - popping PBB to a customer frame that is tagged, MPLS, PBB or cut short
//!   (only an untagged IPv4/IPv6/ARP payload is stored);
//! - (not flagged) popping PBB when the customer MAC addresses differ from
//!   the backbone ones and the payload is an IPv6 ND message (whose target
//!   needs the slot the addresses would be stored in): the key keeps the
//!   backbone addresses;
//! - pushing PBB onto a tagged frame (the key does not hold the TPID);
//! - popping a VLAN tag the parser did not record (the key models one tag
//!   plus the tags pushed since; not flagged, as before).
//!
//! TTL actions change no key field (the key carries no TTL); whether a TTL
//! expires is the executor's decision on the frame.
//!
//! Thread-safety: plain data.

use offlow_flow::encap::{self, Payload};
use offlow_flow::{present, Field, FlowKey};

use crate::action::Action;

/// OFPVID_PRESENT.
const VID_PRESENT: u128 = 0x1000;

/// Tags pushed over another tag that the working key remembers.
pub const VLAN_STACK: usize = 4;

const ETH_MPLS: u16 = 0x8847;
const ETH_MPLS_MC: u16 = 0x8848;
const ETH_PBB: u16 = 0x88e7;

/// Is `t` an EtherType the parser reads as a header of its own after a pop
/// (a label, an I-TAG or a VLAN tag), which the key cannot follow into?
fn is_stacked(t: u16) -> bool {
    matches!(t, ETH_MPLS | ETH_MPLS_MC | ETH_PBB | 0x8100 | 0x88a8)
}

/// A key being modified by actions, with what the key alone cannot hold.
#[derive(Debug, Clone, Copy)]
pub struct WorkingKey {
    /// The key.
    pub key: FlowKey,
    /// TCIs of the tags pushed over an existing tag, innermost first.
    hidden: [u16; VLAN_STACK],
    n_hidden: usize,
    /// False once an action was applied that the key cannot follow exactly
    /// (see the module docs).
    pub exact: bool,
}

impl WorkingKey {
    /// Start from a parsed key.
    pub fn new(key: FlowKey) -> WorkingKey {
        WorkingKey {
            key,
            hidden: [0; VLAN_STACK],
            n_hidden: 0,
            exact: true,
        }
    }

    /// Apply every action of `actions` in order.
    pub fn apply_all(&mut self, actions: &[Action]) {
        for a in actions {
            self.apply(a);
        }
    }

    /// Apply one action's effect to the key.
    pub fn apply(&mut self, a: &Action) {
        let k = &mut self.key;
        match *a {
            Action::SetField(f, v) => {
                // Setting VID/PCP on an untagged packet is undefined (§7.2.5);
                // validation prevents it for the rule's own match, and we
                // make it a no-op so the executor (which must do the same)
                // and the key agree.
                if matches!(f, Field::VlanVid | Field::VlanPcp) && !tagged(k) {
                    return;
                }
                // A relabelled packet (another EtherType or IP protocol,
                // another bottom-of-stack bit) parses differently; the key
                // cannot follow it.
                if matches!(f, Field::EthType | Field::IpProto | Field::MplsBos) {
                    self.exact = false;
                }
                let pbb = eth_type(k) == ETH_PBB;
                let before = pbb.then(|| macs(k));
                k.set(f, v);
                if let Some(old) = before.filter(|_| matches!(f, Field::EthDst | Field::EthSrc)) {
                    self.exact &= pbb_keep_customer_macs(k, old);
                }
            }
            Action::PushVlan(_) => {
                // The new tag copies VID and PCP from the outer tag if there
                // is one, else starts at 0 (§5.12 Table 7 / OVS behaviour).
                if tagged(k) {
                    let tci =
                        (k.get(Field::VlanVid) as u16) | ((k.get(Field::VlanPcp) as u16) << 13);
                    if self.n_hidden < VLAN_STACK {
                        self.hidden[self.n_hidden] = tci;
                        self.n_hidden += 1;
                    }
                } else {
                    k.set(Field::VlanVid, VID_PRESENT);
                    k.set(Field::VlanPcp, 0);
                }
                k.add_presence(present::VLAN);
            }
            Action::PopVlan => {
                if self.n_hidden > 0 {
                    self.n_hidden -= 1;
                    let tci = self.hidden[self.n_hidden];
                    k.set(Field::VlanVid, u128::from(tci & 0x1fff));
                    k.set(Field::VlanPcp, u128::from(tci >> 13));
                } else {
                    // An inner tag the parser did not record cannot be
                    // restored: the key says untagged (see the crate docs).
                    untag(k);
                }
            }
            Action::PushMpls(e) => self.exact &= push_mpls(k, e),
            Action::PopMpls(e) => self.exact &= pop_mpls(k, e),
            Action::PushPbb(e) => {
                self.exact &= push_pbb(k, e);
                self.n_hidden = 0;
            }
            Action::PopPbb => {
                if eth_type(k) == ETH_PBB {
                    self.exact &= pop_pbb(k);
                    self.n_hidden = 0;
                }
            }
            Action::Output { .. }
            | Action::SetNwTtl(_)
            | Action::DecNwTtl
            | Action::CopyTtlOut
            | Action::CopyTtlIn
            | Action::SetMplsTtl(_)
            | Action::DecMplsTtl
            | Action::SetQueue(_)
            | Action::SetWorkers(_)
            | Action::Group(_)
            | Action::Experimenter(_)
            // A band's DSCP remark depends on the rate, decided per packet
            // by the executor: the key keeps the DSCP the lookup saw.
            | Action::Meter(_) => {}
        }
    }
}

/// The key after `actions`, and whether it is exact (see the module docs).
pub fn key_after(key: &FlowKey, actions: &[Action]) -> (FlowKey, bool) {
    let mut w = WorkingKey::new(*key);
    w.apply_all(actions);
    (w.key, w.exact)
}

fn tagged(k: &FlowKey) -> bool {
    k.get(Field::VlanVid) & VID_PRESENT != 0
}

fn eth_type(k: &FlowKey) -> u16 {
    k.get(Field::EthType) as u16
}

fn macs(k: &FlowKey) -> u128 {
    (k.get(Field::EthDst) << 48) | k.get(Field::EthSrc)
}

fn untag(k: &mut FlowKey) {
    k.set(Field::VlanVid, 0);
    k.set(Field::VlanPcp, 0);
    k.clear_presence(present::VLAN);
}

fn clear_mpls(k: &mut FlowKey) {
    k.set(Field::MplsLabel, 0);
    k.set(Field::MplsTc, 0);
    k.set(Field::MplsBos, 0);
    k.clear_presence(present::MPLS);
    if k.presence() & present::MPLS_NEXT != 0 {
        k.set(encap::NEXT_LSE, 0);
        k.clear_presence(present::MPLS_NEXT);
    }
}

/// Clear every L3/L4 field (a payload nobody will see, or none), the
/// payload kind, and a tunnel id the payload gave.
fn clear_payload(k: &mut FlowKey) {
    for f in Field::ALL {
        if f.required_presence() & present::L3 != 0 {
            k.set(f, 0);
        }
    }
    if k.presence() & present::TUNNEL != 0 {
        k.set(Field::TunnelId, 0);
    }
    k.clear_presence(
        present::L3
            | present::L4
            | present::ND_TARGET
            | present::ND_SLL
            | present::ND_TLL
            | present::FRAG
            | present::LATER_FRAG
            | present::TUNNEL,
    );
    encap::set_payload(k, Payload::None);
}

/// After B-DA/B-SA changed on a PBB key whose MACs were `old`: store the
/// customer MACs if they now differ, forget them if they are equal again,
/// as the parser would. False when they cannot be stored.
fn pbb_keep_customer_macs(k: &mut FlowKey, old: u128) -> bool {
    let customer = if k.presence() & present::PBB_CMAC != 0 {
        k.get(encap::CUSTOMER_MACS)
    } else {
        old
    };
    if customer == macs(k) {
        if k.presence() & present::PBB_CMAC != 0 {
            k.set(encap::CUSTOMER_MACS, 0);
            k.clear_presence(present::PBB_CMAC);
        }
        true
    } else if k.presence() & present::ND_TARGET != 0 {
        false
    } else {
        k.set(encap::CUSTOMER_MACS, customer);
        k.add_presence(present::PBB_CMAC);
        true
    }
}

/// Push a label (the executor: copy the previous top with bottom-of-stack
/// cleared, else label 0, TC 0, bottom of stack). Exactness per the
/// module docs.
fn push_mpls(k: &mut FlowKey, e: u16) -> bool {
    if k.presence() & present::MPLS != 0 {
        let packed =
            (k.get(Field::MplsLabel) << 4) | (k.get(Field::MplsTc) << 1) | k.get(Field::MplsBos);
        k.set(encap::NEXT_LSE, packed);
        k.add_presence(present::MPLS_NEXT);
        k.set(Field::MplsBos, 0);
        k.set(Field::EthType, u128::from(e));
        return true;
    }
    let old = eth_type(k);
    let kind = Payload::of_ethertype(old);
    // Below a new bottom-of-stack label the parser picks the payload by its
    // first nibble: that is the old network header's kind when it parsed
    // (IPv4 and IPv6 check their version, ARP starts with 0x00).
    let exact = kind != Payload::None && k.presence() & present::L3 != 0;
    if kind == Payload::None {
        clear_payload(k);
    } else {
        encap::set_payload(k, kind);
    }
    if old == ETH_PBB {
        k.set(Field::PbbIsid, 0);
        k.set(encap::CUSTOMER_TYPE, 0);
        k.clear_presence(present::PBB_CMAC);
    }
    k.set(Field::MplsLabel, 0);
    k.set(Field::MplsTc, 0);
    k.set(Field::MplsBos, 1);
    k.add_presence(present::MPLS);
    k.set(Field::EthType, u128::from(e));
    exact
}

/// Pop the top label, setting the EtherType to `e`. No label: nothing (the
/// executor counts `pop_mpls_no_label`).
fn pop_mpls(k: &mut FlowKey, e: u16) -> bool {
    if k.presence() & present::MPLS == 0 {
        return true;
    }
    let bos = k.get(Field::MplsBos) != 0;
    let next = (k.presence() & present::MPLS_NEXT != 0).then(|| k.get(encap::NEXT_LSE));
    clear_mpls(k);
    k.set(Field::EthType, u128::from(e));
    if bos {
        // The payload is revealed: it is what the parser stored if it read
        // it as the kind `e` names (the same parser on the same bytes).
        let kind = Payload::of_ethertype(e);
        if kind != Payload::None && kind == encap::payload(k) {
            encap::set_payload(k, Payload::None);
            return true;
        }
        clear_payload(k);
        return !is_stacked(e);
    }
    if e != ETH_MPLS && e != ETH_MPLS_MC {
        // The next label would be read as the header `e` names.
        clear_payload(k);
        return false;
    }
    k.add_presence(present::MPLS);
    match next {
        Some(lse) => {
            k.set(Field::MplsLabel, lse >> 4);
            k.set(Field::MplsTc, (lse >> 1) & 7);
            k.set(Field::MplsBos, lse & 1);
            // A third label (the new top is not the bottom) is not stored.
            lse & 1 != 0
        }
        None => false,
    }
}

/// Push a PBB header (the executor: B-DA/B-SA copied from the frame's
/// addresses, I-TAG all zero, the old frame becoming the customer frame).
fn push_pbb(k: &mut FlowKey, e: u16) -> bool {
    let was_tagged = k.presence() & present::VLAN != 0;
    let ctype = eth_type(k);
    let kind = Payload::of_ethertype(ctype);
    // The parser reads an untagged IPv4/IPv6/ARP customer payload with the
    // same function on the same bytes; anything else it does not store.
    if was_tagged || kind == Payload::None {
        clear_payload(k);
    } else {
        encap::set_payload(k, kind);
    }
    clear_mpls(k);
    k.clear_presence(present::PBB_CMAC);
    untag(k);
    // The key does not hold the TPID a tagged customer frame starts with.
    k.set(
        encap::CUSTOMER_TYPE,
        if was_tagged {
            0x8100
        } else {
            u128::from(ctype)
        },
    );
    k.set(Field::PbbIsid, 0);
    k.set(Field::EthType, u128::from(e));
    !was_tagged
}

/// Pop the PBB header of a PBB key.
fn pop_pbb(k: &mut FlowKey) -> bool {
    let ctype = k.get(encap::CUSTOMER_TYPE) as u16;
    // The parser leaves an ND payload's target out when it stores the
    // customer addresses (they share a slot): the popped key lacks it.
    let nd_lost = k.presence() & present::PBB_CMAC != 0
        && k.presence() & present::L4 != 0
        && k.get(Field::IpProto) == 58
        && matches!(k.get(Field::Icmpv6Type), 135 | 136);
    if k.presence() & present::PBB_CMAC != 0 {
        let m = k.get(encap::CUSTOMER_MACS);
        k.set(Field::EthDst, m >> 48);
        k.set(Field::EthSrc, m);
        k.set(encap::CUSTOMER_MACS, 0);
        k.clear_presence(present::PBB_CMAC);
    }
    k.set(encap::CUSTOMER_TYPE, 0);
    k.set(Field::PbbIsid, 0);
    untag(k);
    k.set(Field::EthType, u128::from(ctype));
    if encap::payload(k) != Payload::None {
        encap::set_payload(k, Payload::None);
        return !nd_lost;
    }
    clear_payload(k);
    ctype != 0 && !is_stacked(ctype)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An MPLS key as the parser gives it: top label `(label, tc, bos)`,
    /// an optional second entry, an IPv4/TCP payload.
    fn mpls_key(top: (u128, u128, u128), next: Option<u128>) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set(Field::EthType, 0x8847);
        k.set(Field::MplsLabel, top.0);
        k.set(Field::MplsTc, top.1);
        k.set(Field::MplsBos, top.2);
        k.add_presence(present::MPLS);
        if let Some(n) = next {
            k.set(encap::NEXT_LSE, n);
            k.add_presence(present::MPLS_NEXT);
        }
        k.set(Field::Ipv4Src, 0x0a00_0001);
        k.set(Field::IpProto, 6);
        k.set(Field::TcpDst, 80);
        k.add_presence(present::L3 | present::L4);
        encap::set_payload(&mut k, Payload::Ipv4);
        k
    }

    #[test]
    fn pop_mpls_reveals_the_payload_of_its_kind_only() {
        let k = mpls_key((100, 3, 1), None);
        let (after, exact) = key_after(&k, &[Action::PopMpls(0x0800)]);
        assert!(exact);
        assert_eq!(after.get(Field::EthType), 0x0800);
        assert_eq!(after.get(Field::TcpDst), 80);
        assert_eq!(after.presence(), present::L3 | present::L4);
        assert_eq!(encap::payload(&after), Payload::None);
        // Another kind: nothing revealed, still exact (the parser reads
        // nothing there either).
        let (after, exact) = key_after(&k, &[Action::PopMpls(0x86dd)]);
        assert!(exact);
        assert_eq!(after.presence(), 0);
        assert_eq!(after.get(Field::Ipv4Src), 0);
        // To MPLS below the bottom of the stack: the key cannot follow.
        assert!(!key_after(&k, &[Action::PopMpls(0x8847)]).1);
        // No label at all: nothing happens (the executor skips it too).
        let mut ip = FlowKey::ZERO;
        ip.set(Field::EthType, 0x0800);
        assert_eq!(key_after(&ip, &[Action::PopMpls(0x0806)]), (ip, true));
    }

    #[test]
    fn pop_mpls_walks_two_labels_then_gives_up() {
        let two = mpls_key((200, 5, 0), Some((100 << 4) | (3 << 1) | 1));
        let (after, exact) = key_after(&two, &[Action::PopMpls(0x8847)]);
        assert!(exact);
        assert_eq!(
            (
                after.get(Field::MplsLabel),
                after.get(Field::MplsTc),
                after.get(Field::MplsBos)
            ),
            (100, 3, 1)
        );
        assert_eq!(after.presence() & present::MPLS_NEXT, 0);
        // The second entry is not the bottom: a third label exists.
        let three = mpls_key((200, 5, 0), Some((100 << 4) | (3 << 1)));
        assert!(!key_after(&three, &[Action::PopMpls(0x8847)]).1);
        // A non-bottom label popped to IPv4 re-reads a label as IPv4.
        assert!(!key_after(&two, &[Action::PopMpls(0x0800)]).1);
    }

    #[test]
    fn push_then_pop_pbb_restores_the_key() {
        let mut k = mpls_key((0, 0, 0), None);
        // Make it a plain IPv4 key.
        k.set(Field::EthType, 0x0800);
        k.set(Field::MplsLabel, 0);
        k.clear_presence(present::MPLS);
        encap::set_payload(&mut k, Payload::None);
        k.set(Field::EthDst, 0xbb);
        let (pushed, exact) = key_after(&k, &[Action::PushPbb(0x88e7)]);
        assert!(exact);
        assert_eq!(pushed.get(Field::EthType), 0x88e7);
        assert_eq!(pushed.get(encap::CUSTOMER_TYPE), 0x0800);
        assert_eq!(encap::payload(&pushed), Payload::Ipv4);
        let acts = [
            Action::PushPbb(0x88e7),
            Action::SetField(Field::EthDst, 0xcc),
            Action::SetField(Field::PbbIsid, 9),
            Action::PopPbb,
        ];
        assert_eq!(key_after(&k, &acts), (k, true));
        // A tagged frame's tag goes inside: popping cannot restore it.
        let mut tagged = k;
        tagged.set(Field::VlanVid, VID_PRESENT | 5);
        tagged.add_presence(present::VLAN);
        assert!(!key_after(&tagged, &[Action::PushPbb(0x88e7), Action::PopPbb]).1);
    }
}
