//! indicatif progress for the packer, shown only when stderr is a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

pub struct Bar(ProgressBar);

impl Bar {
    pub fn new_if_tty() -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let pb = ProgressBar::hidden();
        pb.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .expect("valid template"),
        );
        Some(Bar(pb))
    }
}

impl packer::Progress for Bar {
    fn start(&self, total_bytes: u64, _total_entries: u64) {
        if total_bytes == 0 {
            // A stream of unknown length (stdin): what was read, and how fast.
            self.0.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bytes} {bytes_per_sec}",
                )
                .expect("valid template"),
            );
        }
        self.0.set_length(total_bytes);
        self.0
            .set_draw_target(indicatif::ProgressDrawTarget::stderr());
    }
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}
