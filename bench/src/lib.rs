//! `packfs bench`: the honest "mounted vs raw" comparison, on the user's
//! own data.
//!
//! A speed-up claimed for a packed image is only worth something when both
//! sides did the same work from the same starting state. So the bench
//! * plans every workload once from the raw tree and replays it on each
//!   side (`workload`),
//! * refuses to compare a mount that does not hold the raw tree's files
//!   (`verify`),
//! * starts each repetition cold, says exactly what "cold" meant, and never
//!   labels a warm run cold (`cold`),
//! * reports what reached the storage underneath next to the times
//!   (`iostat`), because "one open of an image instead of 70,000 opens of
//!   files" is the mechanism a reader should see, and
//! * can replay both sides through a latency-injecting passthrough
//!   (`passthrough`) to show what a network filesystem would do to them.
//!
//! The CLI calls [`run`] with the parsed flags and a [`MountCommand`]: how
//! to start `packfs mount` and which remote flags it gets, so this crate
//! keeps no process-global state and knows no other part of the CLI.
//!
//! [`run`] goes through six phases, each in the module named for it:
//! `plan::prepare` (arguments, tree, workload plans; nothing mounted),
//! `sides::open` (the mounts), `verify::check_sides`, `measure::measure`
//! (the timed grid, counters from `storage`), `assemble::report`, and
//! `output::write` with `output::exit_code`.

mod args;
mod assemble;
mod cold;
mod error;
mod grid;
mod grouped;
mod iostat;
mod measure;
mod mounts;
mod output;
mod passthrough;
mod plan;
mod plot;
mod report;
mod rng;
mod sides;
pub mod size;
mod storage;
mod tree;
mod verify;
mod workload;

pub use args::BenchArgs;
pub use error::BenchError;
pub use mounts::MountCommand;

/// `packfs bench`: 0 when every run succeeded, 1 when operations failed
/// (the times are then printed but not comparable); an error when the
/// bench refused or could not measure.
pub fn run(a: &BenchArgs, mount: &MountCommand) -> Result<i32, BenchError> {
    output::check_destinations(a.json.as_deref(), a.plot.as_deref())?;
    let p = plan::prepare(a)?;
    let mut sides = sides::open(
        plan::side_specs(a),
        &p.ctx,
        p.latency.as_ref(),
        mount,
        &plan::own_mount_args(a),
    )?;
    verify::check_sides(&p.ctx, &sides, a.no_verify, a.seed)?;
    let runs = measure::measure(&p.ctx, &mut sides, &p.plans, a)?;
    let rep = assemble::report(a, &p, &sides, runs);
    // Unmount before writing anything, so a failure below leaves no mount.
    drop(sides);
    output::write(&rep, a.json.as_deref(), a.plot.as_deref(), a.wide)?;
    Ok(output::exit_code(&rep))
}
