//! The configured steering table: `(match, worker mask)` pairs from the
//! switch's configuration (`[[steer]]`), giving the packets they match the
//! same treatment as an `offlow_workers` action
//! ([`offlow_pipeline::Action::SetWorkers`]) without touching any flow.
//!
//! Consulted only when a packet is resolved through the pipeline (a cache
//! miss), on the packet's own key; the first matching entry wins. Its mask
//! becomes part of the cached decision (see
//! [`ActionTable::intern_steered`](crate::ActionTable::intern_steered)), so
//! a cache hit pays nothing for it. A mask in the decision's actions takes
//! precedence. The table is fixed when the worker starts (no invalidation
//! needed).
//!
//! Thread-safety: immutable once built; shared between workers by `Arc`.

use std::sync::Arc;

use offlow_flow::{FlowKey, Match};

/// One configured steering entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteerRule {
    /// Packets this entry applies to.
    pub matcher: Match,
    /// The workers allowed to process them (bit i = worker i); non-zero.
    pub workers: u64,
}

/// The configured steering entries, in order (first match wins).
#[derive(Debug, Clone, Default)]
pub struct SteeringTable {
    rules: Arc<[SteerRule]>,
}

impl SteeringTable {
    /// A table of `rules` (entries with a zero mask are left out: they
    /// could steer nowhere).
    pub fn new(rules: impl IntoIterator<Item = SteerRule>) -> SteeringTable {
        SteeringTable {
            rules: rules.into_iter().filter(|r| r.workers != 0).collect(),
        }
    }

    /// True when there is no entry (the worker then never looks).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The entries.
    pub fn rules(&self) -> &[SteerRule] {
        &self.rules
    }

    /// The mask of the first entry matching `key`.
    pub fn lookup(&self, key: &FlowKey) -> Option<u64> {
        self.rules
            .iter()
            .find(|r| r.matcher.matches(key))
            .map(|r| r.workers)
    }
}
