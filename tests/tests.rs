//! kadmit's integration tests: one binary, one module per concern.

mod golden;
mod schema;
