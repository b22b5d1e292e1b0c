//! The grid of runs a bench takes: every workload, thread count,
//! repetition, side and epoch, in the order they are run.

/// One run of the grid: one epoch of one workload on one side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    /// Index into the plans.
    pub plan: usize,
    pub threads: usize,
    /// 1-based.
    pub repeat: usize,
    /// Index into the sides.
    pub side: usize,
    /// 1-based.
    pub epoch: usize,
}

impl Cell {
    /// The first epoch of each repetition starts cold; the rest run on
    /// whatever it left cached.
    pub fn cold(&self) -> bool {
        self.epoch == 1
    }
}

/// The runs in the order they are taken. The sides of one repetition run
/// back to back, so each ratio compares runs taken close together; a side's
/// epochs run in a row, so its warm epochs find what its cold one cached.
pub fn schedule(
    plans: usize,
    threads: &[usize],
    repeat: usize,
    sides: usize,
    epochs: usize,
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for plan in 0..plans {
        for &threads in threads {
            for repeat in 1..=repeat {
                for side in 0..sides {
                    for epoch in 1..=epochs {
                        cells.push(Cell {
                            plan,
                            threads,
                            repeat,
                            side,
                            epoch,
                        });
                    }
                }
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_repetition_of_every_side_starts_cold() {
        let cells = schedule(2, &[1, 8], 2, 3, 2);
        assert_eq!(cells.len(), 2 * 2 * 2 * 3 * 2);
        let key = |c: &Cell| (c.plan, c.threads, c.repeat, c.side, c.epoch);
        // Strictly increasing in that key, and as many as the grid holds: the
        // whole grid, workload outermost and epoch innermost.
        assert!(cells.windows(2).all(|p| key(&p[0]) < key(&p[1])));
        assert_eq!(
            cells[..4].iter().map(key).collect::<Vec<_>>(),
            [
                (0, 1, 1, 0, 1),
                (0, 1, 1, 0, 2),
                (0, 1, 1, 1, 1),
                (0, 1, 1, 1, 2)
            ]
        );
        for c in &cells {
            assert_eq!(c.cold(), c.epoch == 1);
        }
        assert_eq!(cells.iter().filter(|c| c.cold()).count(), 2 * 2 * 2 * 3);
    }

    #[test]
    fn thread_counts_are_swept_in_the_order_given() {
        let t: Vec<usize> = schedule(1, &[4, 1], 1, 1, 1)
            .iter()
            .map(|c| c.threads)
            .collect();
        assert_eq!(t, [4, 1]);
    }
}
