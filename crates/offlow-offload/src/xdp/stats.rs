//! The XDP program's named outcome counters (`enum stat` in
//! `bpf/offload.bpf.c`, in the same order): every frame the program sees
//! bumps exactly one of the first group (what the parser and lookup
//! decided) and, when it goes up, one of `up_xsk` / `up_pass` /
//! `up_xsk_absent` (where it went). Besides its outcome, a served frame
//! whose TCP/UDP checksum was partial bumps `csum_finished`;
//! `up_csum_long` is the outcome of a partial one too long to finish in
//! the kernel (it goes up untouched). A frame addressed to a tunnel that
//! the program does not decapsulate (a shape it leaves to software, a
//! malformed header, a key no tunnel takes) goes up as `up_tunnel`, a
//! decapsulated one whose inner checksum looks partial as
//! `up_tunnel_partial`; a served frame that was decapsulated bumps
//! `tunnel_decap`, one that was encapsulated `tunnel_encap`, besides its
//! outcome; a frame a masked entry served bumps `hit_masked` besides its
//! outcome (the exact entries' hits are the `hit_*` outcomes less it).

/// Counter names, indexed as in the C enum.
pub const STAT_NAMES: [&str; 24] = [
    "hit_drop",
    "hit_port",
    "hit_in_port",
    "hit_cpu",
    "miss_not_port",
    "miss_not_class",
    "miss_no_entry",
    "miss_stale",
    "up_ttl",
    "up_no_headroom",
    "up_no_cpu",
    "up_cpu_redirect",
    "drop_no_port",
    "drop_internal",
    "up_xsk",
    "up_pass",
    "up_xsk_absent",
    "csum_finished",
    "up_csum_long",
    "up_tunnel",
    "up_tunnel_partial",
    "tunnel_decap",
    "tunnel_encap",
    "hit_masked",
];

/// The program's counters, summed over CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct XdpStats {
    /// One value per [`STAT_NAMES`] entry.
    pub values: [u64; STAT_NAMES.len()],
}

impl XdpStats {
    /// The counter called `name` (0 for an unknown name).
    pub fn get(&self, name: &str) -> u64 {
        STAT_NAMES
            .iter()
            .position(|n| *n == name)
            .map_or(0, |i| self.values[i])
    }

    /// `(name, value)` pairs in the C enum's order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        STAT_NAMES.iter().copied().zip(self.values.iter().copied())
    }

    /// Frames dropped in the kernel by the program (the entries' Drop
    /// verdicts and the failures that drop).
    pub fn kernel_drops(&self) -> u64 {
        self.get("hit_drop") + self.get("drop_no_port") + self.get("drop_internal")
    }
}
