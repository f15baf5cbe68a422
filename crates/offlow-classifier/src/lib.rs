//! offlow-classifier: masked, priority-ordered classification of flow keys.
//!
//! What: a [`Rule`] is a masked [`Match`] over the [`FlowKey`] plus optional
//! native ranges on the two transport ports (ClassBench semantics), a
//! priority and a caller-chosen id. A classifier answers "which rule with the
//! highest priority matches this key?". Every implementation obeys the
//! [`Classify`] trait and is checked against [`LinearClassifier`], the oracle.
//!
//! Invariants:
//! - Higher priority wins; among equal priorities the smaller [`RuleId`] wins,
//!   so every implementation gives the same answer for the same rule set.
//! - Rule ids are unique within one classifier; inserting an existing id
//!   replaces that rule.
//!
//! Thread-safety: classifiers are plain single-writer data structures
//! (`Send + Sync`, lookups take `&self`). Lock-free concurrent readers with a
//! writer publishing new versions come from `offlow_sync::Versioned`, which
//! replays a [`ClassifierOp`] on each copy.
#![warn(missing_docs)]
// Exports are what other crates use; the rest is `pub(crate)`. (Crate
// level until the lint can be a workspace one: see the root Cargo.toml.)

pub mod adaptive;
mod chunkvec;
pub mod dir24;
pub mod idtable;
pub mod linear;
mod linevec;
pub mod lpm;
mod op;
pub mod rfc;
pub mod rule;
pub mod snapshot;
pub mod tuple;

pub use adaptive::{BuildInput, Built, Classifier, ClassifierConfig, Compiled, FibCopies};
pub use dir24::{Dir24, FibError};
pub use idtable::IdTable;
pub use linear::LinearClassifier;
pub use lpm::{BinaryTrie, FibClassifier, FibRoutes, FibRuleError};
pub use offlow_flow::{Field, FlowKey, Match};
pub use op::ClassifierOp;
pub use rfc::{Rfc, RfcAnswer, RfcConfig, RfcError, RfcRank, RfcSet, RfcSetConfig};
pub use rule::{PortRange, Priority, Rule, RuleId};
pub use snapshot::{OverlayStats, RfcSnapshot, Snapshot};
pub use tuple::{TupleConfig, TupleMerge};

/// The operations every classifier offers.
pub trait Classify {
    /// Insert `rule`, replacing any rule with the same id.
    fn insert(&mut self, rule: Rule);
    /// Remove the rule with `id`, returning it.
    fn remove(&mut self, id: RuleId) -> Option<Rule>;
    /// Remove the rule with `id` without handing it back; true if it was
    /// held. What update paths call: a structure that can free a rule
    /// without reading the whole of it overrides this.
    fn discard(&mut self, id: RuleId) -> bool {
        self.remove(id).is_some()
    }
    /// The winning rule for `key`, if any.
    fn lookup(&self, key: &FlowKey) -> Option<RuleId>;
    /// Look up every key of `keys`; `out[i]` receives the answer for `keys[i]`.
    ///
    /// # Panics
    /// If `out` is shorter than `keys` (a caller bug, not packet-driven).
    fn lookup_batch(&self, keys: &[FlowKey], out: &mut [Option<RuleId>]) {
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = self.lookup(k);
        }
        assert!(out.len() >= keys.len(), "lookup_batch: output too short");
    }
    /// Number of rules held.
    fn len(&self) -> usize;
    /// True when no rule is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A copy of the rule with `id`, if present (owned: a structure may
    /// store its rules compactly and rebuild them on request).
    fn get(&self, id: RuleId) -> Option<Rule>;
}
