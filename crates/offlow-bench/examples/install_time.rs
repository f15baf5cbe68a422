//! How long `Control::install` holds its caller (the switch's control
//! thread) for a BGP table built on another thread, with the build made
//! for one install (each pipeline copy's FIB copied at install) and for the
//! two copies of the left-right pair (the copies made with the build).
//!
//! Usage: `cargo run --release -p offlow-bench --example install_time --
//! TABLE [ROUNDS]` with TABLE a BGP table as for `offlow bench fib`.
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use offlow_bench::{fib, workload};
use offlow_datapath::{Control, PIPELINE_COPIES};
use offlow_pipeline::Pipeline;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next().map(PathBuf::from) else {
        eprintln!("usage: install_time TABLE [ROUNDS]");
        return ExitCode::FAILURE;
    };
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2);
    let table = match fib::load_table(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let mods = workload::fib_flow_mods(&table, 0, 16, true);
    println!(
        "| built for | build (ms) | install + commit: control thread blocked (ms) | serving |"
    );
    println!("|---|---|---|---|");
    for _ in 0..rounds {
        for installs in [1, PIPELINE_COPIES] {
            let mut control = Control::new(Pipeline::new(1));
            for fm in &mods {
                if let Err(e) = control.flow_mod(fm, 0) {
                    eprintln!("flow-mod: {e}");
                    return ExitCode::FAILURE;
                }
            }
            control.commit();
            let inputs = control.pipeline().compile_inputs();
            let t0 = Instant::now();
            let built: Vec<_> = inputs
                .iter()
                .map(|(t, input)| (*t, input.build_for(installs)))
                .collect();
            let build_ms = t0.elapsed().as_secs_f64() * 1e3;
            // As the switch does: install, then commit (which replays the
            // install on the second copy once the workers have left it).
            let t1 = Instant::now();
            control.install(built);
            control.commit();
            let install_ms = t1.elapsed().as_secs_f64() * 1e3;
            let serving = control.pipeline().table_structures();
            println!("| {installs} | {build_ms:.0} | {install_ms:.0} | {serving:?} |");
        }
    }
    ExitCode::SUCCESS
}
