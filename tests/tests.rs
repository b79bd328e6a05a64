//! kadmit's integration tests: one binary, one module per concern.

mod fixtures;
mod golden;
mod properties;
mod schema;
mod webhook_config;
