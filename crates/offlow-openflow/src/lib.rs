//! offlow-openflow: the OpenFlow 1.3 codec (sans-IO). Work in progress.
#![warn(missing_docs)]
