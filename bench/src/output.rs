//! Where the report goes: the table on stdout, the JSON and SVG files
//! asked for, and the exit status.

use super::error::{BenchError, Context};
use super::plot;
use super::report::{self, Report, Run};
use std::path::Path;

/// Refuses, before anything is measured, a `--json` or `--plot` path that
/// could not be written at the end (found then, it would cost the whole
/// run): a directory, or a file in a directory that is missing or not
/// writable.
pub fn check_destinations(json: Option<&Path>, plot: Option<&Path>) -> Result<(), BenchError> {
    for (flag, p) in [("--json", json), ("--plot", plot)] {
        let Some(p) = p else { continue };
        if p.is_dir() {
            return Err(BenchError::Refused(format!(
                "{flag} {}: is a directory",
                p.display()
            )));
        }
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| BenchError::Usage(format!("{flag} {}: path contains NUL", p.display())))?;
        // SAFETY: a valid NUL-terminated path.
        if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
            return Err(BenchError::Io {
                what: format!("{flag} {}: cannot write in {}", p.display(), dir.display()),
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// Phase 6: writes the JSON (--json) and the chart (--plot), then prints
/// the table; a failure of one does not keep the others from being
/// written, and the first is returned. Called once the sides are
/// unmounted, so a failure to write leaves no mount behind.
pub fn write(
    rep: &Report,
    json: Option<&Path>,
    plot: Option<&Path>,
    wide: bool,
) -> Result<(), BenchError> {
    let mut first = Ok(());
    let mut keep = |r: Result<(), BenchError>| {
        if first.is_ok() {
            first = r;
        }
    };
    if let Some(p) = json {
        keep(
            serde_json::to_string_pretty(rep)
                .context("serialising the report")
                .and_then(|text| {
                    std::fs::write(p, text + "\n")
                        .with_context(|| format!("writing {}", p.display()))
                }),
        );
    }
    if let Some(p) = plot {
        keep(std::fs::write(p, plot::svg(rep)).with_context(|| format!("writing {}", p.display())));
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    keep(
        out.write_all(report::table(rep, wide).as_bytes())
            .and_then(|()| out.flush())
            .with_context(|| "writing the table to stdout".to_string()),
    );
    first
}

/// The exit status: 1 when an operation of any run failed, since those
/// times are not comparable (said on stderr), else 0.
pub fn exit_code(rep: &Report) -> i32 {
    match failure(&rep.runs) {
        Some(msg) => {
            eprintln!("{msg}");
            1
        }
        None => 0,
    }
}

/// The warning for failed operations, naming the first error; None if none failed.
fn failure(runs: &[Run]) -> Option<String> {
    let failed: u64 = runs.iter().map(|r| r.errors).sum();
    if failed == 0 {
        return None;
    }
    let first = runs
        .iter()
        .find_map(|r| r.first_error.as_deref())
        .unwrap_or("");
    Some(format!(
        "packfs bench: {failed} operations failed (first: {first}); the times above are not comparable"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::args::{self, Workload};
    use super::super::assemble;
    use super::super::grid::Cell;
    use super::super::workload::Outcome;
    use super::*;

    fn run(side: usize, errors: u64, first_error: Option<&str>) -> Run {
        let cell = Cell {
            plan: 0,
            threads: 1,
            repeat: 1,
            side,
            epoch: 1,
        };
        let out = Outcome {
            seconds: 1.0,
            errors,
            first_error: first_error.map(String::from),
            ..Outcome::default()
        };
        let label = ["raw", "kernel"][side];
        assemble::make_run(label, Workload::Walk, cell, out, report::Storage::default())
    }

    #[test]
    fn any_failed_operation_fails_the_bench() {
        assert_eq!(failure(&[run(0, 0, None), run(1, 0, None)]), None);
        assert_eq!(
            failure(&[
                run(0, 0, None),
                run(1, 2, Some("x: EIO")),
                run(1, 1, Some("y"))
            ])
            .unwrap(),
            "packfs bench: 3 operations failed (first: x: EIO); the times above are not comparable"
        );
        let rep = assemble::example(&args::parse(&["--raw", "/raw"]), vec![run(0, 1, None)]);
        assert_eq!(exit_code(&rep), 1);
    }

    #[test]
    fn json_and_svg_are_written_where_asked() {
        let dir = tempfile::tempdir().unwrap();
        let (json, svg) = (dir.path().join("r.json"), dir.path().join("r.svg"));
        let a = args::parse(&["--raw", "/raw"]);
        let rep = assemble::example(&a, vec![run(0, 0, None), run(1, 0, None)]);
        write(&rep, Some(&json), Some(&svg), false).unwrap();
        let text = std::fs::read_to_string(&json).unwrap();
        assert!(text.ends_with("}\n"));
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back.runs.len(), 2);
        assert_eq!(back.runs[1].ratio_vs_raw, Some(1.0));
        assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
        assert_eq!(exit_code(&rep), 0);

        let missing = dir.path().join("no/such/dir/r.json");
        let e = write(&rep, Some(&missing), None, false).unwrap_err();
        assert!(e.to_string().starts_with("writing "), "{e}");
    }
}
