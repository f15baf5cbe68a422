//! offlow-flow: the vocabulary every tier shares.
//!
//! What: [`FlowKey`] (every OpenFlow 1.3 basic OXM field of a packet plus
//! in_port and metadata, packed into 16 words), masks, [`Match`], and
//! `extract`, which parses a frame into a key (a fast path for the common
//! Ethernet/IPv4/TCP-UDP frame in `extract_fast`, the general parser for
//! the rest; both give identical results).
//!
//! Invariants: a key's field bits outside the field's width are zero; a
//! [`Match`] keeps its value pre-masked; parsing never panics and never reads
//! past the frame.
//!
//! Thread-safety: plain data, `Send + Sync`.
#![warn(missing_docs)]
// Exports are what other crates use; the rest is `pub(crate)`. (Crate
// level until the lint can be a workspace one: see the root Cargo.toml.)

pub mod extract;
pub mod extract_fast;
pub mod key;
pub mod prereq;

pub use extract::{
    extract, extract_into, extract_to, extract_to_general, L3Kind, L4Kind, Layout, ParseStats,
    Parsed, TunnelKind,
};
pub use key::{encap, present, Field, FieldLoc, FlowKey, FlowMask, Match, KEY_WORDS};
pub use prereq::check_match_prerequisites;
