//! offlow-classifier (in progress).
