//! [`XdpProgram`]: the XDP program that steers each receive queue's frames
//! to its `AF_XDP` socket (or passes every frame), loaded and attached
//! with raw `bpf(2)` calls. See the parent module for the program itself
//! and the attach modes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::afpacket::ifindex;

// ---- linux/bpf.h ----
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `XDP_PASS` verdict.
const XDP_PASS: i32 = 2;
/// `offsetof(struct xdp_md, rx_queue_index)`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;
// ---- linux/if_link.h ----
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// One eBPF instruction (`struct bpf_insn`): the register nibbles are
/// `dst` (low) and `src` (high) on a little-endian host.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0xf),
        off,
        imm,
    }
}

// Opcodes used below (linux/bpf_common.h, linux/bpf.h).
/// `BPF_LDX | BPF_MEM | BPF_W`: `dst = *(u32 *)(src + off)`.
const LDX_MEM_W: u8 = 0x61;
/// `BPF_LD | BPF_IMM | BPF_DW`: 64-bit immediate over two instructions.
const LD_IMM_DW: u8 = 0x18;
/// `BPF_ALU64 | BPF_MOV | BPF_K`: `dst = imm`.
const MOV64_IMM: u8 = 0xb7;
/// `BPF_JMP | BPF_CALL`: call helper `imm`.
const CALL: u8 = 0x85;
/// `BPF_JMP | BPF_EXIT`: return r0.
const EXIT: u8 = 0x95;

/// `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`
fn redirect_program(map_fd: RawFd) -> [Insn; 6] {
    [
        // r2 = ctx->rx_queue_index (r1 holds ctx on entry; read it before
        // r1 is overwritten with the map).
        insn(LDX_MEM_W, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0),
        // r1 = &xsks: the loader replaces the fd with the map's address.
        insn(LD_IMM_DW, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        // r3 = XDP_PASS: the verdict when the slot holds no socket.
        insn(MOV64_IMM, 3, 0, 0, XDP_PASS),
        insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        // r0 = the helper's verdict.
        insn(EXIT, 0, 0, 0, 0),
    ]
}

/// `return XDP_PASS;`
fn pass_program() -> [Insn; 2] {
    [insn(MOV64_IMM, 0, 0, 0, XDP_PASS), insn(EXIT, 0, 0, 0, 0)]
}

/// The prefix of `union bpf_attr` for `BPF_MAP_CREATE` (the kernel
/// zero-fills what we do not pass).
#[repr(C)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for `BPF_MAP_UPDATE_ELEM`.
#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The prefix of `union bpf_attr` for `BPF_PROG_LOAD`.
#[repr(C)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The prefix of `union bpf_attr` for `BPF_LINK_CREATE`.
#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `bpf(cmd, attr, sizeof attr)`, returning the new descriptor (or 0).
///
/// # Safety
/// `attr` must be the attribute struct of `cmd`; every pointer inside it
/// must be valid for what the kernel reads or writes through it.
unsafe fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T, what: &str) -> io::Result<libc::c_long> {
    // SAFETY: forwarded to the caller; `attr` is live and of the size
    // passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        Err(io::Error::new(
            e.kind(),
            BpfError {
                what: what.to_string(),
                errno,
            },
        ))
    } else {
        Ok(rc)
    }
}

/// A failed `bpf(2)` call: what was asked, and the errno, which an
/// `io::Error` carrying a message no longer reports ([`errno_of`] finds
/// it): "what: Device or resource busy (os error 16)".
#[derive(Debug)]
struct BpfError {
    what: String,
    errno: i32,
}

impl std::fmt::Display for BpfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}",
            self.what,
            io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for BpfError {}

/// The errno behind `e`: its own, or a [`BpfError`]'s.
fn errno_of(e: &io::Error) -> Option<i32> {
    e.raw_os_error()
        .or_else(|| e.get_ref()?.downcast_ref::<BpfError>().map(|b| b.errno))
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: `fd` is a descriptor the bpf call just created for us
    // (non-negative, checked by `sys_bpf`) and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

fn name16(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    // At most 15 bytes: the kernel wants a NUL-terminated name.
    for (d, b) in n.iter_mut().zip(s.bytes().take(15)) {
        *d = b;
    }
    n
}

fn load_program(insns: &[Insn], name: &str) -> io::Result<OwnedFd> {
    let license = c"GPL";
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name: name16(name),
        prog_ifindex: 0,
        expected_attach_type: BPF_XDP,
    };
    // SAFETY: `attr` is the BPF_PROG_LOAD struct; `insns` and `license`
    // outlive the call.
    match unsafe { sys_bpf(BPF_PROG_LOAD, &mut attr, "loading the XDP program") } {
        Ok(fd) => Ok(owned(fd)),
        Err(first) => {
            // Load again with the verifier's log, for the error message.
            let mut log = vec![0u8; 64 * 1024];
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            // SAFETY: as above; `log` is writable for `log_size` bytes
            // and outlives the call.
            match unsafe { sys_bpf(BPF_PROG_LOAD, &mut attr, "loading the XDP program") } {
                Ok(fd) => Ok(owned(fd)),
                Err(_) => {
                    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                    let text = String::from_utf8_lossy(&log[..end]);
                    Err(io::Error::new(
                        first.kind(),
                        format!("{first}; verifier log:\n{text}"),
                    ))
                }
            }
        }
    }
}

/// Where an XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before any `sk_buff` exists (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the generic receive path, on an `sk_buff` (`XDP_FLAGS_SKB_MODE`):
    /// works on any interface, slower.
    Generic,
}

/// Which attach mode to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpAttach {
    /// Native, or generic when the driver refuses native mode.
    Auto,
    /// Native only.
    Native,
    /// Generic only.
    Generic,
}

/// An XDP program attached to an interface through a BPF link; detached
/// when dropped (see module docs).
pub struct XdpProgram {
    /// Declared first: detaching comes before the program and map go.
    /// Absent for [`XdpProgram::external`] (another program's link).
    link: Option<OwnedFd>,
    _prog: Option<OwnedFd>,
    /// The `XSKMAP` (absent for [`XdpProgram::pass`]).
    map: Option<OwnedFd>,
    /// The map key of queue 0 (queue q is `key_base + q`).
    key_base: u32,
    ifindex: u32,
    queues: u32,
    mode: XdpMode,
}

impl std::fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpProgram")
            .field("link", &self.link.as_ref().map(|l| l.as_raw_fd()))
            .field("ifindex", &self.ifindex)
            .field("queues", &self.queues)
            .field("mode", &self.mode)
            .finish()
    }
}

fn attach(prog: &OwnedFd, ifindex: u32, want: XdpAttach) -> io::Result<(OwnedFd, XdpMode)> {
    let try_mode = |flags: u32| {
        let mut attr = LinkCreateAttr {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags,
        };
        // A link closed just before (the previous port on this interface)
        // is detached only when its last descriptor goes: a child that
        // another thread forked meanwhile holds a copy until its exec
        // closes it, and the link stays attached (`EBUSY`) for that
        // moment (seen once in CI, on a loaded machine, between two ports
        // opened in turn on one veth). Retry for up to a second, as the
        // socket's bind does for the pool.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            // SAFETY: `attr` is the BPF_LINK_CREATE struct; it holds no
            // pointers.
            match unsafe { sys_bpf(BPF_LINK_CREATE, &mut attr, "attaching the XDP program") } {
                Err(e)
                    if errno_of(&e) == Some(libc::EBUSY)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                r => return r.map(owned),
            }
        }
    };
    match want {
        XdpAttach::Native => try_mode(XDP_FLAGS_DRV_MODE).map(|l| (l, XdpMode::Native)),
        XdpAttach::Generic => try_mode(XDP_FLAGS_SKB_MODE).map(|l| (l, XdpMode::Generic)),
        XdpAttach::Auto => match try_mode(XDP_FLAGS_DRV_MODE) {
            Ok(l) => Ok((l, XdpMode::Native)),
            // No native support (EOPNOTSUPP) or a driver constraint it
            // rejects (EINVAL: MTU, queue count...): generic mode.
            // (Through `errno_of`: until it, `sys_bpf`'s errors carried no
            // errno and this fallback never ran.)
            Err(e) if matches!(errno_of(&e), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                try_mode(XDP_FLAGS_SKB_MODE).map(|l| (l, XdpMode::Generic))
            }
            Err(e) => Err(e),
        },
    }
}

impl XdpProgram {
    /// Load and attach the redirect program on `ifname` with an `XSKMAP`
    /// of `queues` slots (one per receive queue; queues without a socket
    /// pass frames to the stack).
    pub fn redirect_to_sockets(
        ifname: &str,
        queues: u32,
        want: XdpAttach,
    ) -> io::Result<XdpProgram> {
        let ifindex = ifindex(ifname)?;
        let queues = queues.max(1);
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: queues,
            map_flags: 0,
            inner_map_fd: 0,
            numa_node: 0,
            map_name: name16("offlow_xsks"),
        };
        // SAFETY: `attr` is the BPF_MAP_CREATE struct; no pointers.
        let map = owned(unsafe { sys_bpf(BPF_MAP_CREATE, &mut attr, "creating the XSKMAP") }?);
        let prog = load_program(&redirect_program(map.as_raw_fd()), "offlow_xsk")?;
        let (link, mode) = attach(&prog, ifindex, want)?;
        Ok(XdpProgram {
            link: Some(link),
            _prog: Some(prog),
            map: Some(map),
            key_base: 0,
            ifindex,
            queues,
            mode,
        })
    }

    /// The `XSKMAP` of a program someone else attached to `ifindex` (the
    /// offload tier's, which serves hot flows in the kernel and sends the
    /// rest to the sockets): sockets are registered in `map` at key
    /// `key_base + queue`. Nothing is attached or detached here.
    pub fn external(
        ifindex: u32,
        queues: u32,
        map: OwnedFd,
        key_base: u32,
        mode: XdpMode,
    ) -> XdpProgram {
        XdpProgram {
            link: None,
            _prog: None,
            map: Some(map),
            key_base,
            ifindex,
            queues: queues.max(1),
            mode,
        }
    }

    /// Load and attach a program that passes every frame: what a veth
    /// peer needs before frames can be *redirected into* the veth (see
    /// the tests), harmless otherwise.
    pub fn pass(ifname: &str, want: XdpAttach) -> io::Result<XdpProgram> {
        let ifindex = ifindex(ifname)?;
        let prog = load_program(&pass_program(), "offlow_pass")?;
        let (link, mode) = attach(&prog, ifindex, want)?;
        Ok(XdpProgram {
            link: Some(link),
            _prog: Some(prog),
            map: None,
            key_base: 0,
            ifindex,
            queues: 0,
            mode,
        })
    }

    /// The mode the program was attached in.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The interface it is attached to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Slots in its `XSKMAP` (0 for a pass program).
    pub fn queues(&self) -> u32 {
        self.queues
    }

    /// Steer queue `queue` to the `AF_XDP` socket `xsk` (bound to that
    /// queue of this interface). The kernel removes the entry itself when
    /// the socket closes.
    pub fn set_socket(&self, queue: u32, xsk: RawFd) -> io::Result<()> {
        let Some(map) = &self.map else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a pass program has no socket map",
            ));
        };
        if queue >= self.queues {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("queue {queue} beyond the map's {} slots", self.queues),
            ));
        }
        let key = self.key_base + queue;
        let value = xsk as u32;
        let mut attr = MapElemAttr {
            map_fd: map.as_raw_fd() as u32,
            _pad: 0,
            key: (&key as *const u32) as u64,
            value: (&value as *const u32) as u64,
            flags: 0, // BPF_ANY
        };
        // SAFETY: `attr` is the BPF_MAP_UPDATE_ELEM struct; `key` and
        // `value` are live u32s (the map's key and value size).
        unsafe { sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr, "inserting into the XSKMAP") }.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bpf_error_keeps_its_errno_and_message() {
        let e = io::Error::new(
            io::ErrorKind::ResourceBusy,
            BpfError {
                what: "attaching the XDP program".into(),
                errno: libc::EBUSY,
            },
        );
        assert_eq!(errno_of(&e), Some(libc::EBUSY));
        assert_eq!(
            e.to_string(),
            format!(
                "attaching the XDP program: {}",
                io::Error::from_raw_os_error(libc::EBUSY)
            )
        );
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::EINVAL)),
            Some(libc::EINVAL)
        );
        assert_eq!(errno_of(&io::Error::other("no errno")), None);
    }

    #[test]
    fn instructions_encode_as_the_kernel_expects() {
        let p = redirect_program(7);
        // struct bpf_insn is 8 bytes: code, dst:4|src:4, off, imm.
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        assert_eq!(
            (p[0].code, p[0].regs, p[0].off),
            (0x61, 0x12, 16),
            "r2 = *(u32 *)(r1 + 16)"
        );
        assert_eq!((p[1].code, p[1].regs, p[1].imm), (0x18, 0x11, 7));
        assert_eq!((p[2].code, p[2].imm), (0, 0), "second half of ld_imm64");
        assert_eq!((p[3].regs, p[3].imm), (0x03, 2));
        assert_eq!((p[4].code, p[4].imm), (0x85, 51));
        assert_eq!(p[5].code, 0x95);
    }

    #[test]
    fn attribute_structs_match_the_kernel_layout() {
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, log_buf), 32);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(std::mem::offset_of!(MapCreateAttr, map_name), 28);
        assert_eq!(std::mem::offset_of!(MapElemAttr, value), 16);
        assert_eq!(std::mem::size_of::<LinkCreateAttr>(), 16);
    }

    #[test]
    fn a_rejected_program_reports_the_verifier_log() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            eprintln!("skipping: needs root");
            return;
        }
        // r0 = XDP_PASS, then falls off the end: no exit.
        let bad = [insn(MOV64_IMM, 0, 0, 0, XDP_PASS)];
        let e = load_program(&bad, "offlow_bad").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("verifier log:"), "{msg}");
        assert!(
            msg.len() > "verifier log:".len() + 40,
            "a log came back: {msg}"
        );
        assert!(load_program(&pass_program(), "offlow_pass").is_ok());
    }
}
