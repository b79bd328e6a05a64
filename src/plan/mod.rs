//! The immutable, compiled form of a set of rule files, and its index.
mod compile;
pub mod path;
pub use compile::compile;

/// Identifies a rule set within a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleSetId(pub u32);

/// The compiled rules.
#[derive(Debug, Default)]
pub struct Plan {
    generation: u64,
}

impl Plan {
    /// The generation number the store gave this plan.
    pub fn generation(&self) -> u64 {
        self.generation
    }
    /// Sets the generation before the plan is shared.
    pub fn with_generation(mut self, generation: u64) -> Self {
        self.generation = generation;
        self
    }
    /// Looks up a rule set by name.
    pub fn rule_set_id(&self, _name: &str) -> Option<RuleSetId> {
        None
    }
}
