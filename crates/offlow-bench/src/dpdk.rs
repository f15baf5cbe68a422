//! dpdk (in progress).
