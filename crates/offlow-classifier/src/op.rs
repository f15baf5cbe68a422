//! [`ClassifierOp`]: a classifier update as a replayable operation, so a
//! classifier can sit behind [`offlow_sync::Versioned`] (lock-free readers,
//! one writer applying each op to both copies).
//!
//! `Apply` belongs to `offlow-sync`, so Rust's orphan rule forbids one
//! blanket `impl<C: Classify> Apply<ClassifierOp> for C` here: each
//! classifier of this crate gets its impl from [`impl_apply`], and a
//! classifier defined elsewhere writes its own two-line impl with
//! [`ClassifierOp::apply_to`] and [`ClassifierOp::apply_owned_to`].

use offlow_sync::Apply;

use crate::{Classifier, Classify, FibClassifier, LinearClassifier, Rule, RuleId, TupleMerge};

/// Update operations for any classifier.
// Unboxed on purpose: ops sit in a Vec oplog (contiguous, reused), and a
// box would cost an allocation per update on the writer.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum ClassifierOp {
    /// Insert (or replace) a rule.
    Insert(Rule),
    /// Remove the rule with this id.
    Remove(RuleId),
}

impl ClassifierOp {
    /// Apply this op to `c` (what [`Apply::apply`] does).
    pub fn apply_to<C: Classify + ?Sized>(&self, c: &mut C) {
        match self {
            ClassifierOp::Insert(r) => c.insert(r.clone()),
            ClassifierOp::Remove(id) => {
                c.discard(*id);
            }
        }
    }

    /// Apply this op to `c`, moving its rule in (what
    /// [`Apply::apply_owned`] does on the replay).
    pub fn apply_owned_to<C: Classify + ?Sized>(self, c: &mut C) {
        match self {
            ClassifierOp::Insert(r) => c.insert(r),
            ClassifierOp::Remove(id) => {
                c.discard(id);
            }
        }
    }
}

/// `Apply<ClassifierOp>` for each listed classifier type.
macro_rules! impl_apply {
    ($($t:ty),* $(,)?) => {$(
        impl Apply<ClassifierOp> for $t {
            fn apply(&mut self, op: &ClassifierOp) {
                op.apply_to(self);
            }

            fn apply_owned(&mut self, op: ClassifierOp) {
                op.apply_owned_to(self);
            }
        }
    )*};
}

impl_apply!(Classifier, FibClassifier, LinearClassifier, TupleMerge);
