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

/// Why a rules directory without a rule set is refused, by every command
/// that reads one, as the server refuses it on reload: whatever it judged,
/// it would pass for judged.
pub const NO_RULE_SETS: &str = "no rule sets: the directory holds no rule files (*.yaml, \
     *.yml, read without descending), so nothing would be judged";

/// The plan of the rule files in `dir`, which judges something: as
/// [`compile_rules`], and a directory without a rule set is an error.
pub fn judging_rules(dir: &Path) -> anyhow::Result<Plan> {
    let plan = compile_rules(dir)?;
    if plan.rule_sets().is_empty() {
        bail!("{}: {NO_RULE_SETS}", dir.display());
    }
    Ok(plan)
}

/// The plan of the rule files in `dir`; every problem is printed to stderr
/// before the error. A directory without a rule set gives an empty plan
/// (`kadmit replay` compares with one: what adding rules changes).
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
/// below it whose extension is one of `extensions` (or, when `rotated`, one
/// of them and a rotation number: `reviews.jsonl.1`), in name order, at most
/// [`MAX_DIRECTORY_DEPTH`] levels down. An entry with such a name that is
/// not a regular file is an error. Links to directories below `path` are
/// not followed, as `kubectl apply -R` does not follow them (each is named
/// on stderr): a few links to links fan out to millions of paths, and
/// lead out of the tree.
pub fn files(path: &Path, extensions: &[&str], rotated: bool) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    collect(path, extensions, rotated, 0, &mut found)?;
    Ok(found)
}

fn collect(
    path: &Path,
    extensions: &[&str],
    rotated: bool,
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
        let linked = entry
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink());
        if linked && entry.is_dir() {
            stderr_line(format_args!(
                "{}: a link to a directory, not followed (name its target to read it)",
                entry.display()
            ));
        } else if entry.is_dir() {
            collect(&entry, extensions, rotated, depth + 1, found)?;
        } else if has_extension(&entry, extensions, rotated) {
            // A FIFO or device would block or never end.
            if !entry.is_file() {
                bail!(
                    "{}: not a regular file (a dangling link, a FIFO or a device)",
                    entry.display()
                );
            }
            found.push(entry);
        }
    }
    Ok(())
}

/// Whether `path` ends in one of `extensions`, or (when `rotated`) in one of
/// them and a rotation number (`reviews.jsonl.2`, as `serve --record`
/// rotates).
fn has_extension(path: &Path, extensions: &[&str], rotated: bool) -> bool {
    // A name that is not UTF-8 is read all the same: the extension is ASCII.
    let Some(name) = path.file_name().map(|name| name.to_string_lossy()) else {
        return false;
    };
    let name: &str = &name;
    let name = match name.rsplit_once('.') {
        Some((rest, number))
            if rotated && !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) =>
        {
            rest
        }
        _ => name,
    };
    name.rsplit_once('.')
        .is_some_and(|(_, extension)| extensions.contains(&extension))
}
