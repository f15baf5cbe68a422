//! The generated skeletons of `bpf/*.bpf.c` (see `build.rs`).
#![allow(missing_docs, clippy::all, unreachable_pub, unsafe_op_in_unsafe_fn)]
#![allow(unused_imports, dead_code)]
#![allow(clippy::undocumented_unsafe_blocks)]

pub(crate) mod gen {
    include!(concat!(env!("OUT_DIR"), "/gen.skel.rs"));
}
pub(crate) mod sink {
    include!(concat!(env!("OUT_DIR"), "/sink.skel.rs"));
}
pub(crate) mod ceiling {
    include!(concat!(env!("OUT_DIR"), "/ceiling.skel.rs"));
}
pub(crate) mod floor {
    include!(concat!(env!("OUT_DIR"), "/floor.skel.rs"));
}
pub(crate) mod pass {
    include!(concat!(env!("OUT_DIR"), "/pass.skel.rs"));
}
pub(crate) mod tcwire {
    include!(concat!(env!("OUT_DIR"), "/tcwire.skel.rs"));
}
