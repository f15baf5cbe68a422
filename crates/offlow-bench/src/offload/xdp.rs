//! The XDP programs of `offlow bench offload` (`bpf/*.bpf.c`), loaded with
//! libbpf-rs: the live-frames [`Generator`], the counting [`Sink`], the
//! redirect [`Ceiling`] and the lookup [`Floor`]; and `offlow bench
//! latency`'s [`PassThrough`].
//!
//! Why live frames: `BPF_PROG_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` runs an
//! XDP program on frames from a kernel page pool as if they had arrived on
//! `ingress_ifindex`, and carries out its verdict for real; `XDP_TX` becomes
//! a redirect out of that same interface. On a veth that is the peer's
//! receive path at XDP speed, with no socket, no `sk_buff` and no qdisc on
//! the sending side: the fastest sender this kernel has (no pktgen module,
//! and Debian's xdp-trafficgen does not load on 6.18).
//!
//! What the kernel needs (verified here on 6.18, see the module docs of
//! [`super`]): a veth accepts redirected frames (`ndo_xdp_xmit`) only while
//! its *peer* has NAPI enabled, that is a native XDP program or GRO on the
//! peer (the veth advertises `NETDEV_XDP_ACT_NDO_XMIT` then); without it
//! every frame is dropped with `-EOPNOTSUPP` (`xdp_redirect_err`). The frame
//! lands on the peer's receive queue `cpu % queues` of the CPU that sent it,
//! and the peer's NAPI runs in softirq on that CPU, when the generator's
//! batch ends (`local_bh_enable`), so with a program on the peer that
//! forwards in XDP the whole path runs on the generator's CPU.
//!
//! Invariants: a loaded program is detached and unloaded when its owner is
//! dropped (the link and object close their descriptors); the generator's
//! threads are joined before [`Generator::stop`] returns. Interface indexes
//! are looked up and programs attached from inside the interface's
//! namespace ([`in_netns`]), since both resolve in the calling thread's.
//!
//! Thread-safety: [`Sink`], [`Ceiling`], [`Floor`] and [`Generator`] live on the
//! measuring thread (libbpf objects are not `Send`); the generator threads
//! hold only a duplicate of the program's descriptor and share atomics.

use std::ffi::CString;
use std::mem::offset_of;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};
use libbpf_rs::{libbpf_sys, Link, MapCore, MapFlags, Object, ObjectBuilder};
use offlow_io::netns::in_netns;

use super::bpf;

/// `BPF_F_TEST_XDP_LIVE_FRAMES` (uapi `linux/bpf.h`).
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// The kernel's largest live-frames batch (`TEST_XDP_MAX_BATCH`).
pub const MAX_BATCH: u32 = 256;
/// Frames per `BPF_PROG_RUN` call: a few milliseconds at the rates seen
/// here, so a stop request is honoured quickly.
const FRAMES_PER_CALL: u32 = 1 << 14;

macro_rules! object_bytes {
    ($name:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".bpf.o"))
    };
}

/// Open the object `bytes`, let `init` write its `.rodata` (the
/// `const volatile` settings), load it.
fn load(bytes: &[u8], name: &str, init: impl FnOnce(&mut [u8])) -> anyhow::Result<Object> {
    let mut init = Some(init);
    let mut open = ObjectBuilder::default()
        .name(name)
        .and_then(|b| b.open_memory(bytes))
        .with_context(|| format!("opening the {name} BPF object"))?;
    for mut m in open.maps_mut() {
        if m.name().to_string_lossy().ends_with(".rodata") {
            if let (Some(v), Some(f)) = (m.initial_value_mut(), init.take()) {
                f(v);
            }
        }
    }
    open.load()
        .with_context(|| format!("loading the {name} XDP program (needs root)"))
}

/// Write `bytes` into `.rodata` at `offset` (a field's offset in the
/// skeleton's `rodata` struct).
fn put(dst: &mut [u8], offset: usize, bytes: &[u8]) {
    if let Some(d) = dst.get_mut(offset..offset + bytes.len()) {
        d.copy_from_slice(bytes);
    }
}

fn ifindex_here(ifname: &str) -> anyhow::Result<u32> {
    let c = CString::new(ifname).context("interface name")?;
    // SAFETY: `c` is a NUL-terminated string alive for the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        bail!("no interface {ifname}: {}", std::io::Error::last_os_error());
    }
    Ok(i)
}

/// The index of `ifname` in namespace `ns`.
pub fn ifindex(ns: &str, ifname: &str) -> anyhow::Result<u32> {
    in_netns(Some(ns), || ifindex_here(ifname))?
}

fn prog<'a>(obj: &'a Object, name: &str) -> anyhow::Result<libbpf_rs::Program<'a>> {
    obj.progs()
        .find(|p| p.name() == name)
        .with_context(|| format!("program {name} missing from its object"))
}

fn map<'a>(obj: &'a Object, name: &str) -> anyhow::Result<libbpf_rs::Map<'a>> {
    obj.maps()
        .find(|m| m.name() == name)
        .with_context(|| format!("map {name} missing from its object"))
}

/// Attach `prog` of `obj` (native XDP when the driver has it, as veth does)
/// to `ifname` inside `ns`.
fn attach(obj: &Object, prog_name: &str, ns: &str, ifname: &str) -> anyhow::Result<Link> {
    let p = obj
        .progs_mut()
        .find(|p| p.name() == prog_name)
        .with_context(|| format!("program {prog_name} missing from its object"))?;
    in_netns(Some(ns), || -> anyhow::Result<Link> {
        let i = ifindex_here(ifname)?;
        let i = i32::try_from(i).context("interface index")?;
        p.attach_xdp(i)
            .with_context(|| format!("attaching {prog_name} to {ifname}"))
    })?
}

/// Sum a per-CPU array's slot 0 of `N` `u64` words over CPUs.
fn percpu_sum<const N: usize>(m: &libbpf_rs::Map<'_>) -> anyhow::Result<[u64; N]> {
    let vals = m
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .context("reading a per-CPU map")?
        .unwrap_or_default();
    let mut sum = [0u64; N];
    for v in vals {
        for (i, s) in sum.iter_mut().enumerate() {
            if let Some(w) = v.get(i * 8..i * 8 + 8) {
                let mut b = [0u8; 8];
                b.copy_from_slice(w);
                *s += u64::from_ne_bytes(b);
            }
        }
    }
    Ok(sum)
}

// -------------------------------------------------------------------- sink --

/// What the sink counted so far (summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkCounts {
    /// Experiment frames (IPv4 UDP to the destination port).
    pub frames: u64,
    /// Their bytes (without FCS).
    pub bytes: u64,
    /// Any other frame.
    pub other: u64,
    /// Experiment frames whose IPv4 source was [`SinkOptions::expect_src`],
    /// or, for a sink from [`Sink::attach_tagged`], that carried its VLAN
    /// tag (0 when neither is set).
    pub translated: u64,
    /// Experiment frames that were not [`SinkCounts::translated`] (0 when
    /// the sink looks for neither). Counted apart: `frames - translated`
    /// of a snapshot taken while frames arrive can be off by one per CPU
    /// (the per-CPU counters are read while the program updates them),
    /// a window's `untranslated` cannot.
    pub untranslated: u64,
}

impl SinkCounts {
    /// The counts between `earlier` and these (a window).
    pub fn since(&self, earlier: &SinkCounts) -> SinkCounts {
        SinkCounts {
            frames: self.frames.saturating_sub(earlier.frames),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            other: self.other.saturating_sub(earlier.other),
            translated: self.translated.saturating_sub(earlier.translated),
            untranslated: self.untranslated.saturating_sub(earlier.untranslated),
        }
    }
}

/// What the sink looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkOptions {
    /// The experiment's UDP destination port.
    pub dst_port: u16,
    /// Count experiment frames from this IPv4 source as translated, and
    /// keep samples of the frames received ([`Sink::samples`]).
    pub expect_src: Option<std::net::Ipv4Addr>,
    /// Pass other frames up to the stack (probes) instead of dropping them.
    pub pass_other: bool,
}

/// Bytes of a frame a sample keeps at most (`SAMPLE_LEN - 1` of
/// `bpf/sink.bpf.c`).
pub const SAMPLE_LEN: usize = 511;

/// The counting, dropping XDP program on the receiving veth.
pub struct Sink {
    _link: Link,
    obj: Object,
}

impl Sink {
    /// Load and attach to `ifname` in `ns`, counting UDP to `dst_port`.
    pub fn attach(ns: &str, ifname: &str, dst_port: u16) -> anyhow::Result<Sink> {
        let opts = SinkOptions {
            dst_port,
            expect_src: None,
            pass_other: false,
        };
        Sink::attach_with(ns, ifname, opts)
    }

    /// [`Sink::attach`] with every option.
    pub fn attach_with(ns: &str, ifname: &str, opts: SinkOptions) -> anyhow::Result<Sink> {
        Sink::attach_opts(ns, ifname, opts, 0)
    }

    /// A sink for 802.1Q-tagged traffic (the gateway rows): an experiment
    /// frame may carry one tag before its IPv4 header; those tagged with
    /// VLAN `vid` (1..=4094) count as [`SinkCounts::translated`], and
    /// frames are sampled ([`Sink::samples`]) as with
    /// [`SinkOptions::expect_src`].
    pub fn attach_tagged(ns: &str, ifname: &str, dst_port: u16, vid: u16) -> anyhow::Result<Sink> {
        if !(1..=4094).contains(&vid) {
            bail!("VLAN ID {vid} outside 1..=4094");
        }
        let opts = SinkOptions {
            dst_port,
            expect_src: None,
            pass_other: false,
        };
        Sink::attach_opts(ns, ifname, opts, vid)
    }

    fn attach_opts(ns: &str, ifname: &str, opts: SinkOptions, vid: u16) -> anyhow::Result<Sink> {
        let obj = load(object_bytes!("sink"), "sink", |ro| {
            put(
                ro,
                offset_of!(bpf::sink::types::rodata, expect_vid),
                &vid.to_ne_bytes(),
            );
            use bpf::sink::types::rodata;
            put(
                ro,
                offset_of!(rodata, dst_port),
                &opts.dst_port.to_ne_bytes(),
            );
            if let Some(a) = opts.expect_src {
                // Compared with the header's field as it lies in memory.
                put(ro, offset_of!(rodata, expect_saddr), &a.octets());
            }
            put(
                ro,
                offset_of!(rodata, pass_other),
                &[u8::from(opts.pass_other)],
            );
        })?;
        let link = attach(&obj, "sink", ns, ifname)?;
        Ok(Sink { _link: link, obj })
    }

    /// The counters, summed over CPUs.
    pub fn counts(&self) -> anyhow::Result<SinkCounts> {
        let [frames, bytes, other, translated, untranslated] =
            percpu_sum::<5>(&map(&self.obj, "rx_counts")?)?;
        Ok(SinkCounts {
            frames,
            bytes,
            other,
            translated,
            untranslated,
        })
    }

    /// The sampled frames (with [`SinkOptions::expect_src`] set: one
    /// experiment frame in 1,024 per CPU, the last 16 per CPU), each with
    /// its length on the wire (without FCS); a sample holds at most
    /// [`SAMPLE_LEN`] bytes of it.
    pub fn samples(&self) -> anyhow::Result<Vec<(Vec<u8>, usize)>> {
        let m = map(&self.obj, "samples")?;
        let mut out = Vec::new();
        for slot in 0..16u32 {
            let per_cpu = m
                .lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY)
                .context("reading the sink's samples")?
                .unwrap_or_default();
            for v in per_cpu {
                // struct sample: u32 len, u32 frame_len, u8 data[512].
                let word = |i: usize| -> Option<usize> {
                    let b: [u8; 4] = v.get(i..i + 4)?.try_into().ok()?;
                    usize::try_from(u32::from_ne_bytes(b)).ok()
                };
                let (Some(len), Some(frame_len)) = (word(0), word(4)) else {
                    continue;
                };
                if let Some(d) = v.get(8..8 + len.min(SAMPLE_LEN)) {
                    if len > 0 {
                        out.push((d.to_vec(), frame_len));
                    }
                }
            }
        }
        Ok(out)
    }

    /// The UDP source ports seen in experiment frames, ascending.
    pub fn src_ports(&self) -> anyhow::Result<Vec<u16>> {
        let v = map(&self.obj, "src_ports")?
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .context("reading the source-port set")?
            .unwrap_or_default();
        let mut ports = Vec::new();
        for (w, chunk) in v.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            let word = u64::from_ne_bytes(b);
            for bit in 0..64 {
                if word & (1 << bit) != 0 {
                    // w < 1024, bit < 64: the port fits 16 bits.
                    ports.push((w * 64 + bit) as u16);
                }
            }
        }
        Ok(ports)
    }
}

// ----------------------------------------------------------------- ceiling --

/// Point slot 0 of `obj`'s `tx_port` DEVMAP at interface `to` of `ns`.
fn point_tx_port(obj: &Object, ns: &str, to: &str) -> anyhow::Result<()> {
    let m = map(obj, "tx_port")?;
    in_netns(Some(ns), || -> anyhow::Result<()> {
        // The DEVMAP resolves the index in the updating thread's namespace.
        let to_index = ifindex_here(to)?;
        m.update(&0u32.to_ne_bytes(), &to_index.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("pointing the DEVMAP at {to}"))
    })?
}

/// The redirect-only XDP program: `from` → `to`, both in `ns`.
pub struct Ceiling {
    _link: Link,
    _obj: Object,
}

impl Ceiling {
    /// Load, point the DEVMAP at `to`, attach to `from`.
    pub fn attach(ns: &str, from: &str, to: &str) -> anyhow::Result<Ceiling> {
        let obj = load(object_bytes!("ceiling"), "ceiling", |_| {})?;
        point_tx_port(&obj, ns, to)?;
        let link = attach(&obj, "ceiling", ns, from)?;
        Ok(Ceiling {
            _link: link,
            _obj: obj,
        })
    }
}

/// The TC redirect wire (`bpf/tcwire.bpf.c`): every packet arriving on
/// `from` leaves by `to`, redirected at TC ingress (a clsact qdisc on
/// `from`, removed on drop).
pub struct TcWire {
    hook: libbpf_rs::TcHook,
    ns: String,
    _obj: Object,
}

impl TcWire {
    /// Load with `to`'s index, attach at `from`'s TC ingress (both in `ns`).
    pub fn attach(ns: &str, from: &str, to: &str) -> anyhow::Result<TcWire> {
        let to_index = in_netns(Some(ns), || ifindex_here(to))??;
        let obj = load(object_bytes!("tcwire"), "tcwire", |ro| {
            put(
                ro,
                offset_of!(bpf::tcwire::types::rodata, to_ifindex),
                &to_index.to_ne_bytes(),
            );
        })?;
        let prog = obj
            .progs()
            .find(|p| p.name() == "tc_wire")
            .context("program tc_wire missing from its object")?;
        let hook = in_netns(Some(ns), || -> anyhow::Result<libbpf_rs::TcHook> {
            let from_index = i32::try_from(ifindex_here(from)?).context("interface index")?;
            let mut hook = libbpf_rs::TcHookBuilder::new(prog.as_fd())
                .ifindex(from_index)
                .replace(true)
                .handle(1)
                .priority(1)
                .hook(libbpf_rs::TC_INGRESS);
            hook.create()
                .with_context(|| format!("adding a clsact qdisc to {from}"))?;
            hook.attach()
                .with_context(|| format!("attaching tc_wire to {from}"))?;
            Ok(hook)
        })??;
        Ok(TcWire {
            hook,
            ns: ns.to_string(),
            _obj: obj,
        })
    }
}

impl Drop for TcWire {
    fn drop(&mut self) {
        // Removes the clsact qdisc with the filter; the interface (and its
        // namespace) may be gone already, which is fine.
        let hook = &mut self.hook;
        let _ = in_netns(Some(&self.ns), || hook.destroy());
    }
}

// ------------------------------------------------------------------- floor --

/// The lookup floor (`bpf/floor.bpf.c`): parse, one exact-match lookup in
/// a BPF hash map, redirect `from` → `to`.
pub struct Floor {
    _link: Link,
    _obj: Object,
}

impl Floor {
    /// Load, fill the map with the keys of `frame` with UDP source ports
    /// `base_port .. base_port + flows` (the generator's flows), point the
    /// DEVMAP at `to`, attach to `from`.
    pub fn attach(
        ns: &str,
        from: &str,
        to: &str,
        frame: &[u8],
        base_port: u16,
        flows: u32,
    ) -> anyhow::Result<Floor> {
        let obj = load(object_bytes!("floor"), "floor", |_| {})?;
        let keys = map(&obj, "flows")?;
        for n in 0..flows {
            let port = u16::try_from(u32::from(base_port) + n).context("source port range")?;
            let key = floor_key(frame, port).context("the experiment frame is not IPv4 UDP")?;
            keys.update(&key, &0u32.to_ne_bytes(), MapFlags::ANY)
                .context("filling the floor's flow map")?;
        }
        point_tx_port(&obj, ns, to)?;
        let link = attach(&obj, "floor_lookup", ns, from)?;
        Ok(Floor {
            _link: link,
            _obj: obj,
        })
    }
}

/// The floor program's 36-byte key for `frame` (untagged IPv4 UDP) with
/// UDP source port `src_port`: `struct flow_key` of `bpf/floor.bpf.c`,
/// numbers in host order, in_port 1.
fn floor_key(frame: &[u8], src_port: u16) -> Option<[u8; 36]> {
    let ip = frame.get(14..34)?;
    let l4 = frame.get(34..38)?;
    let be16 = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let be32 = |b: &[u8], i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut k = [0u8; 36];
    k[0..4].copy_from_slice(&1u32.to_ne_bytes());
    k[4..8].copy_from_slice(&be32(ip, 12).to_ne_bytes());
    k[8..12].copy_from_slice(&be32(ip, 16).to_ne_bytes());
    k[12..18].copy_from_slice(frame.get(0..6)?);
    k[18..24].copy_from_slice(frame.get(6..12)?);
    // 24..28: VLAN fields, zero (untagged).
    k[28..30].copy_from_slice(&src_port.to_ne_bytes());
    k[30..32].copy_from_slice(&be16(l4, 2).to_ne_bytes());
    k[32] = ip[9];
    k[33] = ip[1] >> 2;
    k[34] = ip[1] & 3;
    Some(k)
}

// -------------------------------------------------------------------- pass --

/// The pass-through XDP program (`bpf/pass.bpf.c`) on a host's veth, so
/// that frames its peer sends with `XDP_TX` are delivered (see the
/// program's comment).
pub struct PassThrough {
    _link: Link,
    _obj: Object,
}

impl PassThrough {
    /// Load and attach to `ifname` in `ns`.
    pub fn attach(ns: &str, ifname: &str) -> anyhow::Result<PassThrough> {
        let obj = load(object_bytes!("pass"), "pass", |_| {})?;
        let link = attach(&obj, "pass", ns, ifname)?;
        Ok(PassThrough {
            _link: link,
            _obj: obj,
        })
    }
}

// --------------------------------------------------------------- generator --

/// Generator settings.
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// Namespace and interface the frames leave from.
    pub ns: String,
    /// See [`GenConfig::ns`].
    pub ifname: String,
    /// The frame every run starts from (the program rewrites its source
    /// port).
    pub frame: Vec<u8>,
    /// Distinct UDP source ports: `base_port .. base_port + flows`.
    pub flows: u32,
    /// The first source port.
    pub base_port: u16,
    /// One pinned thread per CPU listed.
    pub cpus: Vec<usize>,
    /// Frames per live-frames batch (1..=[`MAX_BATCH`]).
    pub batch: u32,
    /// Frames per second per thread; 0: as fast as the kernel goes. Paced
    /// in runs of a millisecond's frames (at least one batch), each
    /// started on schedule.
    pub rate_per_thread: u64,
    /// Write the frame's Ethernet, IPv4 and UDP headers back into every
    /// frame before its port is set: needed when the receiver rewrites
    /// frames in place (see `bpf/gen.bpf.c`), a few ns per frame.
    pub restore_headers: bool,
    /// Give each thread its own share of the flows (thread on CPU c of n
    /// sends the flows k with k % n == c % n), as RSS keeps a flow on one
    /// queue; otherwise every thread cycles through all the flows.
    pub partition_flows: bool,
}

/// Names of the spare veth pair in the generator's namespace that holds
/// the program in the kernel's XDP dispatcher (see [`Generator::start`]).
const HOLDER: [&str; 2] = ["genhold0", "genhold1"];

/// The live-frames generator: its program and one pinned thread per CPU.
pub struct Generator {
    /// Declared before `obj`: detached first.
    _holder: Link,
    obj: Object,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<anyhow::Result<()>>>,
    /// Calls that failed so far (the first error is returned by `stop`).
    errors: Arc<AtomicU64>,
}

/// Header bytes the generator can restore (`HDR_MAX` of `bpf/gen.bpf.c`).
const GEN_HDR_MAX: usize = 96;

/// IPv4 protocol number of GRE.
const IPPROTO_GRE: u8 = 47;
/// GRE protocol type of transparent Ethernet bridging (RFC 1701).
const GRE_PROTO_TEB: u16 = 0x6558;

/// Where the IPv4 header whose UDP source port the generator sets starts
/// in `frame`: 14 in an untagged IPv4 UDP frame, or, in a GRE-in-IPv4
/// frame carrying Ethernet (RFC 2784/2890: optional checksum, key and
/// sequence words), that of the inner frame. `None` when neither holds
/// or the headers do not fit the generator's restore buffer.
pub fn port_l3_offset(frame: &[u8]) -> Option<usize> {
    const ETH: usize = 14;
    let be16 = |i: usize| Some(u16::from_be_bytes([*frame.get(i)?, *frame.get(i + 1)?]));
    if be16(12)? != 0x0800 {
        return None;
    }
    let ihl = usize::from(frame.get(ETH)? & 0x0f) * 4;
    let off = match *frame.get(ETH + 9)? {
        17 => ETH,
        IPPROTO_GRE => {
            let gre = ETH + ihl;
            let flags = be16(gre)?;
            if be16(gre + 2)? != GRE_PROTO_TEB || flags & 0x0fff != 0 {
                return None;
            }
            // C, K and S each add a 4-byte word after the base header.
            let words = [0x8000u16, 0x2000, 0x1000]
                .iter()
                .filter(|&&f| flags & f != 0)
                .count();
            let inner = gre + 4 + 4 * words;
            (be16(inner + 12)? == 0x0800).then_some(inner + ETH)?
        }
        _ => return None,
    };
    let l4 = off + usize::from(frame.get(off)? & 0x0f) * 4;
    (*frame.get(off + 9)? == 17 && l4 + 8 <= GEN_HDR_MAX.min(frame.len())).then_some(off)
}

/// [`port_l3_offset`] of the generator's frame, or why it cannot send it.
fn gen_l3_offset(frame: &[u8]) -> anyhow::Result<usize> {
    port_l3_offset(frame).context(
        "the generator's frame is neither IPv4 UDP nor GRE-in-IPv4 carrying it \
         (headers within 96 bytes)",
    )
}

/// The generator's settings into its `.rodata` for `frame`, whose port's
/// IPv4 header is at `off` ([`gen_l3_offset`]); with `restore`, the
/// frame's headers it writes back into every frame.
fn gen_rodata(ro: &mut [u8], frame: &[u8], off: usize, cfg: (u32, u16, bool, u32)) {
    use bpf::gen::types::rodata;
    let (flows, base_port, restore, stride) = cfg;
    put(ro, offset_of!(rodata, stride), &stride.max(1).to_ne_bytes());
    put(ro, offset_of!(rodata, flows), &flows.to_ne_bytes());
    put(ro, offset_of!(rodata, base_port), &base_port.to_ne_bytes());
    // off <= 96 (port_l3_offset): fits 32 bits.
    put(ro, offset_of!(rodata, l3_off), &(off as u32).to_ne_bytes());
    if let (true, Some(h)) = (restore, frame.get(..off + 28)) {
        put(ro, offset_of!(rodata, restore), &[1]);
        put(ro, offset_of!(rodata, hdr), h);
    }
}

/// One thread's loop: `BPF_PROG_RUN` in live-frames mode until `stop`.
fn gen_thread(
    prog_fd: OwnedFd,
    cfg: GenConfig,
    cpu: usize,
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    if !crate::classify::pin_to_cpu(cpu) {
        bail!("cannot pin a generator thread to CPU {cpu}");
    }
    // The interface index in the context resolves in this thread's
    // namespace: the thread stays in the generator's for its life.
    in_netns(Some(&cfg.ns), || -> anyhow::Result<()> {
        let ifindex = ifindex_here(&cfg.ifname)?;
        let mut ctx = bpf::gen::types::xdp_md {
            data_end: u32::try_from(cfg.frame.len()).context("frame length")?,
            ingress_ifindex: ifindex,
            ..Default::default()
        };
        // Paced: a millisecond's frames per call, started on schedule.
        let per_call = if cfg.rate_per_thread > 0 {
            (cfg.rate_per_thread / 1000).clamp(u64::from(cfg.batch), u64::from(FRAMES_PER_CALL))
                as u32
        } else {
            FRAMES_PER_CALL
        };
        let start = std::time::Instant::now();
        let mut calls: u64 = 0;
        while !stop.load(Ordering::Relaxed) {
            if cfg.rate_per_thread > 0 {
                let due = Duration::from_secs_f64(
                    (calls * u64::from(per_call)) as f64 / cfg.rate_per_thread as f64,
                );
                let now = start.elapsed();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            calls += 1;
            // SAFETY: `opts` is zero-initialised (a valid value for this
            // plain C struct) and then filled with pointers to `cfg.frame`
            // and `ctx`, both alive for the whole call; live mode writes
            // neither (data_out and ctx_out stay null, as it requires).
            let rc = unsafe {
                let mut opts: libbpf_sys::bpf_test_run_opts = std::mem::zeroed();
                opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
                opts.data_in = cfg.frame.as_ptr().cast();
                opts.data_size_in = ctx.data_end;
                opts.ctx_in = (&raw mut ctx).cast();
                opts.ctx_size_in = std::mem::size_of_val(&ctx) as _;
                opts.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
                opts.repeat = per_call as _;
                opts.batch_size = cfg.batch;
                libbpf_sys::bpf_prog_test_run_opts(prog_fd.as_raw_fd(), &mut opts)
            };
            if rc < 0 {
                let e = std::io::Error::from_raw_os_error(-rc);
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                errors.fetch_add(1, Ordering::Relaxed);
                bail!("BPF_PROG_RUN (live frames) on {}: {e}", cfg.ifname);
            }
        }
        Ok(())
    })?
}

impl Generator {
    /// Load the program and start the threads.
    ///
    /// Every `BPF_PROG_RUN` of an XDP program adds it to the kernel's XDP
    /// dispatcher and removes it again, and each change waits for an RCU
    /// grace period (`bpf_dispatcher_change_prog` → `synchronize_rcu`,
    /// milliseconds): one thread calling back to back spent over 90% of
    /// its time asleep there (0.65 Mpps). A program attached in native
    /// mode stays in the dispatcher, and then a run only takes a
    /// reference. So the program is also attached to a spare veth pair
    /// (`HOLDER`, down, created in the generator's namespace, which
    /// removes it), where it never sees a frame.
    pub fn start(cfg: &GenConfig) -> anyhow::Result<Generator> {
        if cfg.flows == 0 || cfg.cpus.is_empty() || !(1..=MAX_BATCH).contains(&cfg.batch) {
            bail!("generator: flows and CPUs must be non-empty, batch in 1..={MAX_BATCH}");
        }
        let stride = if cfg.partition_flows {
            // The program takes the CPU number modulo the stride: the
            // threads must sit on CPUs 0..n for the shares to differ.
            let expect: Vec<usize> = (0..cfg.cpus.len()).collect();
            if cfg.cpus != expect {
                bail!(
                    "generator: partitioned flows need threads on CPUs 0..n, not {:?}",
                    cfg.cpus
                );
            }
            u32::try_from(cfg.cpus.len()).context("thread count")?
        } else {
            1
        };
        let off = gen_l3_offset(&cfg.frame)?;
        let obj = load(object_bytes!("gen"), "gen", |ro| {
            let settings = (cfg.flows, cfg.base_port, cfg.restore_headers, stride);
            gen_rodata(ro, &cfg.frame, off, settings)
        })?;
        let fd = prog(&obj, "gen")?
            .as_fd()
            .try_clone_to_owned()
            .context("duplicating the generator's program descriptor")?;
        let exists = in_netns(Some(&cfg.ns), || ifindex_here(HOLDER[0]).is_ok())?;
        if !exists {
            offlow_io::netns::ip(&[
                "-n", &cfg.ns, "link", "add", HOLDER[0], "type", "veth", "peer", "name", HOLDER[1],
            ])?;
        }
        let holder = attach(&obj, "gen", &cfg.ns, HOLDER[0])?;
        let stop = Arc::new(AtomicBool::new(false));
        let errors = Arc::new(AtomicU64::new(0));
        let mut g = Generator {
            _holder: holder,
            obj,
            stop,
            threads: Vec::new(),
            errors,
        };
        for &cpu in &cfg.cpus {
            let fd = fd.try_clone().context("duplicating a descriptor")?;
            let (cfg, stop, errors) = (cfg.clone(), g.stop.clone(), g.errors.clone());
            let h = std::thread::Builder::new()
                .name(format!("offlow-gen-{cpu}"))
                .spawn(move || gen_thread(fd, cfg, cpu, stop, errors))
                .context("spawning a generator thread")?;
            g.threads.push(h);
        }
        Ok(g)
    }

    /// Frames the program handed to `XDP_TX` so far (all CPUs).
    pub fn sent(&self) -> anyhow::Result<u64> {
        Ok(percpu_sum::<1>(&map(&self.obj, "frames_sent")?)?[0])
    }

    /// CPU time the generator threads used so far (their own clocks:
    /// system time of `BPF_PROG_RUN` and, on this kernel's tick-based
    /// accounting, softirq work done inside it).
    pub fn cpu_time(&self) -> Duration {
        let mut total = Duration::ZERO;
        for h in &self.threads {
            let mut clock: libc::clockid_t = 0;
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a handle still in `threads` has not been joined
            // (joining drains them), so its pthread_t is valid; both
            // out-pointers point to locals.
            let ok = unsafe {
                libc::pthread_getcpuclockid(h.as_pthread_t(), &mut clock) == 0
                    && libc::clock_gettime(clock, &mut ts) == 0
            };
            if ok {
                total += Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
            }
        }
        total
    }

    /// Whether a thread ended early (an error or a panic).
    pub fn failed(&self) -> bool {
        self.errors.load(Ordering::Relaxed) > 0 || self.threads.iter().any(|h| h.is_finished())
    }

    /// Stop and join the threads; the first thread error, if any.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.stop_threads()
    }

    /// Stop and join the threads, then return every frame sent.
    pub fn finish(mut self) -> anyhow::Result<u64> {
        self.stop_threads()?;
        self.sent()
    }

    fn stop_threads(&mut self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for h in self.threads.drain(..) {
            let r = match h.join() {
                Ok(r) => r,
                Err(_) => Err(anyhow::anyhow!("a generator thread panicked")),
            };
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        let _ = self.stop_threads();
    }
}

/// Run the generator's program `n` times on `frame` in ordinary test mode
/// (no live frames, nothing sent) on one CPU, and return each run's
/// verdict and output frame: what the live generator sends, for checking
/// ports and checksums. Runs on a thread of its own, pinned to the first
/// CPU this process may use, so the per-CPU frame counter counts every run.
///
/// With `restore`, the program writes `frame`'s headers back first (as
/// [`GenConfig::restore_headers`]), and `scribble` runs on each output
/// before it is fed back in: a receiver writing into the pool's pages.
pub fn gen_frames_once(
    frame: &[u8],
    flows: u32,
    base_port: u16,
    n: usize,
    restore: bool,
    scribble: fn(&mut [u8]),
) -> anyhow::Result<Vec<(u32, Vec<u8>)>> {
    let frame = frame.to_vec();
    let cpu = super::gen_cpus(1)[0];
    std::thread::spawn(move || -> anyhow::Result<Vec<(u32, Vec<u8>)>> {
        if !crate::classify::pin_to_cpu(cpu) {
            bail!("cannot pin to CPU {cpu}");
        }
        let off = gen_l3_offset(&frame)?;
        let obj = load(object_bytes!("gen"), "gen", |ro| {
            gen_rodata(ro, &frame, off, (flows, base_port, restore, 1))
        })?;
        let p = obj
            .progs_mut()
            .find(|p| p.name() == "gen")
            .context("program gen missing from its object")?;
        let mut out = Vec::with_capacity(n);
        let mut current = frame;
        for _ in 0..n {
            let mut data_out = vec![0u8; current.len()];
            let input = libbpf_rs::ProgramInput {
                data_in: Some(&current),
                data_out: Some(&mut data_out),
                ..Default::default()
            };
            let r = p.test_run(input).context("BPF_PROG_RUN of the generator")?;
            let verdict = r.return_value;
            let len = r.data.map(|d| d.len()).unwrap_or(0);
            data_out.truncate(len);
            // Feed the output back in, as the live page pool does: the
            // next run starts from what this one wrote.
            current = data_out.clone();
            scribble(&mut current);
            out.push((verdict, data_out));
        }
        Ok(out)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the test-run thread panicked"))?
}
