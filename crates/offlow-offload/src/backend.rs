//! The interface every backend implements, and the errors it reports.

use crate::caps::Capabilities;
use crate::mask::OffloadMatch;
use crate::program::OffloadProgram;
use crate::Refusal;

/// Cumulative packets and bytes an entry has served since it was installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EntryCounters {
    /// Frames.
    pub packets: u64,
    /// Bytes (as received, before any rewrite).
    pub bytes: u64,
}

impl EntryCounters {
    /// What was served between `earlier` and `self` (both cumulative).
    pub fn since(self, earlier: EntryCounters) -> EntryCounters {
        EntryCounters {
            packets: self.packets.wrapping_sub(earlier.packets),
            bytes: self.bytes.wrapping_sub(earlier.bytes),
        }
    }
}

/// Why a backend operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// The backend cannot serve the entry; it stays in software.
    #[error("not offloadable: {0}")]
    Refused(#[from] Refusal),
    /// No entry for this match.
    #[error("no offloaded entry for this match")]
    NotFound,
    /// The backend itself failed (a map update, a syscall); the message says
    /// what and why. The entry is in software.
    #[error("offload backend: {0}")]
    Backend(String),
}

/// A place beside the CPU that serves microflows (exact entries) and
/// megaflows (masked ones, where the capabilities allow: `masks`).
///
/// Contract: after [`install`](Self::install) returns `Ok`, frames that
/// `m` matches arriving on the backend's ports are served with `program`
/// (a frame that an exact entry and a masked one both match may be served
/// by either: the switch installs only entries that decide alike); after
/// [`remove`](Self::remove) (or an `install` that replaces the program)
/// returns, no frame is served with the old program any more — the backend
/// waits out frames in flight — so the switch can send a barrier reply.
/// Counters are cumulative per installation and read exactly: a removal
/// returns the entry's final counters.
pub trait OffloadBackend: Send {
    /// What it can do.
    fn capabilities(&self) -> &Capabilities;

    /// One line for logs and `offlow demo`: the backend and its mode
    /// (e.g. "xdp native on s1, s2").
    fn describe(&self) -> String;

    /// Install or replace the entry for `m`. Fails, and changes nothing,
    /// when the capabilities do not admit it or there is no room.
    fn install(&mut self, m: &OffloadMatch, program: &OffloadProgram) -> Result<(), OffloadError>;

    /// Install or replace several entries, then wait once for frames in
    /// flight: one grace period for a whole batch. Each result says whether
    /// that entry went down.
    fn install_batch(
        &mut self,
        entries: &[(OffloadMatch, OffloadProgram)],
    ) -> Vec<Result<(), OffloadError>> {
        entries.iter().map(|(k, p)| self.install(k, p)).collect()
    }

    /// Remove the entry for `m`; its final counters.
    fn remove(&mut self, m: &OffloadMatch) -> Result<EntryCounters, OffloadError>;

    /// Remove several entries with one wait for frames in flight; each
    /// entry's final counters (or why not).
    fn remove_batch(&mut self, keys: &[OffloadMatch]) -> Vec<Result<EntryCounters, OffloadError>> {
        keys.iter().map(|k| self.remove(k)).collect()
    }

    /// The entry's cumulative counters.
    fn counters(&mut self, m: &OffloadMatch) -> Result<EntryCounters, OffloadError>;

    /// Every entry's cumulative counters.
    fn all_counters(&mut self, visit: &mut dyn FnMut(&OffloadMatch, EntryCounters));

    /// The backend's own named counters (where frames went, every drop in
    /// the device by reason), cumulative; none by default.
    fn named_counters(&mut self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Entries installed.
    fn len(&self) -> usize;

    /// No entries installed?
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
