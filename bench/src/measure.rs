//! The timed part of a bench: the grid of runs, each a workload replayed
//! on one side, cold or warm, with the storage counters read around it.

use super::args::{BenchArgs, Workload};
use super::assemble;
use super::error::{BenchError, Context};
use super::grid::{schedule, Cell};
use super::plan::Ctx;
use super::report::Run;
use super::sides::{self, Side, SideKind};
use super::storage;
use super::workload::{self, Plan};

/// Phase 4: takes every run of the grid, printing a progress line after
/// each. Hands the runs to the report, their ratios to raw not filled in.
pub fn measure(
    ctx: &Ctx,
    sides: &mut [Side],
    plans: &[(Workload, Plan)],
    a: &BenchArgs,
) -> Result<Vec<Run>, BenchError> {
    let mut runs = Vec::new();
    for c in schedule(plans.len(), &a.threads, a.repeat, sides.len(), a.epochs) {
        let (w, plan) = &plans[c.plan];
        let r = run_cell(ctx, sides, *w, plan, c)?;
        eprintln!("{}", progress_line(&r));
        runs.push(r);
    }
    Ok(runs)
}

/// One run: makes the side cold on a first epoch, replays the plan under
/// the side's root, and records what it did next to the counters' growth.
fn run_cell(
    ctx: &Ctx,
    sides: &mut [Side],
    w: Workload,
    plan: &Plan,
    c: Cell,
) -> Result<Run, BenchError> {
    let before = if c.cold() {
        // Read before the remount: a cold run is charged for it.
        let pre = storage::before_cold(ctx, &sides[c.side]);
        sides::make_cold(ctx, sides, c.side)
            .with_context(|| format!("making side {} cold", sides[c.side].label))?;
        pre
    } else {
        storage::snapshot(ctx, &sides[c.side], true)
    };
    let side = &sides[c.side];
    let out = workload::execute(plan, side.root(&ctx.raw), c.threads);
    let after = storage::snapshot(ctx, side, false);
    let is_raw = matches!(side.kind, SideKind::Raw { .. });
    let used = storage::storage(&before, &after, w, is_raw);
    Ok(assemble::make_run(&side.label, w, c, out, used))
}

/// The line on stderr after each run, so a long bench shows its progress.
fn progress_line(r: &Run) -> String {
    format!(
        "packfs bench: {:<8} {:<10} {:>3} thr  {} {}  {:.3} s{}",
        r.side,
        r.workload,
        r.threads,
        if r.cold { "cold" } else { "warm" },
        r.epoch,
        r.seconds,
        if r.errors > 0 {
            format!("  ({} errors)", r.errors)
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::super::report::Storage;
    use super::super::workload::Outcome;
    use super::*;

    #[test]
    fn progress_line_says_side_workload_state_and_errors() {
        let out = |errors| Outcome {
            seconds: 1.23456,
            errors,
            ..Outcome::default()
        };
        let cell = Cell {
            plan: 0,
            threads: 4,
            repeat: 1,
            side: 1,
            epoch: 2,
        };
        let r = assemble::make_run(
            "packfs",
            Workload::Shuffle,
            cell,
            out(0),
            Storage::default(),
        );
        assert_eq!(
            progress_line(&r),
            "packfs bench: packfs   shuffle      4 thr  warm 2  1.235 s"
        );
        let cold = Cell { epoch: 1, ..cell };
        let r = assemble::make_run("raw", Workload::Walk, cold, out(3), Storage::default());
        assert_eq!(
            progress_line(&r),
            "packfs bench: raw      walk         4 thr  cold 1  1.235 s  (3 errors)"
        );
    }
}
