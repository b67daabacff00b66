//! The `courant._courant` extension module: Python classes over `courant-client`.
//!
//! - [`client`]: `Client` (List, Apply, Append, Read, ListFragments);
//! - [`reader`]: `Reader`, a journal read as an iterator of byte chunks;
//! - [`spec`]: `JournalSpec`, `Journal`, `Fragment`;
//! - [`publisher`]: `Publisher`, `Transaction` (Gazette's transactional publisher);
//! - [`consumer`]: `Consumer` (read-committed messages of several journals, checkpoints);
//! - [`framings`]: a journal's framing by its `content-type`, messages to and from Python;
//! - [`errors`]: the client's errors as `courant.errors` exceptions;
//! - [`runtime`]: the module's tokio runtime; every wait on it releases the GIL.
//!
//! Lives on: the Python interpreter that imports the module; the runtime is process-wide.

mod client;
mod consumer;
mod errors;
mod framings;
mod publisher;
mod reader;
mod runtime;
mod spec;

use pyo3::prelude::*;

#[pymodule]
fn _courant(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<client::Client>()?;
    m.add_class::<reader::Reader>()?;
    m.add_class::<spec::JournalSpec>()?;
    m.add_class::<spec::JournalInfo>()?;
    m.add_class::<spec::FragmentInfo>()?;
    m.add_class::<publisher::Publisher>()?;
    m.add_class::<publisher::Transaction>()?;
    m.add_class::<consumer::Consumer>()?;
    Ok(())
}
