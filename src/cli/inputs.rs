//! What the offline subcommands (`test`, `audit`, `replay`) read: a rules
//! directory compiled into a plan, a rule set named on the command line, and
//! the input files below the paths given.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use super::output::stderr_line;
use crate::plan::{Plan, RuleSetId, compile};
use crate::rules::load_dir;

/// Directory levels read below an input directory.
pub const MAX_DIRECTORY_DEPTH: usize = 16;

/// The plan of the rule files in `dir`; every problem is printed to stderr
/// before the error.
pub fn compile_rules(dir: &Path) -> anyhow::Result<Plan> {
    let loaded =
        load_dir(dir).with_context(|| format!("cannot load rules from {}", dir.display()))?;
    match compile(&loaded) {
        Ok(plan) => Ok(plan),
        Err(diagnostics) => {
            stderr_line(&diagnostics);
            bail!(
                "{}: {} problem(s) in the rule files",
                dir.display(),
                diagnostics.len()
            );
        }
    }
}

/// The rule set `name` of `plan` (loaded from `dir`), as
/// `/validate/{ruleset}` would pick it; `None` for all of them.
pub fn rule_set(plan: &Plan, name: Option<&str>, dir: &Path) -> anyhow::Result<Option<RuleSetId>> {
    name.map(|name| {
        plan.rule_set_id(name)
            .with_context(|| format!("no rule set named {name:?} in {}", dir.display()))
    })
    .transpose()
}

/// `path` itself when it is not a directory (or is `-`), else the files
/// below it whose extension is one of `extensions`, in name order, at most
/// [`MAX_DIRECTORY_DEPTH`] levels down.
pub fn files(path: &Path, extensions: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    collect(path, extensions, 0, &mut found)?;
    Ok(found)
}

fn collect(
    path: &Path,
    extensions: &[&str],
    depth: usize,
    found: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    if path == Path::new("-") || !path.is_dir() {
        found.push(path.to_owned());
        return Ok(());
    }
    if depth >= MAX_DIRECTORY_DEPTH {
        bail!(
            "{}: more than {MAX_DIRECTORY_DEPTH} directory levels",
            path.display()
        );
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("cannot read {}", path.display()))?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect(&entry, extensions, depth + 1, found)?;
        } else if entry
            .extension()
            .and_then(|ext| ext.to_str())
            .is_some_and(|ext| extensions.contains(&ext))
        {
            found.push(entry);
        }
    }
    Ok(())
}
