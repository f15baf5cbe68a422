//! The software model backend: a table with configurable capabilities and
//! room, so placement and the switch's bookkeeping are testable without
//! privileges or a kernel. Tests play the hardware's part with
//! [`ModelBackend::serve`], which finds the entry a frame's key hits and
//! counts it, exactly as a backend's data path would. Tunnels are modelled
//! at the level of keys and capabilities: a decapsulated frame's key is
//! the inner frame's on the tunnel port ([`crate::tunnel`]), and
//! [`ModelBackend::full_with_tunnels`] declares what the XDP backend
//! serves of each tunnel.

use std::collections::HashMap;

use crate::backend::{EntryCounters, OffloadBackend, OffloadError};
use crate::caps::{ActionKinds, Capabilities, CLASS_FIELDS};
use crate::key::OffloadKey;
use crate::mask::{OffloadMask, OffloadMatch};
use crate::program::OffloadProgram;
use crate::tunnel::TunnelPort;
use crate::Refusal;

/// A software stand-in for an offload device (module docs).
#[derive(Debug, Clone)]
pub struct ModelBackend {
    caps: Capabilities,
    entries: HashMap<OffloadMatch, (OffloadProgram, EntryCounters)>,
    /// Operations that reached the table (installs and removals), for tests
    /// of churn and hysteresis.
    pub operations: u64,
}

impl ModelBackend {
    /// A backend with these capabilities.
    pub fn new(caps: Capabilities) -> ModelBackend {
        ModelBackend {
            caps,
            entries: HashMap::new(),
            operations: 0,
        }
    }

    /// A backend that can do everything the tier knows, on `ports`, with
    /// `room` entries.
    pub fn full(ports: Vec<u32>, room: usize) -> ModelBackend {
        ModelBackend::new(Capabilities {
            match_fields: CLASS_FIELDS.to_vec(),
            masks: 0,
            actions: ActionKinds::ALL,
            room,
            counters: true,
            ports,
            tunnels: Vec::new(),
        })
    }

    /// [`ModelBackend::full`] told of `tunnels` too, declaring what the XDP
    /// backend serves of each ([`TunnelPort::xdp_support`]).
    pub fn full_with_tunnels(ports: Vec<u32>, tunnels: &[TunnelPort], room: usize) -> ModelBackend {
        let mut m = ModelBackend::full(ports, room);
        m.caps.tunnels = tunnels.iter().map(TunnelPort::xdp_support).collect();
        m
    }

    /// The program installed for `m`, if any.
    pub fn program(&self, m: &OffloadMatch) -> Option<&OffloadProgram> {
        self.entries.get(m).map(|(p, _)| p)
    }

    /// Distinct masks of the masked entries installed.
    fn masks_in_use(&self) -> Vec<OffloadMask> {
        let mut masks: Vec<OffloadMask> = Vec::new();
        for m in self.entries.keys().filter(|m| !m.is_exact()) {
            if !masks.contains(&m.mask) {
                masks.push(m.mask);
            }
        }
        masks
    }

    /// Play the device: a frame of `key` with `bytes` bytes arrives. The
    /// program that serves it (its exact entry's, else the first masked
    /// entry's that matches it), counted, or `None` (it goes up).
    pub fn serve(&mut self, key: &OffloadKey, bytes: u64) -> Option<OffloadProgram> {
        let hit = std::iter::once(OffloadMatch::exact(*key))
            .chain(
                self.masks_in_use()
                    .into_iter()
                    .map(|mask| OffloadMatch::new(key, mask)),
            )
            .find(|m| self.entries.contains_key(m))?;
        let (p, c) = self.entries.get_mut(&hit)?;
        c.packets += 1;
        c.bytes += bytes;
        Some(*p)
    }
}

impl OffloadBackend for ModelBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn describe(&self) -> String {
        format!(
            "software model ({} of {} entries, actions {})",
            self.entries.len(),
            self.caps.room,
            self.caps.actions
        )
    }

    fn install(&mut self, m: &OffloadMatch, program: &OffloadProgram) -> Result<(), OffloadError> {
        self.caps.admits(m, program)?;
        let masks = self.masks_in_use();
        if !m.is_exact() && !masks.contains(&m.mask) && masks.len() >= self.caps.masks {
            return Err(Refusal::MaskRoom(self.caps.masks).into());
        }
        if let Some((p, _)) = self.entries.get_mut(m) {
            // A replacement keeps the entry's counters: it is the same
            // microflow, now with a new decision.
            *p = *program;
        } else {
            if self.entries.len() >= self.caps.room {
                return Err(Refusal::Full(self.caps.room).into());
            }
            self.entries
                .insert(*m, (*program, EntryCounters::default()));
        }
        self.operations += 1;
        Ok(())
    }

    fn remove(&mut self, m: &OffloadMatch) -> Result<EntryCounters, OffloadError> {
        let (_, c) = self.entries.remove(m).ok_or(OffloadError::NotFound)?;
        self.operations += 1;
        Ok(c)
    }

    fn counters(&mut self, m: &OffloadMatch) -> Result<EntryCounters, OffloadError> {
        self.entries
            .get(m)
            .map(|(_, c)| *c)
            .ok_or(OffloadError::NotFound)
    }

    fn all_counters(&mut self, visit: &mut dyn FnMut(&OffloadMatch, EntryCounters)) {
        for (k, (_, c)) in &self.entries {
            visit(k, *c);
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::Verdict;

    fn key(n: u16) -> OffloadMatch {
        crate::key::udp_key(n).into()
    }

    fn key_of(n: u16) -> OffloadKey {
        crate::key::udp_key(n)
    }

    #[test]
    fn room_is_enforced_and_a_full_table_changes_nothing() {
        let mut m = ModelBackend::full(vec![1, 2], 2);
        let fwd = OffloadProgram::plain(Verdict::Port(2));
        m.install(&key(1), &fwd).unwrap();
        m.install(&key(2), &fwd).unwrap();
        assert_eq!(
            m.install(&key(3), &fwd),
            Err(OffloadError::Refused(Refusal::Full(2)))
        );
        assert_eq!(m.len(), 2);
        assert!(m.program(&key(3)).is_none());
        // Replacing an installed entry needs no room.
        m.install(&key(1), &OffloadProgram::plain(Verdict::Drop))
            .unwrap();
        assert_eq!(m.program(&key(1)).unwrap().verdict, Verdict::Drop);
    }

    #[test]
    fn counters_are_cumulative_and_returned_on_removal() {
        let mut m = ModelBackend::full(vec![1, 2], 8);
        m.install(&key(1), &OffloadProgram::plain(Verdict::Port(2)))
            .unwrap();
        for _ in 0..3 {
            assert!(m.serve(&key_of(1), 64).is_some());
        }
        assert!(m.serve(&key_of(2), 64).is_none());
        let c = m.counters(&key(1)).unwrap();
        assert_eq!(
            c,
            EntryCounters {
                packets: 3,
                bytes: 192
            }
        );
        m.serve(&key_of(1), 100);
        assert_eq!(
            m.remove(&key(1)).unwrap().since(c),
            EntryCounters {
                packets: 1,
                bytes: 100
            }
        );
        assert_eq!(m.remove(&key(1)), Err(OffloadError::NotFound));
    }

    #[test]
    fn masked_entries_serve_every_matching_microflow_within_the_mask_room() {
        let mut m = ModelBackend::full(vec![1, 2], 8);
        let fwd = OffloadProgram::plain(Verdict::Port(2));
        let per_pair = OffloadMatch::new(&key_of(1), OffloadMask::SHAPE);
        assert_eq!(
            m.install(&per_pair, &fwd),
            Err(OffloadError::Refused(Refusal::Masked))
        );
        m.caps.masks = 1;
        m.install(&per_pair, &fwd).unwrap();
        for port in [1, 2, 3] {
            assert!(m.serve(&key_of(port), 64).is_some());
        }
        let other = OffloadKey {
            in_port: 2,
            ..key_of(1)
        };
        assert!(m.serve(&other, 64).is_none());
        assert_eq!(m.counters(&per_pair).unwrap().packets, 3);
        // An exact entry is found first.
        m.install(&key(1), &OffloadProgram::plain(Verdict::Drop))
            .unwrap();
        assert_eq!(m.serve(&key_of(1), 64).unwrap().verdict, Verdict::Drop);
        // A second distinct mask exceeds the room; the same mask does not.
        let by_dst = OffloadMask {
            tp_dst: u16::MAX,
            ..OffloadMask::SHAPE
        };
        assert_eq!(
            m.install(&OffloadMatch::new(&key_of(1), by_dst), &fwd),
            Err(OffloadError::Refused(Refusal::MaskRoom(1)))
        );
        m.install(&OffloadMatch::new(&other, OffloadMask::SHAPE), &fwd)
            .unwrap();
        m.remove(&per_pair).unwrap();
        m.remove(&OffloadMatch::new(&other, OffloadMask::SHAPE))
            .unwrap();
        m.install(&OffloadMatch::new(&key_of(1), by_dst), &fwd)
            .unwrap();
    }
}
