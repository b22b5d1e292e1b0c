//! `packfs._native`: the Rust half of the Python package `packfs`.
//!
//! A thin layer over `mountfs`: images are opened by mountfs's opener, from
//! options the binding builds with a counting layer of its own (`open.rs`),
//! paths are resolved as the
//! kernel resolves them (`PackFs::resolve_path`), and reads and listings are `PackFs`
//! calls (`image.rs`), the same core the FUSE server answers from. What
//! lives here is only what Python needs on top: exceptions as `os` raises
//! them (`errors.rs`), the GIL released around every call, parallel reads
//! for `read_many`, and safety across `fork` (`fork.rs`). The Python API
//! itself (pickling, file objects, `walk`, fsspec, torch) is Python, in
//! python/packfs/.

mod errors;
mod fork;
mod image;
mod open;
mod walk;

use pyo3::prelude::*;

/// Bytes this process may use: RAM, or the tightest cgroup limit (v2 or
/// v1) of a Slurm job or container, as `packfs mount` computes it.
#[pyfunction]
fn memory_limit() -> u64 {
    mountfs::memory_limit::limit()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<image::NativeImage>()?;
    m.add(
        "NotAnImageError",
        m.py().get_type::<errors::NotAnImageError>(),
    )?;
    m.add_function(wrap_pyfunction!(memory_limit, m)?)?;
    m.add_function(wrap_pyfunction!(fork::before_fork, m)?)?;
    m.add_function(wrap_pyfunction!(fork::after_fork_in_parent, m)?)?;
    m.add_function(wrap_pyfunction!(fork::after_fork_in_child, m)?)?;
    Ok(())
}
