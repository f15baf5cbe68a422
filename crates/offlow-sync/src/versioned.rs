//! Left-right versioned publish: lock-free readers, one writer.
//!
//! What: [`Versioned<T, Op>`] keeps two copies of a `T`. Readers read the
//! *active* copy; the single writer applies operations ([`Apply<Op>`]) to the
//! *inactive* copy and records them in an oplog. [`Versioned::publish`] swaps
//! the active index, waits until every reader that might still be reading
//! the old copy has left its read section, and then replays the oplog onto
//! the old copy, so both copies are equal again and the old one becomes the
//! next inactive copy.
//!
//! A writer that must not wait (a control loop serving other clients)
//! splits that in two: [`Versioned::publish_start`] swaps and notes which
//! readers were inside a section; [`Versioned::try_settle`] checks, without
//! waiting, whether each has since left, and replays once all have. Until
//! then the pair is *settling*: the writer reads the new active copy
//! ([`Versioned::writer_view`]), and the next [`Versioned::apply`] settles
//! first (waiting if it must), since the old copy is the one it writes.
//!
//! Readers register once ([`Versioned::reader`]) and then call
//! [`ReadHandle::enter`] per batch of packets: two atomic stores and one
//! atomic load, no lock, no allocation, never a wait.
//!
//! Invariants:
//! - no reader ever holds a reference into the inactive copy while the
//!   writer mutates it (established by the wait in `publish`);
//! - a read section sees exactly one copy: a published version, never a mix;
//! - when `publish` returns, every read section that starts afterwards sees
//!   the new version or a later one (the quiescent point has passed: no
//!   reader can still observe the previous version); the same holds once
//!   `try_settle` has returned true after a `publish_start`.
//!
//! Thread-safety: `Versioned` is the writer (`&mut self` methods; `Send`
//! when `T` is). `ReadHandle` is `Send` but not `Sync`: one handle per
//! reader thread. Reader epochs: each reader owns a counter that is odd while
//! inside a read section. The ordering argument is in [`ReadHandle::enter`]
//! and [`Versioned::publish`].

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::CachePadded;

/// A state that can replay a recorded operation. Applying the same sequence
/// of operations to two equal states must give two equal states
/// (determinism), since each operation is applied once to each copy.
pub trait Apply<Op> {
    /// Apply `op` to `self`.
    fn apply(&mut self, op: &Op);

    /// Apply `op`, consuming it: the replay on publish, whose oplog is
    /// done with each op once the second copy has it. An op that carries
    /// owned data (a whole rule) can move it in instead of cloning it.
    fn apply_owned(&mut self, op: Op)
    where
        Op: Sized,
    {
        self.apply(&op);
    }

    /// Hint that `op` is applied soon: start loading what it will touch.
    /// Must not change anything. The replay on publish calls it a few ops
    /// ahead, so that the cache misses of consecutive ops on a big state
    /// overlap instead of queueing one after another.
    fn prefetch(&self, _op: &Op) {}

    /// A later stage of [`prefetch`](Self::prefetch), called when `op` is
    /// `stage` ops ahead (`REPLAY_NEAR`: 2, then 1): may read what the
    /// earlier stages loaded (so those reads hit) and start loading the
    /// next level of a dependent chain (a trie walk). Must not change
    /// anything.
    fn prefetch_near(&self, _op: &Op, _stage: usize) {}

    /// The second copy of a pair, equal to `self`: a clone, unless the
    /// state keeps parts that only the copy ahead needs once for both
    /// (the pipeline's match indexes, which only its writer reads).
    fn replica(&self) -> Self
    where
        Self: Clone,
    {
        self.clone()
    }
}

/// How many ops ahead the replay prefetches: far enough for a miss to
/// land before its op comes up (an op takes a few hundred ns on a
/// 512K-rule pipeline), near enough not to evict what is still needed.
const REPLAY_LOOKAHEAD: usize = 4;

/// Distances (in ops) at which the replay calls [`Apply::prefetch_near`],
/// farthest first: each stage reads what the previous one loaded.
const REPLAY_NEAR: [usize; 2] = [2, 1];

/// A copy and the version it holds. Aligned, and so padded, to 128 bytes
/// (two lines: what the adjacent-line prefetcher moves together) so that no
/// other field shares a line with a copy: the writer stores into the
/// inactive copy's fields on every operation, and a reader's load of
/// `active` that shared a line with them missed on nearly every batch
/// (3.3% of a classify reader's time at 1M updates/s).
#[repr(align(128))]
struct Replica<T> {
    version: u64,
    value: T,
}

/// One reader's epoch: odd while inside a read section. Padded to its own
/// lines so readers do not false-share.
type ReaderSlot = CachePadded<AtomicU64>;

struct Shared<T> {
    copies: [UnsafeCell<Replica<T>>; 2],
    /// Index (0 or 1) of the copy readers must use, alone on its lines:
    /// every read section loads it, and only a publish writes it.
    active: CachePadded<AtomicUsize>,
    /// Registered readers. Locked only on registration, handle drop and by
    /// the writer in `publish`; never by a read section.
    readers: Mutex<Vec<Arc<ReaderSlot>>>,
}

// SAFETY: readers only get `&T` of the active copy (so `T: Sync` is needed
// to share it across threads) and the writer mutates the inactive copy from
// its own thread (so `T: Send`). The left-right protocol guarantees that a
// copy is never mutated while any reader holds a reference into it.
unsafe impl<T: Send + Sync> Sync for Shared<T> {}
// SAFETY: as above; moving the shared state moves the `T`s (`T: Send`).
unsafe impl<T: Send + Sync> Send for Shared<T> {}

/// The writer side: two copies, an oplog and the version counter.
pub struct Versioned<T, Op> {
    shared: Arc<Shared<T>>,
    /// Ops applied to the inactive copy since the last publish; while
    /// settling, the ops the old copy still lacks.
    oplog: Vec<Op>,
    /// Version of the currently published copy.
    version: u64,
    /// Settling after [`Versioned::publish_start`]: the readers that were
    /// inside a section at the swap, each with the (odd) epoch it had. Empty
    /// with `settling` true means only the replay is left.
    inside: Vec<(Arc<ReaderSlot>, u64)>,
    settling: bool,
}

impl<T: Apply<Op> + Clone, Op> Versioned<T, Op> {
    /// Publish `value` as version 0.
    pub fn new(value: T) -> Self {
        let other = value.replica();
        let shared = Shared {
            copies: [
                UnsafeCell::new(Replica { version: 0, value }),
                UnsafeCell::new(Replica {
                    version: 0,
                    value: other,
                }),
            ],
            active: CachePadded(AtomicUsize::new(0)),
            readers: Mutex::new(Vec::new()),
        };
        Versioned {
            shared: Arc::new(shared),
            oplog: Vec::new(),
            version: 0,
            inside: Vec::new(),
            settling: false,
        }
    }
}

impl<T: Apply<Op>, Op> Versioned<T, Op> {
    /// Register a new reader.
    pub fn reader(&self) -> ReadHandle<T> {
        let slot = Arc::new(CachePadded(AtomicU64::new(0)));
        lock(&self.shared.readers).push(slot.clone());
        ReadHandle {
            shared: self.shared.clone(),
            slot,
            _not_sync: PhantomData,
        }
    }

    fn inactive(&self) -> usize {
        // Only the writer stores `active`, so a relaxed load of our own
        // last store is exact.
        1 - self.shared.active.0.load(Ordering::Relaxed)
    }

    /// The writer's view: every applied operation (published or not). The
    /// inactive copy; while settling, the active one (the inactive copy
    /// still lacks the last publish's ops then).
    pub fn writer_view(&self) -> &T {
        let i = if self.settling {
            1 - self.inactive()
        } else {
            self.inactive()
        };
        // SAFETY: only the writer (`self`, borrowed shared here, so no
        // `&mut` method runs concurrently) mutates copies. The inactive copy
        // has no readers; the active one, read while settling, is not
        // mutated until the next publish swaps it out, and readers only
        // read it too. So a shared borrow is sound.
        unsafe { &(*self.shared.copies[i].get()).value }
    }

    /// Apply `op` to the inactive copy and record it for replay. Readers do
    /// not see it until [`publish`](Self::publish). Settles a pending
    /// [`publish_start`](Self::publish_start) first, waiting for readers if
    /// it must: check [`is_settling`](Self::is_settling) to avoid that.
    pub fn apply(&mut self, op: Op) {
        self.settle();
        let i = self.inactive();
        // SAFETY: the inactive copy has no reader (every reader that could
        // hold it left before the last `publish` returned, and new readers
        // load `active`, which names the other copy), and `&mut self` makes
        // this the only writer access.
        let copy = unsafe { &mut *self.shared.copies[i].get() };
        copy.value.apply(&op);
        self.oplog.push(op);
    }

    /// Number of applied but unpublished operations.
    pub fn pending(&self) -> usize {
        self.oplog.len()
    }

    /// Version of the published copy (0 at creation, +1 per publish that
    /// had pending operations).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Make every applied operation visible, wait for the quiescent point,
    /// and bring the old copy up to date. Returns the new version. When it
    /// returns, no read section can observe an older version. A publish
    /// with nothing pending does nothing (but finish settling).
    pub fn publish(&mut self) -> u64 {
        let v = self.publish_start();
        self.settle();
        v
    }

    /// Make every applied operation visible without waiting: swap the
    /// copies and note which readers were inside a section. Returns the new
    /// version. The old copy is brought up to date by
    /// [`try_settle`](Self::try_settle) (or [`settle`](Self::settle)) once
    /// those readers have left; only then may the caller rely on no section
    /// observing an older version. With nothing pending, returns the
    /// current version and leaves a settle in progress as it is.
    pub fn publish_start(&mut self) -> u64 {
        // Ops are only applied once settled (`apply` settles first): while
        // settling, the oplog holds the replay and nothing new is pending.
        if self.settling || self.oplog.is_empty() {
            return self.version;
        }
        let new = self.inactive();
        self.version += 1;
        // SAFETY: `new` is still inactive (no readers), see `apply`.
        unsafe { (*self.shared.copies[new].get()).version = self.version };

        // The swap. SeqCst (a release store at least, so readers that load
        // the new index also see every write to the new copy; SeqCst so the
        // store and the epoch loads below are ordered against readers' epoch
        // stores and `active` loads in the single total order, the classic
        // Dekker pattern: either a reader's odd-epoch store precedes our
        // epoch load (we see it and wait for it to change), or our store
        // precedes its load of `active` (it reads the new copy)).
        self.shared.active.0.store(new, Ordering::SeqCst);
        {
            let readers = lock(&self.shared.readers);
            self.inside.clear();
            self.inside.extend(
                readers
                    .iter()
                    .map(|r| (r.clone(), r.load(Ordering::SeqCst)))
                    // Even: not inside, so any later section sees `new`.
                    .filter(|&(_, e)| e & 1 == 1),
            );
            // A reader registering after we release the lock synchronises
            // with our unlock, so it sees the new `active`.
        }
        self.settling = true;
        self.version
    }

    /// Whether a [`publish_start`](Self::publish_start) has not settled yet.
    pub fn is_settling(&self) -> bool {
        self.settling
    }

    /// Without waiting: if every reader noted by the last
    /// [`publish_start`](Self::publish_start) has left the section it was
    /// in, bring the old copy up to date and return true (also when
    /// nothing was settling). When this returns true, no read section can
    /// observe a version older than [`version`](Self::version).
    pub fn try_settle(&mut self) -> bool {
        if !self.settling {
            return true;
        }
        // A reader whose epoch moved on has left that section; any section
        // it began since loaded the new `active`. The Acquire load pairs
        // with the Release store on guard drop, so its reads of the old copy
        // happen-before our replay.
        self.inside.retain(|(r, e)| r.load(Ordering::Acquire) == *e);
        if !self.inside.is_empty() {
            return false;
        }
        self.replay();
        true
    }

    /// Wait until the last [`publish_start`](Self::publish_start) has
    /// settled (spinning briefly, then yielding the thread).
    pub fn settle(&mut self) {
        let mut spins = 0u32;
        while !self.try_settle() {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Replay the oplog onto the old (now inactive, reader-free) copy.
    fn replay(&mut self) {
        let old = self.inactive();
        // SAFETY: `old` is inactive and every reader that could hold a
        // reference into it has left (`try_settle` checked); `&mut self`
        // excludes other writer access.
        let copy = unsafe { &mut *self.shared.copies[old].get() };
        // Drained, so each op moves into the copy (the log keeps its
        // allocation for the next round).
        let mut ops = self.oplog.drain(..);
        while let Some(op) = ops.next() {
            if let Some(ahead) = ops.as_slice().get(REPLAY_LOOKAHEAD - 1) {
                copy.value.prefetch(ahead);
            }
            for stage in REPLAY_NEAR {
                if let Some(near) = ops.as_slice().get(stage - 1) {
                    copy.value.prefetch_near(near, stage);
                }
            }
            copy.value.apply_owned(op);
        }
        drop(ops);
        copy.version = self.version;
        self.settling = false;
    }
}

/// Lock a mutex whose data (a list of reader slots) cannot be left
/// inconsistent by a panic, so poisoning is ignored.
fn lock<U>(m: &Mutex<U>) -> std::sync::MutexGuard<'_, U> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A registered reader. `Send`, not `Sync`: each reader thread owns one.
pub struct ReadHandle<T> {
    shared: Arc<Shared<T>>,
    slot: Arc<ReaderSlot>,
    /// Only the owning thread writes the epoch: no sharing of a handle.
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl<T> ReadHandle<T> {
    /// Start a read section. Never blocks and never allocates; hold the
    /// guard for one batch, not longer (the writer's `publish` waits for it).
    /// `&mut self` rules out nested sections on one handle, which would
    /// break the odd/even epoch protocol.
    #[inline]
    pub fn enter(&mut self) -> ReadGuard<'_, T> {
        // Only this thread stores the epoch, so a relaxed load is exact.
        let e = self.slot.load(Ordering::Relaxed);
        // Odd: inside. SeqCst store then SeqCst load of `active`: the other
        // half of the Dekker pattern described in `publish`.
        self.slot.store(e + 1, Ordering::SeqCst);
        let i = self.shared.active.0.load(Ordering::SeqCst);
        // SAFETY: copy `i` was active when loaded and our epoch was already
        // odd, so the writer waits for us before mutating it; the SeqCst
        // load acquires the writer's writes to it.
        let copy = unsafe { &*self.shared.copies[i].get() };
        ReadGuard {
            copy,
            slot: &self.slot,
            exit: e + 2,
        }
    }
}

impl<T> Drop for ReadHandle<T> {
    fn drop(&mut self) {
        let mut readers = lock(&self.shared.readers);
        readers.retain(|r| !Arc::ptr_eq(r, &self.slot));
    }
}

/// A read section: derefs to the active copy as it was at `enter`.
pub struct ReadGuard<'a, T> {
    copy: &'a Replica<T>,
    slot: &'a ReaderSlot,
    exit: u64,
}

impl<T> ReadGuard<'_, T> {
    /// The version this section reads.
    pub fn version(&self) -> u64 {
        self.copy.version
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.copy.value
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Even: outside. Release so every read of the copy happens-before
        // the writer's Acquire load that sees this value.
        self.slot.store(self.exit, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Counter(u64);
    impl Apply<u64> for Counter {
        fn apply(&mut self, op: &u64) {
            self.0 += op;
        }
    }

    #[test]
    fn ops_visible_only_after_publish() {
        let mut v = Versioned::new(Counter(0));
        let mut r = v.reader();
        v.apply(5);
        assert_eq!(v.writer_view().0, 5);
        assert_eq!(r.enter().0, 0);
        assert_eq!(v.publish(), 1);
        {
            let g = r.enter();
            assert_eq!((g.0, g.version()), (5, 1));
        }
        v.apply(1);
        assert_eq!(v.publish(), 2);
        assert_eq!(v.publish(), 2, "empty publish keeps the version");
        assert_eq!(r.enter().0, 6);
        assert_eq!(v.writer_view().0, 6);
    }

    /// A reader inside a section at `publish_start` holds the settle back
    /// until it leaves; the writer reads the new copy meanwhile; `apply`
    /// after settling goes to the old copy, now up to date.
    #[test]
    fn publish_start_settles_once_readers_leave() {
        let mut v = Versioned::new(Counter(0));
        let mut r = v.reader();
        let mut idle = v.reader();
        v.apply(5);
        {
            let g = r.enter();
            assert_eq!(v.publish_start(), 1);
            assert!(v.is_settling());
            assert_eq!(v.writer_view().0, 5, "the writer reads the new copy");
            assert!(!v.try_settle(), "a reader is still in the old copy");
            assert_eq!((g.0, g.version()), (0, 0), "it keeps its version");
            // A section begun after the swap reads the new copy and does
            // not hold the settle back.
            let fresh = idle.enter();
            assert_eq!((fresh.0, fresh.version()), (5, 1));
            assert!(!v.try_settle());
            assert_eq!(v.publish_start(), 1, "nothing pending: same version");
        }
        assert!(v.try_settle());
        assert!(!v.is_settling());
        v.apply(1);
        assert_eq!(v.writer_view().0, 6, "the old copy got the replay");
        assert_eq!(v.publish(), 2);
        assert_eq!(r.enter().0, 6);
    }

    /// `apply` while settling waits for the reader, then writes.
    #[test]
    fn apply_while_settling_waits_for_readers() {
        let mut v = Versioned::new(Counter(0));
        let mut r = v.reader();
        v.apply(2);
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (leave_tx, leave_rx) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let g = r.enter();
            entered_tx.send(g.0).unwrap();
            leave_rx.recv().unwrap();
            drop(g);
            r.enter().0
        });
        assert_eq!(entered_rx.recv().unwrap(), 0);
        v.publish_start();
        assert!(!v.try_settle());
        leave_tx.send(()).unwrap();
        v.apply(3); // settles first, waiting for the reader to leave
        assert!(!v.is_settling());
        assert_eq!(v.publish(), 2);
        assert!(matches!(reader.join().unwrap(), 2 | 5));
        assert_eq!(v.writer_view().0, 5);
    }
}
