//! offlow-sync: how the switch's threads share memory, and how its hot
//! loops lay it out.
//!
//! What: the tools the classifiers, the pipeline and the datapath build on,
//! none of which knows about flows or packets:
//! - [`Versioned<T, Op>`]: left-right publication. One writer applies
//!   operations ([`Apply<Op>`]) to a private copy and publishes them at
//!   once; readers ([`ReadHandle`]) read the published copy with no lock,
//!   no allocation and no wait. The writer's and readers' threads are the
//!   datapath's control and workers; the benches use it the same way.
//! - [`CachePadded<T>`]: a value alone on its two cache lines, so one
//!   core's stores (an epoch, an ack, a counter) do not slow another core's
//!   loads of its neighbours.
//! - [`prefetch`]: a cache-line hint for loops that know their next items'
//!   addresses a few items ahead.
//! - [`IdMap`]: a `HashMap` with a one-multiply hasher for keys the switch
//!   allocates itself (rule ids, action refs), where SipHash's flooding
//!   defence buys nothing and costs more than the lookup.
//! - [`HugeSlice<T>`]: a large table in transparent huge pages, for
//!   structures touched at random (a worker's microflow cache), where 4 KiB
//!   pages cost a TLB miss per access.
//!
//! Invariants (proved in [`versioned`], next to the code that keeps them):
//! - a copy is never mutated while any reader holds a reference into it;
//! - a read section sees exactly one published version, never a mix;
//! - when [`Versioned::publish`] returns, no read section that starts
//!   afterwards sees an older version (the quiescent point).
//!
//! Thread-safety: `Versioned` is the single writer (`&mut self`, `Send`);
//! each reader thread owns one `ReadHandle` (`Send`, not `Sync`).
//! `CachePadded<T>` and `IdMap` are as thread-safe as what they hold;
//! `prefetch` never faults and changes nothing.
//!
//! Why a crate of its own: these are publication and memory tools, not
//! classifiers; the datapath's worker and control, the pipeline's expiry
//! and the benches' core-to-core probes use them without needing a
//! classifier.
#![warn(missing_docs)]
// Exports are what other crates use; the rest is `pub(crate)`. (Crate
// level until the lint can be a workspace one: see the root Cargo.toml.)

mod huge;
pub mod idmap;
mod padded;
mod prefetch;
pub mod versioned;

pub use huge::{HugeSlice, HUGE_PAGE};
pub use idmap::{IdBuildHasher, IdHasher, IdMap};
pub use padded::CachePadded;
pub use prefetch::prefetch;
pub use versioned::{Apply, ReadGuard, ReadHandle, Versioned};
