//! offlow-pipeline (in progress).
