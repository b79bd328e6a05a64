//! Rules → Plan.
use super::Plan;
use crate::rules::{Diagnostics, Loaded};

/// Compiles loaded rule sets into a plan, or returns every problem found.
pub fn compile(loaded: &Loaded) -> Result<Plan, Diagnostics> {
    if !loaded.diagnostics.is_empty() {
        return Err(loaded.diagnostics.clone());
    }
    Ok(Plan::default())
}
