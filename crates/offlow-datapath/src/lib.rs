//! offlow-datapath (in progress).
