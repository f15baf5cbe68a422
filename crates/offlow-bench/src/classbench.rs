//! classbench (in progress).
