//! offlow-bench (in progress).
