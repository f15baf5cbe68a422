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
use crate::program::OffloadProgram;
use crate::tunnel::TunnelPort;
use crate::Refusal;

/// A software stand-in for an offload device (module docs).
#[derive(Debug, Clone)]
pub struct ModelBackend {
    caps: Capabilities,
    entries: HashMap<OffloadKey, (OffloadProgram, EntryCounters)>,
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
            masks: false,
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

    /// The program installed for `key`, if any.
    pub fn program(&self, key: &OffloadKey) -> Option<&OffloadProgram> {
        self.entries.get(key).map(|(p, _)| p)
    }

    /// Play the device: a frame of `key` with `bytes` bytes arrives. The
    /// program that serves it, counted, or `None` (it goes up).
    pub fn serve(&mut self, key: &OffloadKey, bytes: u64) -> Option<OffloadProgram> {
        let (p, c) = self.entries.get_mut(key)?;
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

    fn install(&mut self, key: &OffloadKey, program: &OffloadProgram) -> Result<(), OffloadError> {
        self.caps.admits(key, program)?;
        if let Some((p, _)) = self.entries.get_mut(key) {
            // A replacement keeps the entry's counters: it is the same
            // microflow, now with a new decision.
            *p = *program;
        } else {
            if self.entries.len() >= self.caps.room {
                return Err(Refusal::Full(self.caps.room).into());
            }
            self.entries
                .insert(*key, (*program, EntryCounters::default()));
        }
        self.operations += 1;
        Ok(())
    }

    fn remove(&mut self, key: &OffloadKey) -> Result<EntryCounters, OffloadError> {
        let (_, c) = self.entries.remove(key).ok_or(OffloadError::NotFound)?;
        self.operations += 1;
        Ok(c)
    }

    fn counters(&mut self, key: &OffloadKey) -> Result<EntryCounters, OffloadError> {
        self.entries
            .get(key)
            .map(|(_, c)| *c)
            .ok_or(OffloadError::NotFound)
    }

    fn all_counters(&mut self, visit: &mut dyn FnMut(&OffloadKey, EntryCounters)) {
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

    fn key(n: u16) -> OffloadKey {
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
            assert!(m.serve(&key(1), 64).is_some());
        }
        assert!(m.serve(&key(2), 64).is_none());
        let c = m.counters(&key(1)).unwrap();
        assert_eq!(
            c,
            EntryCounters {
                packets: 3,
                bytes: 192
            }
        );
        m.serve(&key(1), 100);
        assert_eq!(
            m.remove(&key(1)).unwrap().since(c),
            EntryCounters {
                packets: 1,
                bytes: 100
            }
        );
        assert_eq!(m.remove(&key(1)), Err(OffloadError::NotFound));
    }
}
