//! Bounded big-endian reader and writer helpers.
//!
//! A [`Reader`] hands out bytes only from its own slice, and [`Reader::sub`]
//! splits off a bounded sub-reader, so a length-prefixed structure cannot
//! read past its declared end (the rustls `Reader` habit). Each reader carries
//! the [`DecodeError`] it reports on a short read: a truncated action reports
//! `OFPBAC_BAD_LEN`, a truncated match `OFPBMC_BAD_LEN`, and so on, without
//! every call site mapping errors.
//!
//! Invariants: `pos <= buf.len()` always; no method panics.
//!
//! Thread-safety: plain borrowed data.

use crate::error::DecodeError;

/// A cursor over a byte slice that never reads past its end.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    err: DecodeError,
}

impl<'a> Reader<'a> {
    /// A reader over `buf` reporting `err` when a read runs short.
    pub(crate) fn new(buf: &'a [u8], err: DecodeError) -> Self {
        Reader { buf, pos: 0, err }
    }

    /// Bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True when every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The error reported by short reads.
    pub(crate) fn err(&self) -> DecodeError {
        self.err
    }

    /// The next `n` bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(self.err);
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    /// Skip `n` bytes (padding; its contents are ignored, as in OVS).
    pub(crate) fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.bytes(n).map(|_| ())
    }

    /// Everything not yet read.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        // `pos <= buf.len()` is the reader invariant.
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    /// A sub-reader over the next `n` bytes, reporting `err` on short reads.
    pub(crate) fn sub(&mut self, n: usize, err: DecodeError) -> Result<Reader<'a>, DecodeError> {
        let b = self.bytes(n)?;
        Ok(Reader::new(b, err))
    }

    /// Peek at a big-endian u16 `off` bytes ahead without consuming.
    pub(crate) fn peek_u16(&self, off: usize) -> Result<u16, DecodeError> {
        let s = self.pos + off;
        match self.buf.get(s..s + 2) {
            Some(b) => Ok(u16::from_be_bytes([b[0], b[1]])),
            None => Err(self.err),
        }
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.bytes(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
}

/// Big-endian appends onto a `Vec<u8>`.
pub(crate) trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_zeros(&mut self, n: usize);
    /// Zero-pad so that the bytes since `start` are a multiple of 8.
    fn pad8_from(&mut self, start: usize);
    /// Write `v` as a big-endian u16 at `at` (a length placeholder).
    fn patch_u16(&mut self, at: usize, v: u16);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_zeros(&mut self, n: usize) {
        self.resize(self.len() + n, 0);
    }
    fn pad8_from(&mut self, start: usize) {
        let n = (self.len() - start) % 8;
        if n != 0 {
            self.put_zeros(8 - n);
        }
    }
    fn patch_u16(&mut self, at: usize, v: u16) {
        if let Some(s) = self.get_mut(at..at + 2) {
            s.copy_from_slice(&v.to_be_bytes());
        }
    }
}

/// Round `n` up to a multiple of 8.
pub(crate) const fn round8(n: usize) -> usize {
    (n + 7) & !7
}
