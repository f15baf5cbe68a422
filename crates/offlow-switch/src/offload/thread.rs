//! The backend's own thread: map updates and their grace periods (a
//! kernel backend waits out frames in flight, milliseconds) run here, so the
//! control loop never blocks on them.
//!
//! Commands are applied in the order sent and answered in that order, each
//! answer carrying its sequence number. Every entry travels with a
//! generation (the tier's count of installs of that match), so an answer about
//! an entry that has since been replaced is credited to the right one.

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread::JoinHandle;

use offlow_offload::{EntryCounters, OffloadBackend, OffloadError, OffloadMatch, OffloadProgram};

/// Which installation of a match.
pub(crate) type Gen = u64;

/// Work for the backend thread.
pub(crate) enum Cmd {
    /// Remove, then install (one grace period each at most).
    Apply {
        seq: u64,
        remove: Vec<(OffloadMatch, Gen)>,
        install: Vec<(OffloadMatch, Gen, OffloadProgram)>,
    },
    /// Read every entry's cumulative counters.
    Read { seq: u64 },
}

/// What the backend thread did.
pub(crate) enum Done {
    Applied {
        seq: u64,
        removed: Vec<(OffloadMatch, Gen, Result<EntryCounters, OffloadError>)>,
        installed: Vec<(OffloadMatch, Gen, Result<(), OffloadError>)>,
    },
    Read {
        seq: u64,
        counters: Vec<(OffloadMatch, Gen, EntryCounters)>,
        /// The backend's named counters at the same moment.
        named: Vec<(&'static str, u64)>,
    },
}

impl Done {
    pub(crate) fn seq(&self) -> u64 {
        match self {
            Done::Applied { seq, .. } | Done::Read { seq, .. } => *seq,
        }
    }
}

/// The control side's end of the backend thread.
pub(crate) struct BackendLink {
    pub(crate) cmds: Option<mpsc::Sender<Cmd>>,
    pub(crate) done: mpsc::Receiver<Done>,
    thread: Option<JoinHandle<()>>,
}

impl BackendLink {
    /// Move `backend` onto a thread of its own.
    pub(crate) fn spawn(mut backend: Box<dyn OffloadBackend>) -> std::io::Result<BackendLink> {
        let (cmd_tx, cmd_rx) = mpsc::channel::<Cmd>();
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        let thread = std::thread::Builder::new()
            .name("offlow-offload".into())
            .spawn(move || {
                // The generation installed per match, as the backend has it.
                let mut installed: HashMap<OffloadMatch, Gen> = HashMap::new();
                while let Ok(cmd) = cmd_rx.recv() {
                    let done = match cmd {
                        Cmd::Apply {
                            seq,
                            remove,
                            install,
                        } => {
                            let keys: Vec<OffloadMatch> = remove.iter().map(|(k, _)| *k).collect();
                            let results = if keys.is_empty() {
                                Vec::new()
                            } else {
                                backend.remove_batch(&keys)
                            };
                            let removed = remove
                                .into_iter()
                                .zip(results)
                                .map(|((k, g), r)| {
                                    if installed.get(&k) == Some(&g) {
                                        installed.remove(&k);
                                    }
                                    (k, g, r)
                                })
                                .collect();
                            let entries: Vec<(OffloadMatch, OffloadProgram)> =
                                install.iter().map(|(k, _, p)| (*k, *p)).collect();
                            let results = if entries.is_empty() {
                                Vec::new()
                            } else {
                                backend.install_batch(&entries)
                            };
                            let installed_now = install
                                .into_iter()
                                .zip(results)
                                .map(|((k, g, _), r)| {
                                    if r.is_ok() {
                                        installed.insert(k, g);
                                    }
                                    (k, g, r)
                                })
                                .collect();
                            Done::Applied {
                                seq,
                                removed,
                                installed: installed_now,
                            }
                        }
                        Cmd::Read { seq } => {
                            let mut counters = Vec::with_capacity(installed.len());
                            backend.all_counters(&mut |k, c| {
                                if let Some(&g) = installed.get(k) {
                                    counters.push((*k, g, c));
                                }
                            });
                            let named = backend.named_counters();
                            Done::Read {
                                seq,
                                counters,
                                named,
                            }
                        }
                    };
                    if done_tx.send(done).is_err() {
                        break;
                    }
                }
                // Dropping the backend detaches it (its own Drop).
                drop(backend);
            })?;
        Ok(BackendLink {
            cmds: Some(cmd_tx),
            done: done_rx,
            thread: Some(thread),
        })
    }

    /// Queue a command; false if the thread is gone.
    pub(crate) fn send(&self, cmd: Cmd) -> bool {
        self.cmds.as_ref().is_some_and(|c| c.send(cmd).is_ok())
    }
}

impl Drop for BackendLink {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop; it then drops (and
        // so detaches) the backend.
        self.cmds.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
