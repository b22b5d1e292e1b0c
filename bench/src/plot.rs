//! `--plot FILE.svg`: a grouped bar chart, hand-written SVG (no dependency,
//! opens in any browser).
//!
//! One panel per workload, each with its own seconds axis: a walk takes
//! milliseconds where a shuffle takes minutes, and one shared axis would
//! flatten the short ones to nothing. Inside a panel a group is one thread
//! count and cold or warm, a bar is one side (the median over repeats and
//! warm epochs), and the value is written on the bar.

use super::report::Report;
use std::fmt::Write;

const COLORS: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];
const PANEL_H: f64 = 280.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const LEGEND_H: f64 = 50.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn nice_step(max: f64) -> f64 {
    let raw = (max / 4.0).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn fmt_secs(v: f64) -> String {
    if v == 0.0 {
        "0".to_string()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else if v >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

/// The chart's geometry, shared by the legend and the panels.
struct Layout<'a> {
    sides: Vec<&'a str>,
    /// Thread count x (cold, warm), in the order the user gave.
    groups: Vec<(usize, bool)>,
    bar_w: f64,
    group_w: f64,
    width: f64,
}

impl<'a> Layout<'a> {
    fn of(rep: &'a Report) -> Self {
        let sides: Vec<&str> = rep.sides.iter().map(|s| s.label.as_str()).collect();
        let mut groups: Vec<(usize, bool)> = Vec::new();
        for &t in &rep.config.threads {
            for cold in [true, false] {
                if rep.runs.iter().any(|r| r.threads == t && r.cold == cold) {
                    groups.push((t, cold));
                }
            }
        }
        let bar_w = 26.0_f64.min(200.0 / sides.len().max(1) as f64).max(8.0);
        let group_w = bar_w * sides.len() as f64 + 28.0;
        let width = (LEFT + RIGHT + group_w * groups.len() as f64).max(520.0);
        Layout {
            sides,
            groups,
            bar_w,
            group_w,
            width,
        }
    }
}

pub fn svg(rep: &Report) -> String {
    let l = Layout::of(rep);
    let workloads = &rep.config.workloads;
    let width = l.width;
    let height = LEGEND_H + PANEL_H * workloads.len() as f64 + 10.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    legend(&mut s, rep, &l);
    for (wi, w) in workloads.iter().enumerate() {
        panel(&mut s, rep, &l, wi, w);
    }
    s.push_str("</svg>\n");
    s
}

/// The title and one coloured square per side.
fn legend(s: &mut String, rep: &Report, l: &Layout) {
    let sides = &l.sides;
    let title = match &rep.config.emulate_latency {
        Some(l) => format!(
            "packfs bench: seconds per epoch (emulated latency {} us meta, {} us read)",
            l.meta_us, l.read_us
        ),
        None => "packfs bench: seconds per epoch (lower is better)".to_string(),
    };
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{}</text>"#,
        esc(&title)
    );
    let mut x = LEFT;
    for (i, side) in sides.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="28" width="12" height="12" fill="{}"/><text x="{:.1}" y="38" font-size="12">{}</text>"#,
            COLORS[i % COLORS.len()],
            x + 16.0,
            esc(side)
        );
        x += 24.0 + 7.0 * side.chars().count() as f64;
    }
}

/// The seconds of each bar of workload `w`'s panel, by group and side: the
/// median over repeats (and warm epochs); None for a bar with no run.
fn medians(rep: &Report, l: &Layout, w: &str) -> Vec<Vec<Option<f64>>> {
    l.groups
        .iter()
        .map(|&(t, cold)| {
            l.sides
                .iter()
                .map(|side| {
                    let v: Vec<f64> = rep
                        .runs
                        .iter()
                        .filter(|r| {
                            r.side == *side && r.workload == w && r.threads == t && r.cold == cold
                        })
                        .map(|r| r.seconds)
                        .collect();
                    (!v.is_empty()).then(|| median(v))
                })
                .collect()
        })
        .collect()
}

/// The panel of workload `w` (the `wi`th): its axis, then one group of
/// bars per thread count and state.
fn panel(s: &mut String, rep: &Report, l: &Layout, wi: usize, w: &str) {
    let (sides, groups, bar_w, group_w, width) = (&l.sides, &l.groups, l.bar_w, l.group_w, l.width);
    let top = LEGEND_H + PANEL_H * wi as f64;
    let (y0, y1) = (top + TOP, top + PANEL_H - BOTTOM);
    let values = medians(rep, l, w);
    let max = values
        .iter()
        .flatten()
        .flatten()
        .fold(0.0f64, |a, &b| a.max(b));
    // Headroom above the tallest bar for its value label.
    let step = nice_step(max * 1.25);
    let top_v = (max * 1.25 / step).ceil().max(1.0) * step;
    let y_of = |v: f64| y1 - (v / top_v) * (y1 - y0);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{:.1}" font-size="13" font-weight="bold">{}</text>"#,
        top + 24.0,
        esc(w)
    );
    // Axes, grid and ticks.
    let mut tick = 0.0;
    while tick <= top_v + step * 1e-6 {
        let y = y_of(tick);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#dddddd"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{}</text>"##,
            width - RIGHT,
            LEFT - 6.0,
            y + 3.5,
            fmt_secs(tick)
        );
        tick += step;
    }
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" y1="{y0:.1}" x2="{LEFT}" y2="{y1:.1}" stroke="black"/><line x1="{LEFT}" y1="{y1:.1}" x2="{:.1}" y2="{y1:.1}" stroke="black"/>"#,
        width - RIGHT
    );
    let mid = (y0 + y1) / 2.0;
    let _ = writeln!(
        s,
        r#"<text x="20" y="{mid:.1}" font-size="11" text-anchor="middle" transform="rotate(-90 20 {mid:.1})">seconds</text>"#
    );
    for (gi, &(t, cold)) in groups.iter().enumerate() {
        let gx = LEFT + 14.0 + group_w * gi as f64;
        for (si, v) in values[gi].iter().enumerate() {
            let Some(v) = *v else { continue };
            let bx = gx + bar_w * si as f64;
            let by = y_of(v);
            let h = (y1 - by).max(if v > 0.0 { 1.0 } else { 0.0 });
            let _ = writeln!(
                s,
                r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{} {} {} threads {}: {} s</title></rect>"#,
                y1 - h,
                bar_w - 2.0,
                COLORS[si % COLORS.len()],
                esc(sides[si]),
                esc(w),
                t,
                if cold { "cold" } else { "warm" },
                fmt_secs(v)
            );
            let cx = bx + (bar_w - 2.0) / 2.0;
            let ty = y1 - h - 3.0;
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{ty:.1}" font-size="9" text-anchor="start" transform="rotate(-90 {cx:.1} {ty:.1})" dy="3">{}</text>"#,
                fmt_secs(v)
            );
        }
        let lx = gx + bar_w * sides.len() as f64 / 2.0;
        let _ = writeln!(
            s,
            r#"<text x="{lx:.1}" y="{:.1}" font-size="11" text-anchor="middle">{t} thr</text><text x="{lx:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
            y1 + 15.0,
            y1 + 29.0,
            if cold { "cold" } else { "warm" }
        );
    }
}
