//! `kadmit policies DIR`: print the rules as the API server's in-tree
//! admission policies (a ValidatingAdmissionPolicy and its binding for a
//! rule's deny entries, a MutatingAdmissionPolicy and its binding for its
//! mutations), or write them as files with `--output-dir` (one file per
//! rule, for the API server's `staticManifestsDir`).
//!
//! Rules with no in-tree form are listed on stderr with the reason. By
//! default they make the command fail; with `--partial` the others are
//! written and those rules stay in the webhook. Rules that translate with
//! a difference (a status code, a message, a chain of mutating rules or
//! writes whose order the API server may not keep) are listed on stderr
//! too, and written. `--output-dir` removes the `*.kadmit.dev.yaml` files it did
//! not write this time, saying so on stderr.
//!
//! Exit codes: 0 with the policies written, 1 when the rules have problems
//! or (without `--partial`) a rule has no translation, 2 when the directory
//! or the output directory is unusable.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use super::output::stderr_line;
use crate::in_tree::{self, Policies};
use crate::plan::compile;
use crate::rules::load_dir;

/// Arguments of `kadmit policies`.
#[derive(Debug, Args)]
pub struct PoliciesArgs {
    /// Directory of rule files (its top-level *.yaml and *.yml files).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Write one file per rule (`{ruleset}.{rule}.kadmit.dev.yaml`, its
    /// policies and bindings) into this directory instead of printing.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Write the rules that translate even when some do not (those stay in
    /// the webhook); without it, any rule without a translation fails.
    #[arg(long)]
    pub partial: bool,
}

/// Prints or writes the policies.
pub fn run(args: PoliciesArgs) -> anyhow::Result<ExitCode> {
    let loaded = load_dir(&args.dir)?;
    let plan = match compile(&loaded) {
        Ok(plan) if plan.rule_sets().is_empty() => {
            stderr_line(format!(
                "{}: {}",
                args.dir.display(),
                super::inputs::NO_RULE_SETS
            ));
            return Ok(ExitCode::from(1));
        }
        Ok(plan) => plan,
        Err(diagnostics) => {
            for diagnostic in diagnostics.iter() {
                stderr_line(diagnostic);
            }
            return Ok(ExitCode::from(1));
        }
    };
    let policies = in_tree::policies(&plan);
    for untranslated in &policies.untranslated {
        stderr_line(format!(
            "{}/{}: not translated: {}",
            untranslated.rule_set, untranslated.rule, untranslated.reason
        ));
    }
    // Written all the same: the API server decides as kadmit does, and
    // answers otherwise only in these.
    for policy in &policies.policies {
        for difference in &policy.differences {
            stderr_line(format!(
                "{}/{}: translated, but differs from the webhook: {difference}",
                policy.rule_set, policy.rule
            ));
        }
    }
    if !policies.untranslated.is_empty() && !args.partial {
        stderr_line(format!(
            "{} of {} rules have no in-tree form; pass --partial to write the others \
             and keep these in the webhook",
            policies.untranslated.len(),
            plan.rules().len()
        ));
        return Ok(ExitCode::from(1));
    }
    match &args.output_dir {
        Some(dir) => write_files(dir, &policies)?,
        None => {
            let text = in_tree::to_yaml(&policies)?;
            let mut stdout = std::io::stdout().lock();
            if let Err(error) = stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                // A closed pipe (`| head`) is the reader's choice, not a failure.
                if error.kind() != std::io::ErrorKind::BrokenPipe {
                    return Err(error).context("writing the policies");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What the files `--output-dir` writes end with; a file of that name the
/// run did not write is a rule's that no longer translates (or is gone).
const FILE_SUFFIX: &str = ".kadmit.dev.yaml";

fn write_files(dir: &Path, policies: &Policies) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = HashSet::new();
    for policy in &policies.policies {
        let one = Policies {
            policies: vec![policy.clone()],
            untranslated: Vec::new(),
        };
        let name = format!(
            "{}.yaml",
            in_tree::policy_name(&policy.rule_set, &policy.rule)
        );
        let path = dir.join(&name);
        std::fs::write(&path, in_tree::to_yaml(&one)?)
            .with_context(|| format!("writing {}", path.display()))?;
        written.insert(OsString::from(name));
    }
    remove_stale(dir, &written)
}

/// Removes the `*.kadmit.dev.yaml` files in `dir` this run did not write:
/// the API server would go on enforcing, from its `staticManifestsDir`,
/// the policies of rules that now stay in the webhook or were deleted.
/// Other files are left alone; each removal is said on stderr. Removing
/// after writing leaves no moment without the policies that stay.
fn remove_stale(dir: &Path, written: &HashSet<OsString>) -> anyhow::Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name();
        let stale = name
            .to_str()
            .is_some_and(|name| name.ends_with(FILE_SUFFIX) && name.len() > FILE_SUFFIX.len())
            && !written.contains(&name);
        // A directory of that name is not a policy file.
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        if !stale || is_dir {
            continue;
        }
        let path = entry.path();
        std::fs::remove_file(&path).with_context(|| {
            format!(
                "removing {}, the policies of a rule this run did not translate; remove it \
                 by hand, or the API server goes on enforcing them",
                path.display()
            )
        })?;
        stderr_line(format!(
            "removed {}: its rule is no longer translated (or no longer exists), and the API \
             server would go on enforcing it",
            path.display()
        ));
    }
    Ok(())
}
