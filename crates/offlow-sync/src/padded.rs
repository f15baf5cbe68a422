//! [`CachePadded`]: a value alone on its cache lines.

/// `T` aligned, and so padded, to 128 bytes: two cache lines, the pair the
/// adjacent-line prefetcher moves together. Nothing else shares a line with
/// it, so a value one core writes (an epoch, an index, an ack, a counter)
/// does not make another core's loads of its neighbours miss.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct CachePadded<T>(pub T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn neighbours_fall_on_other_lines() {
        let pair = [
            CachePadded(AtomicU64::new(1)),
            CachePadded(AtomicU64::new(2)),
        ];
        let a = std::ptr::from_ref(&pair[0].0) as usize;
        let b = std::ptr::from_ref(&pair[1].0) as usize;
        assert_eq!(a % 128, 0);
        assert_eq!(b - a, 128);
        assert_eq!(pair[1].load(std::sync::atomic::Ordering::Relaxed), 2);
    }
}
