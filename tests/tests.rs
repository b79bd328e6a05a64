//! kadmit's integration tests: one binary, one module per concern.

mod schema;
mod webhook_config;
