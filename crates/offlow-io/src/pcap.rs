//! Capture files as ports: replay a classic pcap file as a port's input,
//! write what a port transmits to a pcap file.
//!
//! - [`PcapReader`] parses classic libpcap files (both byte orders,
//!   microsecond and nanosecond timestamps; link type Ethernet only — a
//!   switch port carries Ethernet frames). Every length is checked against
//!   the snap length, a 256 KiB ceiling and the bytes left; a bad record is
//!   an error naming its offset, never a panic or an over-read. pcapng is
//!   not read (convert with `tshark -F pcap`).
//! - [`PcapWriter`] writes microsecond little-endian pcap (what tcpdump
//!   writes), Ethernet link type.
//! - [`PcapPort`] is a [`Port`]: its input (if any) is the frames of a
//!   file, handed out once each, as fast as the worker takes them; its
//!   output (if any) is a file every transmitted frame is appended to,
//!   stamped with the wall clock. Flushes write the file's buffer out, so a
//!   reader sees every frame of a flushed batch.
//!
//! Invariants: no frame is handed out twice; frames are replayed in file
//! order; the input is read whole at open (capture files used for replay
//! are small; a bad file fails the open, not the run).
//!
//! Thread-safety: plain owned data; `Send`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{Port, PortStats, RxMeta};

/// `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Largest record accepted (libpcap's own ceiling for most link types).
pub const MAX_RECORD: u32 = 256 * 1024;
const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;

/// A malformed capture file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapError {
    /// Byte offset of the problem.
    pub offset: usize,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for PcapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for PcapError {}

fn err<T>(offset: usize, reason: impl Into<String>) -> Result<T, PcapError> {
    Err(PcapError {
        offset,
        reason: reason.into(),
    })
}

/// One record of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapRecord<'a> {
    /// Timestamp, nanoseconds since the epoch.
    pub ts_ns: u64,
    /// Length on the wire (may exceed `data` if the capture truncated it).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: &'a [u8],
}

/// A parsed classic pcap file over a byte slice.
#[derive(Debug, Clone)]
pub struct PcapReader<'a> {
    bytes: &'a [u8],
    big_endian: bool,
    nanos: bool,
    /// The header's snap length (informational: see `next_record`).
    snaplen: u32,
    pos: usize,
}

impl<'a> PcapReader<'a> {
    /// Check the file header.
    pub fn new(bytes: &'a [u8]) -> Result<PcapReader<'a>, PcapError> {
        let Some(h) = bytes.get(..HEADER_LEN) else {
            return err(0, "shorter than a pcap file header (24 bytes)");
        };
        let le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let be = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let (big_endian, nanos) = match (le, be) {
            (MAGIC_US, _) => (false, false),
            (MAGIC_NS, _) => (false, true),
            (_, MAGIC_US) => (true, false),
            (_, MAGIC_NS) => (true, true),
            _ if h[..4] == [0x0a, 0x0d, 0x0d, 0x0a] => {
                return err(0, "pcapng is not supported; convert with `tshark -F pcap`")
            }
            _ => return err(0, "not a pcap file (bad magic)"),
        };
        let r = PcapReader {
            bytes,
            big_endian,
            nanos,
            snaplen: 0,
            pos: HEADER_LEN,
        };
        let snaplen = r.u32_at(16);
        let linktype = r.u32_at(20) & 0x0fff_ffff;
        if linktype != LINKTYPE_ETHERNET {
            return err(
                20,
                format!("link type {linktype}: only Ethernet (1) frames can enter a switch port"),
            );
        }
        Ok(PcapReader { snaplen, ..r })
    }

    /// The snap length the header declares.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Whether timestamps are in nanoseconds.
    pub fn is_nanosecond(&self) -> bool {
        self.nanos
    }

    fn u32_at(&self, at: usize) -> u32 {
        // Callers check `at + 4 <= len` first.
        let b = [
            self.bytes[at],
            self.bytes[at + 1],
            self.bytes[at + 2],
            self.bytes[at + 3],
        ];
        if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// The next record, `None` at the end of the file.
    pub fn next_record(&mut self) -> Option<Result<PcapRecord<'a>, PcapError>> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let at = self.pos;
        if self.bytes.len() - at < RECORD_HEADER_LEN {
            self.pos = self.bytes.len();
            return Some(err(at, "truncated record header"));
        }
        let sec = u64::from(self.u32_at(at));
        let frac = u64::from(self.u32_at(at + 4));
        let incl = self.u32_at(at + 8);
        let orig_len = self.u32_at(at + 12);
        // Writers may set a small snap length yet keep longer records
        // (seen in the wild); the hard ceiling is what bounds memory.
        let limit = MAX_RECORD;
        let data_at = at + RECORD_HEADER_LEN;
        if incl > limit {
            self.pos = self.bytes.len();
            return Some(err(at, format!("record of {incl} bytes exceeds {limit}")));
        }
        let Some(data) = self.bytes.get(data_at..data_at + incl as usize) else {
            self.pos = self.bytes.len();
            return Some(err(
                at,
                format!("record of {incl} bytes runs past the end of the file"),
            ));
        };
        self.pos = data_at + incl as usize;
        let ts_ns = sec * 1_000_000_000 + if self.nanos { frac } else { frac * 1000 };
        Some(Ok(PcapRecord {
            ts_ns,
            orig_len,
            data,
        }))
    }
}

/// Writes a classic pcap file (little-endian, microseconds, Ethernet).
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Write the file header.
    pub fn new(mut out: W) -> io::Result<PcapWriter<W>> {
        let mut h = Vec::with_capacity(HEADER_LEN);
        h.extend_from_slice(&MAGIC_US.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&MAX_RECORD.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Append one frame stamped `ts_ns` (truncated to [`MAX_RECORD`]).
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> io::Result<()> {
        let data = &frame[..frame.len().min(MAX_RECORD as usize)];
        // Seconds fit u32 until 2106.
        let sec = (ts_ns / 1_000_000_000) as u32;
        let usec = ((ts_ns % 1_000_000_000) / 1000) as u32;
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&sec.to_le_bytes());
        h[4..8].copy_from_slice(&usec.to_le_bytes());
        h[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len().min(u32::MAX as usize) as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(data)
    }

    /// Flush the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// A port backed by capture files (see the module docs).
pub struct PcapPort {
    name: String,
    /// Frames to replay, in order (one buffer, offsets into it).
    input: Vec<u8>,
    frames: Vec<(usize, usize)>,
    next: usize,
    output: Option<PcapWriter<BufWriter<File>>>,
    output_path: Option<PathBuf>,
    pending: Vec<u8>,
    pending_lens: Vec<usize>,
    tx_batch: usize,
    stats: PortStats,
}

impl PcapPort {
    /// A port replaying `input` (if given) and writing to `output` (if
    /// given; created or truncated).
    pub fn open(name: &str, input: Option<&Path>, output: Option<&Path>) -> io::Result<PcapPort> {
        let mut buf = Vec::new();
        let mut frames = Vec::new();
        if let Some(p) = input {
            let bytes = std::fs::read(p)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
            let mut r = PcapReader::new(&bytes).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", p.display()))
            })?;
            while let Some(rec) = r.next_record() {
                let rec = rec.map_err(|e| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", p.display()))
                })?;
                frames.push((buf.len(), rec.data.len()));
                buf.extend_from_slice(rec.data);
            }
        }
        let output_w = match output {
            Some(p) => {
                let f = File::create(p)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
                let mut w = PcapWriter::new(BufWriter::new(f))?;
                w.flush()?;
                Some(w)
            }
            None => None,
        };
        Ok(PcapPort {
            name: name.to_string(),
            input: buf,
            frames,
            next: 0,
            output: output_w,
            output_path: output.map(Path::to_path_buf),
            pending: Vec::new(),
            pending_lens: Vec::new(),
            tx_batch: 256,
            stats: PortStats::default(),
        })
    }

    /// Frames of the input not yet handed out.
    pub fn remaining(&self) -> usize {
        self.frames.len() - self.next
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
        .unwrap_or(0)
}

impl Port for PcapPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8], RxMeta)) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            let Some(&(at, len)) = self.frames.get(self.next) else {
                break;
            };
            self.next += 1;
            let frame = &self.input[at..at + len];
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += len as u64;
            on_frame(
                frame,
                RxMeta {
                    wire_len: len as u32,
                    ..RxMeta::default()
                },
            );
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, frame: &[u8]) -> bool {
        if self.output.is_none() || self.pending_lens.len() >= self.tx_batch {
            self.stats.tx_dropped += 1;
            return false;
        }
        self.pending.extend_from_slice(frame);
        self.pending_lens.push(frame.len());
        true
    }

    fn flush(&mut self) -> io::Result<()> {
        let Some(w) = self.output.as_mut() else {
            return Ok(());
        };
        let ts = now_ns();
        let mut at = 0;
        let mut result = Ok(());
        for &len in &self.pending_lens {
            let frame = &self.pending[at..at + len];
            at += len;
            match w.write(ts, frame) {
                Ok(()) => {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += len as u64;
                }
                Err(e) => {
                    self.stats.tx_dropped += 1;
                    result = Err(e);
                }
            }
        }
        self.pending.clear();
        self.pending_lens.clear();
        if let Err(e) = w.flush() {
            result = Err(e);
        }
        result.map_err(|e| {
            let p = self.output_path.as_deref().unwrap_or(Path::new("?"));
            io::Error::new(e.kind(), format!("{}: {e}", p.display()))
        })
    }

    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    fn stats(&mut self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Writer then reader gives back every frame, in order.
        #[test]
        fn write_read_roundtrip(frames in proptest::collection::vec(
            (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..20)) {
            let mut w = PcapWriter::new(Vec::new()).unwrap();
            for (ts, f) in &frames {
                w.write(ts % (1u64 << 62), f).unwrap();
            }
            let bytes = w.into_inner();
            let mut r = PcapReader::new(&bytes).unwrap();
            let mut got = Vec::new();
            while let Some(rec) = r.next_record() {
                let rec = rec.unwrap();
                prop_assert_eq!(rec.orig_len as usize, rec.data.len());
                got.push(rec.data.to_vec());
            }
            let want: Vec<Vec<u8>> = frames.iter().map(|(_, f)| f.clone()).collect();
            prop_assert_eq!(got, want);
        }

        /// Any bytes: an error or records, never a panic or over-read.
        #[test]
        fn arbitrary_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..400),
                                       valid_header in any::<bool>()) {
            if valid_header && bytes.len() >= 24 {
                bytes[..4].copy_from_slice(&MAGIC_US.to_le_bytes());
                bytes[20..24].copy_from_slice(&1u32.to_le_bytes());
            }
            if let Ok(mut r) = PcapReader::new(&bytes) {
                let mut n = 0;
                while let Some(rec) = r.next_record() {
                    n += 1;
                    if rec.is_err() { break; }
                    prop_assert!(n < 1000);
                }
            }
        }
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(PcapReader::new(&[0u8; 10])
            .unwrap_err()
            .reason
            .contains("shorter"));
        let ng = [
            0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert!(PcapReader::new(&ng).unwrap_err().reason.contains("pcapng"));
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write(0, &[1, 2, 3, 4]).unwrap();
        let mut bytes = w.into_inner();
        bytes.truncate(bytes.len() - 1);
        let mut r = PcapReader::new(&bytes).unwrap();
        let e = r.next_record().unwrap().unwrap_err();
        assert_eq!(e.offset, 24);
        assert!(e.reason.contains("past the end"), "{e}");
        assert!(r.next_record().is_none());
        // Not Ethernet.
        let mut raw = PcapWriter::new(Vec::new()).unwrap().into_inner();
        raw[20] = 101;
        assert!(PcapReader::new(&raw)
            .unwrap_err()
            .reason
            .contains("link type"));
    }

    #[test]
    fn big_endian_nanosecond_files_read() {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC_NS.to_be_bytes());
        b.extend_from_slice(&2u16.to_be_bytes());
        b.extend_from_slice(&4u16.to_be_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&65535u32.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&7u32.to_be_bytes());
        b.extend_from_slice(&9u32.to_be_bytes());
        b.extend_from_slice(&3u32.to_be_bytes());
        b.extend_from_slice(&60u32.to_be_bytes());
        b.extend_from_slice(&[0xaa, 0xbb, 0xcc]);
        let mut r = PcapReader::new(&b).unwrap();
        assert!(r.is_nanosecond());
        let rec = r.next_record().unwrap().unwrap();
        assert_eq!(rec.ts_ns, 7_000_000_009);
        assert_eq!(rec.orig_len, 60);
        assert_eq!(rec.data, &[0xaa, 0xbb, 0xcc]);
    }

    #[test]
    fn the_shared_captures_read_whole() {
        let dir = match std::env::var_os("OFFLOW_DATA_DIR") {
            Some(d) => PathBuf::from(d).join("pcap"),
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/pcap"),
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            assert!(std::env::var_os("CI").is_none(), "CI needs shared/data");
            eprintln!("NOTICE: {} absent; skipping", dir.display());
            return;
        };
        let mut total = 0;
        for e in entries.flatten() {
            let bytes = std::fs::read(e.path()).unwrap();
            let mut r = PcapReader::new(&bytes).unwrap();
            while let Some(rec) = r.next_record() {
                rec.unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
                total += 1;
            }
        }
        assert!(total > 100, "{total} records");
    }
}
