//! The `courant._courant` extension module.
use pyo3::prelude::*;

#[pymodule]
fn _courant(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
