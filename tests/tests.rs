//! kadmit's integration tests: one binary, one module per concern.

mod adversarial;
mod bundled_updates;
mod cel_equivalence;
mod cli;
mod conformance;
mod docs;
mod engine;
mod external;
mod fixtures;
mod golden;
mod in_tree;
mod in_tree_properties;
mod observe;
mod path_equivalence;
mod properties;
mod reload;
mod schema;
mod server;
mod verify;
mod webhook_config;
