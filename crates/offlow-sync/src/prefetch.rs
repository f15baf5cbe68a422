//! [`prefetch`]: start loading a cache line before it is needed.
//!
//! A hot loop that knows which lines its next items touch (a hash bucket,
//! a rule's counters, a flow-mod's fields) calls this a few items ahead, so
//! the cache misses of consecutive items overlap instead of queueing one
//! after another.

/// Hint the CPU to pull the line holding `p` into L1. A no-op off x86_64.
///
/// `p` need not be valid or even dereferenceable: a prefetch is a hint and
/// never faults, so callers may compute addresses with `wrapping_add` past
/// the end of an object.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults, whatever the address,
    // and SSE, which provides it, is part of the x86_64 baseline.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_address_is_a_harmless_hint() {
        let v = [1u64, 2, 3];
        prefetch(&v[1]);
        prefetch(std::ptr::null::<u64>());
        prefetch(v.as_ptr().wrapping_add(1 << 40));
        assert_eq!(v, [1, 2, 3]);
    }
}
